package cachemark.driver;

import cachemark.driver.Workload.Key;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Map;
import net.spy.memcached.DefaultConnectionFactory;
import net.spy.memcached.MemcachedClient;

/**
 * spymemcached as an application builds it: new MemcachedClient(factory, servers) with the
 * default connection factory (only its operation timeout set from setup) and the default
 * SerializingTranscoder. That transcoder stores a byte[] as its raw bytes under a byte-array
 * flag (gzipped over 16 KiB, as the application's values would be) and gives the same bytes
 * back, so reads can be verified.
 */
final class SpyStore implements Store {
    private final MemcachedClient memcached;

    SpyStore(Setup setup) throws java.io.IOException {
        long timeoutMs = setup.timeoutMs();
        DefaultConnectionFactory factory = new DefaultConnectionFactory() {
            @Override
            public long getOperationTimeout() {
                return timeoutMs; // a dead server fails each op after this, never hangs the loop
            }
        };
        memcached = new MemcachedClient(factory, setup.servers());
    }

    private static byte[] bytes(Object value) {
        // a value another client stored without the byte-array flag comes back as a String
        return value == null || value instanceof byte[] ? (byte[]) value
                : value.toString().getBytes(StandardCharsets.UTF_8);
    }

    @Override
    public byte[] get(Key key) {
        return bytes(memcached.get(key.text()));
    }

    @Override
    public boolean set(Key key, byte[] value, int ttl) throws Exception {
        return memcached.set(key.text(), ttl, value).get();
    }

    @Override
    public boolean delete(Key key) throws Exception {
        return memcached.delete(key.text()).get();
    }

    /** memcached has no exists: an application asks get and looks for null. */
    @Override
    public boolean exists(Key key) {
        return memcached.get(key.text()) != null;
    }

    @Override
    public Object getMany(Key[] keys) {
        String[] names = new String[keys.length];
        for (int i = 0; i < keys.length; i++) {
            names[i] = keys[i].text();
        }
        return memcached.getBulk(Arrays.asList(names));
    }

    @Override
    public void values(Object answer, Key[] keys, byte[][] out) {
        Map<?, ?> found = (Map<?, ?>) answer;
        for (int i = 0; i < out.length; i++) {
            out[i] = bytes(found.get(keys[i].text()));
        }
    }

    @Override
    public String client() {
        return "net.spy.memcached.MemcachedClient";
    }

    @Override
    public String library() {
        return "spymemcached";
    }
}
