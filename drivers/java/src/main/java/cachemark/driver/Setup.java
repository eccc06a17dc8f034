package cachemark.driver;

import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Where the server is and how to reach it: setup's fields the clients need. */
record Setup(String scheme, List<InetSocketAddress> servers, String username, String password, int db,
             boolean tls, double timeoutS, double connectTimeoutS) {

    static Setup of(Map<String, Object> msg) {
        Object scheme = msg.get("scheme");
        List<InetSocketAddress> servers = new ArrayList<>();
        if (msg.get("servers") instanceof List<?> list) {
            for (Object server : list) {
                List<?> pair = (List<?>) server;
                servers.add(new InetSocketAddress((String) pair.get(0), ((Number) pair.get(1)).intValue()));
            }
        }
        return new Setup(scheme == null ? "null" : (String) scheme, servers, (String) msg.get("username"),
                (String) msg.get("password"), number(msg.get("db"), 0).intValue(), Boolean.TRUE.equals(msg.get("tls")),
                number(msg.get("timeout_s"), 5.0).doubleValue(), number(msg.get("connect_timeout_s"), 2.0).doubleValue());
    }

    static Number number(Object value, Number fallback) {
        return value instanceof Number n ? n : fallback;
    }

    /** The one server of a redis target (Jedis and Lettuce here talk to one node). */
    InetSocketAddress server() {
        if (servers.size() != 1) {
            throw new IllegalArgumentException("expected one server, got " + servers.size());
        }
        return servers.get(0);
    }

    String host() {
        return server().getHostString();
    }

    int port() {
        return server().getPort();
    }

    int timeoutMs() {
        return (int) Math.max(1, Math.round(timeoutS * 1000));
    }

    int connectTimeoutMs() {
        return (int) Math.max(1, Math.round(connectTimeoutS * 1000));
    }
}
