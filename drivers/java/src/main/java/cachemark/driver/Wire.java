package cachemark.driver;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * The protocol's framing (docs/drivers.md): one JSON line per message, and when it has
 * "blob": N, exactly N raw bytes right after its newline.
 */
final class Wire {
    /** A message and its blob (empty when it has none). */
    record Message(Map<String, Object> fields, byte[] blob) {
        String type() {
            return String.valueOf(fields.get("type"));
        }
    }

    private final InputStream in = new BufferedInputStream(new FileInputStream(FileDescriptor.in), 1 << 16);
    private final OutputStream out;

    Wire() {
        // protocol bytes go to the real stdout; anything a library prints goes to stderr
        out = new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16);
        System.setOut(System.err);
    }

    /** The next message, or null at EOF (cachemark went away). */
    @SuppressWarnings("unchecked")
    Message read() throws IOException {
        ByteArrayOutputStream line = new ByteArrayOutputStream(256);
        int b;
        while ((b = in.read()) != '\n') {
            if (b < 0) {
                return null;
            }
            line.write(b);
        }
        Map<String, Object> fields = (Map<String, Object>) Json.parse(line.toString(StandardCharsets.UTF_8));
        int size = fields.get("blob") instanceof Number n ? n.intValue() : 0;
        byte[] blob = in.readNBytes(Math.max(size, 0));
        if (blob.length < size) {
            return null;
        }
        return new Message(fields, blob);
    }

    void send(Map<String, Object> msg) throws IOException {
        header(msg);
        out.flush();
    }

    /** Writes the header line; the caller writes the blob it announces, then flushes. */
    OutputStream header(Map<String, Object> msg) throws IOException {
        out.write(Json.write(msg).getBytes(StandardCharsets.UTF_8));
        out.write('\n');
        return out;
    }
}
