package cachemark.driver;

import static cachemark.driver.Main.message;

import cachemark.driver.Workload.Key;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.locks.LockSupport;

/**
 * One driver process = one cachemark worker: one client, one connection, ops one at a time.
 * A phase's ops come in segments (x-segments): the driver holds the current one and
 * its results only, and reads stdin during go only at a segment's end.
 */
final class Driver {
    static final int PROTOCOL = 3;
    static final int OK = 0, HIT = 1, MISS = 2, ERR = 3;
    private static final int REFUSED = -1; // a write the server answered "not stored"
    private static final int GET = 0, SET = 1, DELETE = 2, EXISTS = 3, GET_MANY = 4;
    private static final List<String> OPS = List.of("get", "set", "delete", "exists", "get_many");

    private final Wire wire;
    private final String name;
    private final String library;
    private final String version;
    private volatile boolean stop;

    private Store store;
    private Workload work;
    private String namespace;
    private int worker;
    private int ttl;
    private int many;
    private int canaries;

    // the loaded batch, or the current segment of a phase
    private Segment segment = Segment.EMPTY;

    // per go: error kinds seen (outcome 3 + index), samples, canary errors
    private final List<String> kinds = new ArrayList<>(List.of("verify", "dropped_write"));
    private List<String> samples;
    private Map<List<Object>, Integer> extra;
    private String entryName;

    Driver(Wire wire, String name, String library, String version) {
        this.wire = wire;
        this.name = name;
        this.library = library;
        this.version = version;
    }

    void interrupt() {
        stop = true;
    }

    void serve() throws IOException {
        wire.send(message("type", "hello", "protocol", PROTOCOL, "driver", name,
                "runtime", "java " + Runtime.version().feature() + "." + Runtime.version().interim() + "."
                        + Runtime.version().update(),
                "runtime_detail", System.getProperty("java.vm.name") + " " + System.getProperty("java.vm.version"),
                "libraries", Map.of(library, version)));
        Wire.Message msg;
        while ((msg = wire.read()) != null) {
            switch (msg.type()) {
                case "setup" -> setup(msg.fields());
                case "prefill" -> prefill(msg.fields(), msg.blob());
                case "ops" -> load(msg.fields(), msg.blob());
                case "go" -> go(msg.fields());
                case "bye" -> {
                    wire.send(message("type", "bye"));
                    return;
                }
                default -> wire.send(error("protocol", "unknown message " + Json.write(msg.type())));
            }
        }
    }

    private static Map<String, Object> error(String kind, String text) {
        return message("type", "error", "kind", kind, "message", text.replaceAll("\\s+", " "));
    }

    // -- setup, prefill, ops ------------------------------------------------------------

    private void setup(Map<String, Object> msg) throws IOException {
        Setup setup = Setup.of(msg);
        namespace = (String) msg.get("namespace");
        worker = Setup.number(msg.get("worker"), 0).intValue();
        double ttlS = Setup.number(msg.get("ttl_s"), 0.0).doubleValue();
        ttl = ttlS > 0 ? (int) Math.ceil(ttlS) : 0;
        many = Setup.number(msg.get("get_many_count"), 10).intValue();
        @SuppressWarnings("unchecked")
        Map<String, Object> sizes = (Map<String, Object>) msg.get("sizes");
        work = new Workload(namespace, Setup.number(msg.get("keys"), 0).intValue(), (String) sizes.get("kind"),
                Workload.ints((List<?>) sizes.get("sizes")), (String) msg.get("filler"));
        try {
            store = switch (setup.scheme()) {
                case "null" -> new Store.Null(library);
                case "redis", "rediss", "valkey", "valkeys" -> switch (library) {
                    case "jedis" -> new JedisStore(setup);
                    case "lettuce" -> new LettuceStore(setup);
                    default -> throw new IllegalArgumentException(name + " has no store for " + setup.scheme() + "://");
                };
                case "memcached" -> {
                    if (!library.equals("spymemcached")) {
                        throw new IllegalArgumentException(name + " has no store for memcached://");
                    }
                    yield new SpyStore(setup);
                }
                default -> throw new IllegalArgumentException(name + " has no store for " + setup.scheme() + "://");
            };
        } catch (Exception e) {
            wire.send(error("setup", Errors.describe(e)));
            return;
        }
        wire.send(message("type", "ready", "client", store.client(), "client_library", store.library(),
                "client_version", version));
    }

