package cachemark.driver;

import cachemark.driver.Workload.Key;

/**
 * One client, one connection, one op at a time: the calls the driver times. Each method is the
 * bare client call; turning the client's answer into values (getMany → values) happens
 * outside the clock.
 */
interface Store {
    /** The value, or null on a miss. */
    byte[] get(Key key) throws Exception;

    /** Whether the server stored it; ttl in whole seconds, 0 for none. */
    boolean set(Key key, byte[] value, int ttl) throws Exception;

    /** Whether a key was removed. */
    boolean delete(Key key) throws Exception;

    boolean exists(Key key) throws Exception;

    /** The client's own answer to a multi-get, read with {@link #values} after the clock stops. */
    Object getMany(Key[] keys) throws Exception;

    /** The multi-get's values in key order, null for each miss. */
    void values(Object answer, Key[] keys, byte[][] out);

    /** "ready"'s client, as the results name it (the class an application builds). */
    String client();

    /** The library, as named in hello's "libraries". */
    String library();

    /** A do-nothing store (setup's scheme null): what the driver's own loop costs. */
    final class Null implements Store {
        private final String library;

        Null(String library) {
            this.library = library;
        }

        @Override public byte[] get(Key key) { return null; }
        @Override public boolean set(Key key, byte[] value, int ttl) { return true; }
        @Override public boolean delete(Key key) { return false; }
        @Override public boolean exists(Key key) { return false; }
        @Override public Object getMany(Key[] keys) { return null; }
        @Override public void values(Object answer, Key[] keys, byte[][] out) { java.util.Arrays.fill(out, null); }
        @Override public String client() { return "cachemark.driver.Store.Null"; }
        @Override public String library() { return library; }
    }
}
