package cachemark.driver;

import cachemark.driver.Workload.Key;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.KeyValue;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SocketOptions;
import io.lettuce.core.api.sync.RedisCommands;
import io.lettuce.core.codec.ByteArrayCodec;
import java.time.Duration;
import java.util.List;

/**
 * Lettuce as an application builds it: RedisClient.create(uri).connect(codec).sync() — one
 * connection, byte arrays in and out, default options (auto-reconnect: while the server is
 * down, commands wait in Lettuce's queue and time out after the URI's timeout).
 */
final class LettuceStore implements Store {
    private final RedisCommands<byte[], byte[]> redis;

    LettuceStore(Setup setup) {
        RedisURI.Builder uri = RedisURI.builder()
                .withHost(setup.host())
                .withPort(setup.port())
                .withDatabase(setup.db())
                .withSsl(setup.tls())
                .withTimeout(Duration.ofMillis(setup.timeoutMs()));
        if (setup.password() != null) {
            uri = setup.username() != null ? uri.withAuthentication(setup.username(), setup.password().toCharArray())
                    : uri.withPassword(setup.password().toCharArray());
        }
        RedisClient client = RedisClient.create(uri.build());
        client.setOptions(ClientOptions.builder()
                .socketOptions(SocketOptions.builder().connectTimeout(Duration.ofMillis(setup.connectTimeoutMs())).build())
                .build());
        redis = client.connect(ByteArrayCodec.INSTANCE).sync(); // connects now: a refusal is a setup error
    }

    @Override
    public byte[] get(Key key) {
        return redis.get(key.bytes());
    }

    @Override
    public boolean set(Key key, byte[] value, int ttl) {
        String reply = ttl > 0 ? redis.setex(key.bytes(), ttl, value) : redis.set(key.bytes(), value);
        return "OK".equals(reply);
    }

    @Override
    public boolean delete(Key key) {
        return redis.del(key.bytes()) > 0;
    }

    @Override
    public boolean exists(Key key) {
        return redis.exists(key.bytes()) > 0;
    }

    @Override
    public Object getMany(Key[] keys) {
        byte[][] raw = new byte[keys.length][];
        for (int i = 0; i < keys.length; i++) {
            raw[i] = keys[i].bytes();
        }
        return redis.mget(raw);
    }

    @Override
    public void values(Object answer, Key[] keys, byte[][] out) {
        List<?> list = (List<?>) answer;
        for (int i = 0; i < out.length; i++) {
            KeyValue<?, ?> kv = (KeyValue<?, ?>) list.get(i);
            out[i] = kv.hasValue() ? (byte[]) kv.getValue() : null;
        }
    }

    @Override
    public String client() {
        return "io.lettuce.core.RedisClient";
    }

    @Override
    public String library() {
        return "lettuce";
    }
}