    private void prefill(Map<String, Object> msg, byte[] blob) throws IOException {
        int n = Setup.number(msg.get("count"), 0).intValue();
        ByteBuffer in = ByteBuffer.wrap(blob).order(ByteOrder.LITTLE_ENDIAN);
        int written = 0, refused = 0;
        String sample = null;
        for (int i = 0; i < n && !stop; i++) {
            int k = in.getInt(4 * i);
            int size = in.getInt(4 * (n + i));
            String failure;
            try {
                failure = store.set(work.keys[k], work.value(k, size), ttl) ? null : "write returned false (not stored)";
            } catch (Exception e) {
                failure = Errors.describe(e);
            }
            if (failure == null) {
                written++;
            } else {
                refused++;
                sample = sample == null ? failure : sample;
                // one refusal fails the prefill; spymemcached reconnects after a SERVER_ERROR, so
                // each further write would wait out a reconnect (61 s for a refused prefill)
                break;
            }
        }
        wire.send(message("type", "prefilled", "written", written, "refused", refused, "error_sample", sample,
                "interrupted", stop, "stopped_at_refusal", refused > 0));
    }

    /**
     * One ops message: a whole batch, or one segment of a phase (x-segments), with what the loop
     * wants to know of each entry worked out once, outside the clock.
     */
    private record Segment(int[][] entries, String[] names, boolean[] writes, boolean[] verifiable,
                           boolean[] multi, int steps, byte[] entry, int[] key, int[] size, long[] at,
                           boolean more) {
        static final Segment EMPTY = new Segment(new int[0][], new String[0], new boolean[0], new boolean[0],
                new boolean[0], 1, new byte[0], new int[0], new int[0], null, false);

        int count() {
            return entry.length;
        }
    }

    private void load(Map<String, Object> msg, byte[] blob) throws IOException {
        Segment loaded = parse(msg, blob);
        if (loaded != null) {
            segment = loaded;
            wire.send(message("type", "loaded", "count", loaded.count()));
        }
    }

    /** An ops message's segment, or null once it is answered with an error (an op this driver does not run). */
    private Segment parse(Map<String, Object> msg, byte[] blob) throws IOException {
        int n = Setup.number(msg.get("count"), 0).intValue();
        List<?> listed = (List<?>) msg.get("entries");
        int[][] entries = new int[listed.size()][];
        List<String> unknown = new ArrayList<>();
        for (int e = 0; e < entries.length; e++) {
            List<?> steps = (List<?>) listed.get(e);
            int[] codes = new int[steps.size()];
            for (int s = 0; s < codes.length; s++) {
                codes[s] = OPS.indexOf(String.valueOf(steps.get(s)));
                if (codes[s] < 0 && !unknown.contains(String.valueOf(steps.get(s)))) {
                    unknown.add(String.valueOf(steps.get(s)));
                }
            }
            entries[e] = codes;
        }
        if (!unknown.isEmpty()) {
            wire.send(error("unsupported", name + " does not run " + String.join(", ", unknown)));
            return null;
        }
        String[] names = new String[entries.length];
        boolean[] writes = new boolean[entries.length];
        boolean[] verifiable = new boolean[entries.length];
        boolean[] multi = new boolean[entries.length];
        int most = 1;
        for (int e = 0; e < entries.length; e++) {
            int[] steps = entries[e];
            names[e] = String.join("+", Arrays.stream(steps).mapToObj(OPS::get).toList());
            writes[e] = Arrays.stream(steps).anyMatch(s -> s == SET);
            int last = steps[steps.length - 1];
            verifiable[e] = last == GET || last == GET_MANY;
            multi[e] = Arrays.stream(steps).anyMatch(s -> s == GET_MANY);
            most = Math.max(most, steps.length);
        }
        ByteBuffer in = ByteBuffer.wrap(blob).order(ByteOrder.LITTLE_ENDIAN);
        byte[] opEntry = Arrays.copyOf(blob, n);
        int[] opKey = new int[n];
        int[] opSize = new int[n];
        for (int i = 0; i < n; i++) {
            opKey[i] = in.getInt(n + 4 * i);
            opSize[i] = in.getInt(5 * n + 4 * i);
        }
        long[] opAt = null;
        if (Boolean.TRUE.equals(msg.get("schedule"))) {
            opAt = new long[n];
            for (int i = 0; i < n; i++) {
                opAt[i] = in.getLong(9 * n + 8 * i);
            }
        }
        return new Segment(entries, names, writes, verifiable, multi, most, opEntry, opKey, opSize, opAt,
                Boolean.TRUE.equals(msg.get("more")));
    }

