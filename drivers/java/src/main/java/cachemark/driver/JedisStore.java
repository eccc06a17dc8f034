package cachemark.driver;

import cachemark.driver.Workload.Key;
import java.util.List;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;

/** Jedis as an application builds it for one server: one Jedis, one connection, its binary API. */
final class JedisStore implements Store {
    private final Jedis jedis;

    JedisStore(Setup setup) {
        // the constructor connects (and authenticates, selects the db): a refusal is a setup error
        jedis = new Jedis(new HostAndPort(setup.host(), setup.port()), DefaultJedisClientConfig.builder()
                .connectionTimeoutMillis(setup.connectTimeoutMs())
                .socketTimeoutMillis(setup.timeoutMs())
                .user(setup.username())
                .password(setup.password())
                .database(setup.db())
                .ssl(setup.tls())
                .build());
    }

    @Override
    public byte[] get(Key key) {
        return jedis.get(key.bytes());
    }

    @Override
    public boolean set(Key key, byte[] value, int ttl) {
        String reply = ttl > 0 ? jedis.setex(key.bytes(), ttl, value) : jedis.set(key.bytes(), value);
        return "OK".equals(reply);
    }

    @Override
    public boolean delete(Key key) {
        return jedis.del(key.bytes()) > 0;
    }

    @Override
    public boolean exists(Key key) {
        return jedis.exists(key.bytes());
    }

    @Override
    public Object getMany(Key[] keys) {
        byte[][] raw = new byte[keys.length][];
        for (int i = 0; i < keys.length; i++) {
            raw[i] = keys[i].bytes();
        }
        return jedis.mget(raw);
    }

    @Override
    public void values(Object answer, Key[] keys, byte[][] out) {
        List<?> list = (List<?>) answer;
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte[]) list.get(i);
        }
    }

    @Override
    public String client() {
        return "redis.clients.jedis.Jedis";
    }

    @Override
    public String library() {
        return "jedis";
    }
}
