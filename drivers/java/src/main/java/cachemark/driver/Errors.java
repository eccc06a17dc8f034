package cachemark.driver;

import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisCommandTimeoutException;
import io.lettuce.core.RedisConnectionException;
import java.io.IOException;
import java.util.Locale;
import java.util.concurrent.CancellationException;
import java.util.concurrent.TimeoutException;
import net.spy.memcached.OperationTimeoutException;
import net.spy.memcached.ops.OperationException;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;

/** An exception's error kind (docs/contracts.md): timeout, connection, server, or its class name. */
final class Errors {
    private Errors() {
    }

    static String kind(Throwable error) {
        // the clients wrap the cause (JedisConnectionException(SocketTimeoutException), ...): look down the chain
        for (Throwable t = error; t != null; t = t.getCause()) {
            if (t instanceof TimeoutException || t instanceof java.net.SocketTimeoutException
                    || t instanceof RedisCommandTimeoutException || t instanceof OperationTimeoutException
                    || says(t, "timed out", "timeout")) {
                return "timeout";
            }
        }
        for (Throwable t = error; t != null; t = t.getCause()) {
            // before the I/O check: spymemcached's OperationException (a SERVER_ERROR reply) is an IOException
            if (t instanceof JedisDataException || t instanceof RedisCommandExecutionException
                    || t instanceof OperationException) {
                return "server";
            }
        }
        for (Throwable t = error; t != null; t = t.getCause()) {
            if (t instanceof IOException || t instanceof JedisConnectionException
                    || t instanceof RedisConnectionException || t instanceof CancellationException
                    || says(t, "connect", "connection", "cancelled", "closed", "reset", "broken pipe")) {
                return "connection";
            }
        }
        for (Throwable t = error; t != null; t = t.getCause()) {
            if (says(t, "oom", "server_error", "too large")) {
                return "server";
            }
        }
        return error.getClass().getSimpleName();
    }

    private static boolean says(Throwable t, String... words) {
        String text = String.valueOf(t.getMessage()).toLowerCase(Locale.ROOT);
        for (String word : words) {
            if (text.contains(word)) {
                return true;
            }
        }
        return false;
    }

    /** "Class: message" on one line, for error samples. */
    static String describe(Throwable error) {
        Throwable shown = error;
        // ExecutionException / RuntimeException("Exception waiting for value") say less than their cause
        while (shown.getCause() != null && (shown instanceof java.util.concurrent.ExecutionException
                || shown.getClass() == RuntimeException.class)) {
            shown = shown.getCause();
        }
        String text = shown.getClass().getSimpleName() + ": " + shown.getMessage();
        return text.replaceAll("\\s+", " ").trim();
    }
}