    // -- the timed loop -----------------------------------------------------------------

    /** The results of the current segment (or pass through a cycling batch): sent in its part, then reused. */
    private static final class Results {
        byte[] outcome = new byte[0];
        long[] start = new long[0];
        long[] latency = new long[0];

        /** Room for a segment of n ops (never more than the largest segment seen). */
        void fit(int n) {
            if (outcome.length < n) {
                outcome = new byte[n];
                start = new long[n];
                latency = new long[n];
            }
        }
    }

    private static int every(Object fraction) {
        double f = Setup.number(fraction, 0.0).doubleValue();
        return f > 0 ? (int) (1 / f) : 0;
    }

    /**
     * Runs the loaded segment and, while it says "more", the segments that follow it (each waiting in
     * stdin: cachemark sends one ahead), a part at the end of each; a cycling batch runs pass after pass,
     * a part at the end of each. done holds the ops since the last part, and the whole go in its other fields.
     */
    private void go(Map<String, Object> msg) throws IOException {
        Segment seg = segment;
        int readEvery = every(msg.get("verify_reads"));
        int writeEvery = every(msg.get("verify_writes"));
        boolean cycling = Boolean.TRUE.equals(msg.get("cycle"));
        long grace = msg.get("stop_after_failing_s") instanceof Number g ? (long) (g.doubleValue() * 1e9) : -1;
        samples = new ArrayList<>();
        extra = new LinkedHashMap<>();
        long[] bytesIn = new long[seg.entries().length];
        long[] bytesOut = new long[seg.entries().length];
        Results results = new Results();
        Key[] keys = work.keys;
        Key[] manyKeys = new Key[many];
        byte[][] manyValues = new byte[many][];
        int reads = 0, writesDone = 0;
        boolean stopped = false; // by the error policy
        boolean halted = false; // the deadline, SIGINT or the error policy ended the go inside a segment

        long cpu0 = cpuNanos();
        long start = System.nanoTime();
        long deadline = msg.get("duration_s") instanceof Number d ? start + (long) (d.doubleValue() * 1e9)
                : Long.MAX_VALUE;
        long lastOk = start;
        long failingSince = -1;
        int n;
        int i;
        long[] at;
        while (true) {
            // one segment, or one pass through a cycling batch: its arrays in locals for the loop
            n = seg.count();
            at = seg.at();
            boolean cycle = cycling && at == null && n > 0;
            int[][] entries = seg.entries();
            String[] names = seg.names();
            boolean[] writes = seg.writes();
            boolean[] verifiable = seg.verifiable();
            boolean[] multi = seg.multi();
            byte[] opEntry = seg.entry();
            int[] opKey = seg.key();
            int[] opSize = seg.size();
            // each step's answer, read after the clock stops
            Object[] answers = new Object[seg.steps()];
            if (bytesIn.length < entries.length) {
                bytesIn = Arrays.copyOf(bytesIn, entries.length);
                bytesOut = Arrays.copyOf(bytesOut, entries.length);
            }
            results.fit(n);
            byte[] outcomes = results.outcome;
            long[] starts = results.start;
            long[] latencies = results.latency;
            i = 0;
            while (i < n) {
                int e = opEntry[i] & 0xFF;
                int k = opKey[i];
                Key key = keys[k];
                byte[] value = writes[e] ? work.value(k, opSize[i]) : null;
                if (multi[e]) {
                    for (int m = 0; m < many; m++) {
                        manyKeys[m] = keys[(k + m) % keys.length];
                    }
                }
                if (at != null) {
                    long due = start + at[i];
                    if (due >= deadline) {
                        halted = true;
                        break;
                    }
                    waitUntil(due);
                }
                boolean verify = false;
                if (readEvery > 0 && verifiable[e] && ++reads >= readEvery) {
                    reads = 0;
                    verify = true;
                }
                int[] steps = entries[e];
                int ran = 0;
                int code;
                Throwable failure = null;
                long t0 = System.nanoTime();
                long t1;
                try {
                    code = MISS;
                    // a sequence (exists+get) is one timed unit; a "no" from exists ends it as a miss
                    while (ran < steps.length) {
                        code = step(steps[ran], key, value, manyKeys, answers, ran);
                        ran++;
                        if (code == REFUSED || (steps[ran - 1] == EXISTS && code != HIT)) {
                            break;
                        }
                    }
                    t1 = System.nanoTime();
                } catch (Exception ex) {
                    t1 = System.nanoTime();
                    failure = ex;
                    code = ERR;
                }
                entryName = names[e];
                if (failure != null) {
                    String kind = Errors.kind(failure);
                    sample(kind, Errors.describe(failure));
                    code = kindCode(kind);
                } else {
                    code = settle(steps, ran, code, k, key, verify, answers, manyKeys, manyValues, bytesIn, e);
                }
                // the key (get_many: every key) of each step sent, the failing one included, and a write's value
                long sent = value == null ? 0 : value.length;
                for (int s = 0, sentSteps = Math.min(steps.length, ran + (failure != null ? 1 : 0)); s < sentSteps; s++) {
                    if (steps[s] == GET_MANY) {
                        for (Key m : manyKeys) {
                            sent += m.bytes().length;
                        }
                    } else {
                        sent += key.bytes().length;
                    }
                }
                bytesOut[e] += sent;
                outcomes[i] = (byte) code;
                starts[i] = t0 - start;
                latencies[i] = t1 - t0;
                i++;
                if (code < ERR) {
                    lastOk = t1;
                    failingSince = -1;
                    if (writeEvery > 0 && writes[e] && code == OK && ++writesDone >= writeEvery) {
                        writesDone = 0;
                        canary(e, opSize[i - 1]);
                    }
                } else {
                    if (failingSince < 0) {
                        failingSince = t1;
                    }
                    if (grace >= 0 && t1 - Math.max(lastOk, failingSince) >= grace) {
                        stopped = true;
                        halted = true;
                        break;
                    }
                }
                if (stop || t1 >= deadline) {
                    halted = true;
                    break;
                }
            }
            if (halted || !(seg.more() || cycle)) {
                break;
            }
            // the segment's (or pass's) end: its results go in a part, then the next segment or pass
            send(message("type", "part", "count", n, "error_kinds", kinds, "blob", 17L * n), results, n);
            if (seg.more()) {
                Wire.Message next = wire.read();
                if (next == null) {
                    return; // cachemark went away
                }
                if (!next.type().equals("ops")) {
                    wire.send(error("protocol", "expected the next ops segment during go, got "
                            + Json.write(next.type())));
                    return;
                }
                seg = parse(next.fields(), next.blob());
                if (seg == null) {
                    return;
                }
                segment = seg;
            }
        }
        long finish = System.nanoTime();
        long missed = 0;
        if (at != null && deadline != Long.MAX_VALUE) {
            for (int m = i; m < n; m++) {
                missed += start + at[m] < deadline ? 1 : 0;
            }
        }
        double cpu = (cpuNanos() - cpu0) / 1e9;
        if (halted && seg.more()) {
            // stopped inside a segment that has a successor: cachemark sent that one ahead; drop it
            if (wire.read() == null) {
                return;
            }
        }
        List<List<Object>> extraErrors = new ArrayList<>();
        extra.forEach((entryKind, count) -> extraErrors.add(List.of(entryKind.get(0), entryKind.get(1), count)));
        int count = i;
        send(message("type", "done", "count", count, "wall_ns", finish - start, "cpu_s", cpu,
                "error_kinds", kinds, "extra_errors", extraErrors, "error_samples", samples,
                "bytes_in", Arrays.stream(bytesIn).boxed().toList(), "bytes_out", Arrays.stream(bytesOut).boxed().toList(),
                "missed", missed, "stopped_on_errors", stopped, "interrupted", stop, "blob", 17L * count),
                results, count);
    }

