package cachemark.driver;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.zip.CRC32;

/** The run's keys, values and checks (docs/contracts.md: the self-verifying value format). */
final class Workload {
    /** A key as both clients want it: text (spymemcached) and bytes (Jedis, Lettuce). */
    record Key(String text, byte[] bytes) {
        static Key of(String text) {
            return new Key(text, text.getBytes(StandardCharsets.UTF_8));
        }
    }

    private static final int HEADER = 12; // "cm:" + 8 hex digits + ":"

    final Key[] keys;
    private final byte[][] headers;
    private final String kind;
    private final int[] sizes;
    private final byte[] period; // setup's filler: one period of the value format's text (x-value-format)
    private byte[] filler;

    Workload(String namespace, int count, String kind, int[] sizes, String period) {
        this.period = period.getBytes(StandardCharsets.ISO_8859_1);
        this.keys = new Key[count];
        this.headers = new byte[count][];
        for (int i = 0; i < count; i++) {
            keys[i] = Key.of(namespace + i);
            headers[i] = header(keys[i]);
        }
        this.kind = kind;
        this.sizes = sizes;
        int max = Math.max(HEADER, Arrays.stream(sizes).max().orElse(HEADER));
        filler = filler(max);
    }

    private byte[] filler(int size) {
        byte[] f = new byte[size];
        for (int at = 0; at < size; at += period.length) {
            System.arraycopy(period, 0, f, at, Math.min(period.length, size - at));
        }
        return f;
    }

    private static byte[] header(Key key) {
        CRC32 crc = new CRC32();
        crc.update(key.bytes());
        return String.format("cm:%08x:", crc.getValue()).getBytes(StandardCharsets.US_ASCII);
    }

    /** The value of key k at this size. */
    byte[] value(int k, int size) {
        return build(headers[k], size);
    }

    /** The value for a key outside the key space (a canary). */
    byte[] valueFor(Key key, int size) {
        return build(header(key), size);
    }

    private byte[] build(byte[] head, int size) {
        byte[] v = new byte[size];
        System.arraycopy(head, 0, v, 0, Math.min(size, HEADER));
        if (size > HEADER) {
            ensureFiller(size);
            System.arraycopy(filler, HEADER, v, HEADER, size - HEADER);
        }
        return v;
    }

    private void ensureFiller(int size) {
        if (size > filler.length) { // a size outside setup's sizes (a hand-made op stream)
            filler = filler(size);
        }
    }

    /** Whether a read value is key k's value at a size the run allows. */
    boolean valid(int k, byte[] v) {
        int n = v.length;
        boolean allowed = kind.equals("range") ? n >= sizes[0] && n <= sizes[1]
                : Arrays.stream(sizes).anyMatch(s -> s == n);
        if (!allowed || n > filler.length) {
            return false;
        }
        byte[] head = headers[k];
        int h = Math.min(n, HEADER);
        return Arrays.equals(v, 0, h, head, 0, h) && (n <= HEADER || Arrays.equals(v, HEADER, n, filler, HEADER, n));
    }

    static int[] ints(List<?> list) {
        return list.stream().mapToInt(o -> ((Number) o).intValue()).toArray();
    }
}
