package cachemark.driver;

import java.io.IOException;
import java.io.InputStream;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * cachemark's Java driver: {@code java -jar cachemark-driver.jar <jedis|lettuce|spymemcached>}.
 * It speaks the driver protocol of docs/drivers.md (version 3) on stdin/stdout; cachemark pre-generates
 * the op stream and sends it a segment at a time, this program runs the timed loop and hands back
 * outcomes and latencies in bulk, a part per segment.
 */
public final class Main {
    private Main() {
    }

    public static void main(String[] args) throws IOException {
        String library = args.length == 1 ? args[0] : "";
        if (!library.matches("jedis|lettuce|spymemcached")) {
            System.err.println("usage: java -jar cachemark-driver.jar jedis|lettuce|spymemcached");
            System.exit(2);
        }
        quietLogs();
        Wire wire = new Wire();
        Driver driver = new Driver(wire, "java-" + library, library, versions().getProperty(library, "unknown"));
        // Ctrl-C: the loop stops and reports what it ran (cachemark sends SIGINT to every driver)
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), signal -> driver.interrupt());
        driver.serve();
        System.exit(0); // the clients' I/O threads are not daemons: end them with the process
    }

    /** The clients log through java.util.logging (to stderr): warnings and worse only. */
    private static void quietLogs() {
        System.setProperty("net.spy.log.LoggerImpl", "net.spy.memcached.compat.log.SLF4JLogger");
        Logger root = Logger.getLogger("");
        root.setLevel(Level.WARNING);
        for (var handler : root.getHandlers()) {
            handler.setLevel(Level.WARNING);
        }
    }

    private static Properties versions() throws IOException {
        Properties versions = new Properties();
        try (InputStream in = Main.class.getResourceAsStream("/cachemark-driver-versions.properties")) {
            if (in != null) {
                versions.load(in);
            }
        }
        return versions;
    }

    static Map<String, Object> message(Object... pairs) {
        Map<String, Object> msg = new LinkedHashMap<>();
        for (int i = 0; i < pairs.length; i += 2) {
            msg.put((String) pairs[i], pairs[i + 1]);
        }
        return msg;
    }
}