    /** part or done: its header line, then the first count results (outcome, start_ns, latency_ns). */
    private void send(Map<String, Object> header, Results results, int count) throws IOException {
        OutputStream out = wire.header(header);
        out.write(results.outcome, 0, count);
        writeLongs(out, results.start, count);
        writeLongs(out, results.latency, count);
        out.flush();
    }

    /** One step of an op: the bare client call. Its answer is kept for after the clock. */
    private int step(int op, Key key, byte[] value, Key[] manyKeys, Object[] answers, int index) throws Exception {
        switch (op) {
            case GET -> {
                byte[] v = store.get(key);
                answers[index] = v;
                return v == null ? MISS : HIT;
            }
            case SET -> {
                return store.set(key, value, ttl) ? OK : REFUSED;
            }
            case DELETE -> {
                return store.delete(key) ? HIT : MISS;
            }
            case EXISTS -> {
                return store.exists(key) ? HIT : MISS;
            }
            default -> {
                answers[index] = store.getMany(manyKeys);
                return HIT; // settled after the clock: a hit when every key came back
            }
        }
    }

    /** After the clock: bytes received, get_many's hit or miss, the read check, a refused write. */
    private int settle(int[] steps, int ran, int code, int k, Key key, boolean verify, Object[] answers,
                       Key[] manyKeys, byte[][] manyValues, long[] bytesIn, int e) {
        if (code == REFUSED) {
            sample("server", key.text() + ": write returned false (not stored)");
            return kindCode("server");
        }
        for (int s = 0; s < ran; s++) {
            boolean last = s == steps.length - 1;
            if (steps[s] == GET && answers[s] instanceof byte[] v) {
                bytesIn[e] += v.length;
                if (last && verify && !work.valid(k, v)) {
                    return verifyFailed(key, v);
                }
            } else if (steps[s] == GET_MANY) {
                store.values(answers[s], manyKeys, manyValues);
                int found = 0;
                int bad = -1;
                for (int m = 0; m < many; m++) {
                    byte[] v = manyValues[m];
                    if (v != null) {
                        found++;
                        bytesIn[e] += v.length;
                        if (bad < 0 && !work.valid((k + m) % work.keys.length, v)) {
                            bad = m;
                        }
                    }
                }
                if (last) {
                    if (found < many) {
                        code = MISS;
                    } else if (verify && bad >= 0) {
                        return verifyFailed(manyKeys[bad], manyValues[bad]);
                    }
                }
            }
            answers[s] = null;
        }
        return code;
    }

    private int verifyFailed(Key key, byte[] value) {
        sample("verify", key.text() + ": unexpected value of " + value.length + " B");
        return kindCode("verify");
    }

    private int kindCode(String kind) {
        int index = kinds.indexOf(kind);
        if (index < 0) {
            kinds.add(kind);
            index = kinds.size() - 1;
        }
        return ERR + index;
    }

    private void sample(String kind, String text) {
        if (samples.size() < 5) {
            String line = entryName + ": " + kind + ": " + text;
            samples.add(line.length() > 300 ? line.substring(0, 300) : line);
        }
    }

    /** A write read back at once (untimed, its own key): a silently dropped write is an error. */
    private void canary(int entry, int size) {
        canaries++;
        Key key = Key.of(namespace + "verify:" + worker + ":" + canaries);
        byte[] value = work.valueFor(key, size);
        String kind = null;
        String text = null;
        try {
            store.set(key, value, ttl);
            byte[] back = store.get(key);
            store.delete(key);
            if (back == null || !Arrays.equals(back, value)) {
                kind = "dropped_write";
                text = key.text() + ": a value just written read back " + (back == null ? "as a miss" : "different");
            }
        } catch (Exception ex) {
            kind = Errors.kind(ex);
            text = Errors.describe(ex);
        }
        if (kind != null) {
            extra.merge(List.of(entry, kind), 1, Integer::sum);
            sample(kind, text);
        }
    }

    /** Open loop: sleep until an op is due, then spin the last stretch (a sleep overshoots ~50 µs). */
    private static void waitUntil(long due) {
        long now;
        while ((now = System.nanoTime()) < due) {
            if (due - now > 100_000) {
                LockSupport.parkNanos(due - now - 80_000);
            } else {
                Thread.onSpinWait();
            }
        }
    }

    private static long cpuNanos() {
        return ProcessHandle.current().info().totalCpuDuration().map(Duration::toNanos).orElse(0L);
    }

    private static void writeLongs(OutputStream out, long[] values, int count) throws IOException {
        ByteBuffer buf = ByteBuffer.allocate(1 << 16).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < count; i++) {
            if (!buf.hasRemaining()) {
                out.write(buf.array(), 0, buf.position());
                buf.clear();
            }
            buf.putLong(values[i]);
        }
        out.write(buf.array(), 0, buf.position());
    }
}
