<?php

declare(strict_types=1);

// cachemark's PHP driver: Symfony Cache as a Symfony app configures it — RedisAdapter
// (phpredis) for redis:// targets, MemcachedAdapter (php-memcached) for memcached://,
// FilesystemAdapter for file://; tagged workloads run RedisTagAwareAdapter on redis and
// TagAwareAdapter around the plain adapter elsewhere. It speaks the driver protocol of
// docs/drivers.md on stdin/stdout: one JSON line per message, and when a message has
// "blob": N, exactly N raw bytes after its newline (little-endian integer arrays).
// cachemark pre-generates the op stream; this program only runs the timed loop and hands
// back per-op outcomes and latencies in bulk. Protocol 2: a phase comes in segments (ops with
// "more": true has another after it, sent ahead during go, so it already waits in stdin); at
// the end of each such segment, and of each pass through a cycling batch, the results go back
// as a "part" and the next segment replaces the last, so memory holds one segment and its
// results, never the whole phase. stdin is read during go only at those boundaries.

use Psr\Log\AbstractLogger;
use Symfony\Component\Cache\Adapter\AdapterInterface;
use Symfony\Component\Cache\Adapter\FilesystemAdapter;
use Symfony\Component\Cache\Adapter\MemcachedAdapter;
use Symfony\Component\Cache\Adapter\NullAdapter;
use Symfony\Component\Cache\Adapter\RedisAdapter;
use Symfony\Component\Cache\Adapter\RedisTagAwareAdapter;
use Symfony\Component\Cache\Adapter\TagAwareAdapter;
use Symfony\Component\Cache\CacheItem;

const PROTOCOL = 3;
const NAME = 'php-symfony';
const OK = 0;
const HIT = 1;
const MISS = 2;
const ERR = 3;
const REFUSED = -1; // a write or delete answered false: a server error unless an exception was logged
const INSTALL = 'apt-get install php-cli php-redis php-memcached php-symfony-cache (Debian), '
    . 'or composer require symfony/cache in drivers/php';

// Protocol bytes go to the real stdout (fwrite(STDOUT) bypasses output buffering); anything
// a library prints or PHP reports goes to stderr, where cachemark keeps it for error messages.
ini_set('display_errors', 'stderr');
error_reporting(E_ALL & ~E_DEPRECATED & ~E_USER_DEPRECATED);
ob_start(static function (string $out): string {
    fwrite(STDERR, $out);
    return '';
}, 1);

function send_msg(array $msg, ?string $blob = null): void
{
    if ($blob !== null) {
        $msg['blob'] = strlen($blob);
    }
    $data = json_encode($msg, JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION | JSON_INVALID_UTF8_SUBSTITUTE)
        . "\n" . ($blob ?? '');
    while ($data !== '') {
        $written = fwrite(STDOUT, $data);
        if ($written === false || $written === 0) {
            exit(0); // cachemark went away
        }
        $data = substr($data, $written);
    }
    fflush(STDOUT);
}

function read_msg(): array
{
    while (($line = fgets(STDIN)) === false) {
        if (feof(STDIN)) {
            exit(0); // cachemark went away: same as bye
        }
    }
    $msg = json_decode($line, true, 512, JSON_THROW_ON_ERROR);
    $n = (int) ($msg['blob'] ?? 0);
    $blob = '';
    while (strlen($blob) < $n) {
        $chunk = fread(STDIN, $n - strlen($blob));
        if ($chunk === false || ($chunk === '' && feof(STDIN))) {
            exit(0);
        }
        $blob .= $chunk;
    }
    $msg['_blob'] = $blob;
    return $msg;
}

/** A Composer install in drivers/php wins; else Debian's php-symfony-cache (on the include path). */
function load_symfony(): bool
{
    $composer = __DIR__ . '/vendor/autoload.php';
    $debian = stream_resolve_include_path('Symfony/Component/Cache/autoload.php');
    if (is_file($composer)) {
        require_once $composer;
    } elseif ($debian !== false) {
        require_once $debian;
    }
    return class_exists(RedisAdapter::class) && class_exists(AbstractLogger::class);
}

function symfony_cache_version(): string
{
    if (class_exists(\Composer\InstalledVersions::class) && \Composer\InstalledVersions::isInstalled('symfony/cache')) {
        return ltrim((string) \Composer\InstalledVersions::getPrettyVersion('symfony/cache'), 'v');
    }
    // Debian's package has no Composer metadata; its changelog names the upstream version
    $changelog = 'compress.zlib:///usr/share/doc/php-symfony-cache/changelog.Debian.gz';
    $head = @file_get_contents($changelog, false, null, 0, 300);
    return $head && preg_match('/\((\d+\.\d+\.\d+)/', $head, $m) ? $m[1] : 'unknown';
}

function library_versions(): array
{
    $versions = ['symfony/cache' => symfony_cache_version()];
    foreach (['phpredis' => 'redis', 'php-memcached' => 'memcached', 'igbinary' => 'igbinary'] as $name => $ext) {
        if (extension_loaded($ext)) {
            $versions[$name] = (string) phpversion($ext);
        }
    }
    return $versions;
}

function short_class(object $o): string
{
    $name = get_class($o);
    return substr($name, (int) strrpos('\\' . $name, '\\'));
}

function error_kind(?Throwable $e): string
{
    if ($e === null) {
        return 'server'; // the adapter answered false and logged no exception
    }
    $text = strtolower(get_class($e) . ' ' . $e->getMessage());
    if (str_contains($text, 'timeout') || str_contains($text, 'timed out')) {
        return 'timeout';
    }
    // phpredis: "Connection refused", "read error on connection", "went away"; libmemcached: "connection
    // failure", "server has failed and is disabled until timed retry", and "some errors were reported"
    // (a multi-get whose server is down)
    foreach (['connect', 'went away', 'no server', 'network', 'socket', 'refused', 'read error', 'broken pipe',
                 'failure', 'has failed', 'marked dead', 'lost', 'some errors were reported'] as $word) {
        if (str_contains($text, $word)) {
            return 'connection';
        }
    }
    foreach (['error', 'too large', 'oom'] as $word) {
        if (str_contains($text, $word)) {
            return 'server';
        }
    }
    return short_class($e);
}

if (!load_symfony()) {
    send_msg(['type' => 'error', 'kind' => 'missing',
        'message' => NAME . ': symfony/cache is not installed; ' . INSTALL]);
    exit(3);
}

/**
 * Symfony adapters swallow failures (the failsafe: a failed read is a miss, a failed write
 * answers false) and log them; this logger keeps the first one of each op so cachemark
 * still counts it as an error.
 */
final class ErrorLog extends AbstractLogger
{
    public ?string $message = null;
    public ?Throwable $exception = null;

    public function log($level, $message, array $context = []): void
    {
        if ($this->message !== null) {
            return;
        }
        $this->exception = ($context['exception'] ?? null) instanceof Throwable ? $context['exception'] : null;
        $this->message = strtr((string) $message, ['{key}' => (string) ($context['key'] ?? '')]);
    }

    public function clear(): void
    {
        $this->message = null;
        $this->exception = null;
    }
}

/** The run's keys, values and checks (docs/contracts.md: the self-verifying value format). */
final class Workload
{
    /** @var string[] Symfony key of key id i: "i" (the namespace is the client's prefix) */
    public array $keys = [];
    public int $count;
    private array $headers = [];
    private string $filler;
    private string $kind;
    private array $sizes;

    public function __construct(public string $ns, array $setup)
    {
        $this->count = (int) $setup['keys'];
        for ($i = 0; $i < $this->count; $i++) {
            $this->keys[$i] = (string) $i;
        }
        $this->kind = $setup['sizes']['kind'];
        $this->sizes = $setup['sizes']['sizes'];
        $max = max(max($this->sizes), 12);
        $period = $setup['filler'];  // the value format's filler, one period (x-value-format)
        $this->filler = str_repeat($period, intdiv($max, strlen($period)) + 1);
    }

    public function value(int $k, int $size): string
    {
        $head = $this->headers[$k] ??= sprintf('cm:%08x:', crc32($this->ns . $k));
        return $size <= 12 ? substr($head, 0, $size) : $head . substr($this->filler, 12, $size - 12);
    }

    public function valueForKey(string $fullKey, int $size): string
    {
        $head = sprintf('cm:%08x:', crc32($fullKey));
        return $size <= 12 ? substr($head, 0, $size) : $head . substr($this->filler, 12, $size - 12);
    }

    public function valid(int $k, mixed $value): bool
    {
        if (!is_string($value)) {
            return false;
        }
        $size = strlen($value);
        $allowed = $this->kind === 'range' ? $size >= $this->sizes[0] && $size <= $this->sizes[1]
            : in_array($size, $this->sizes, true);
        return $allowed && $value === $this->value($k, $size);
    }
}

/** Symfony Cache for one target: the pool, the logger that keeps its swallowed errors, and what it is. */
final class Store
{
    public AdapterInterface $pool;
    public ErrorLog $log;
    public array $info;
    public ?object $redis = null; // for the server's own words when a write is refused
    public bool $tagged;
    private Closure $make;

    public function __construct(array $setup)
    {
        $scheme = $setup['scheme'] ?? 'null';
        $this->tagged = ($setup['tags'] ?? null) !== null;
        $this->log = new ErrorLog();
        $ns = $setup['namespace'];
        $timeout = (float) ($setup['timeout_s'] ?? 5.0);
        $connectTimeout = (float) ($setup['connect_timeout_s'] ?? 2.0);
        $servers = $setup['servers'] ?? [];
        // Symfony forbids ':' in its own namespaces and keys, so the run's namespace
        // ("cm:3f9a2c01:") is the client's key prefix, as an app sets one on its connection:
        // key id i lands on the server as namespace + i, exactly where cachemark cleans up.
        if ($scheme === 'null') {
            // no server (scheme null or "null"): Symfony's do-nothing adapter, for what the
            // protocol and this loop cost
            $inner = new NullAdapter();
        } elseif (str_starts_with($scheme, 'redis') || str_starts_with($scheme, 'valkey')) {
            $this->redis = $this->redisConnection($setup, $timeout, $connectTimeout);
            $this->redis->setOption(\Redis::OPT_PREFIX, $ns);
            $inner = $this->tagged ? new RedisTagAwareAdapter($this->redis) : new RedisAdapter($this->redis);
        } elseif ($scheme === 'memcached') {
            $options = ['prefix_key' => $ns, 'connect_timeout' => (int) ceil($connectTimeout * 1000),
                'poll_timeout' => (int) ceil($timeout * 1000), 'send_timeout' => (int) ($timeout * 1e6),
                'recv_timeout' => (int) ($timeout * 1e6)];
            if ($setup['username'] ?? null) {
                $options += ['username' => $setup['username'], 'password' => $setup['password']];
            }
            $hosts = array_map(fn ($s) => [$s[0], (int) $s[1]], $servers);
            $client = MemcachedAdapter::createConnection($hosts, $options);
            $inner = new MemcachedAdapter($client);
            // Versioning (on by default, for clear() alone) puts a version segment, fetched or
            // made once per process, in every key; off, key id i is namespace + i, which
            // cachemark's cleanup deletes. Per op the cost is the same.
            $inner->enableVersioning(false);
        } elseif ($scheme === 'file') {
            $inner = new FilesystemAdapter('', 0, $setup['path']);
        } else {
            throw new InvalidArgumentException(NAME . " has no store for $scheme://");
        }
        $this->pool = $this->tagged && !$inner instanceof RedisTagAwareAdapter ? new TagAwareAdapter($inner) : $inner;
        foreach ([$inner, $this->pool] as $adapter) {
            if (method_exists($adapter, 'setLogger')) {
                $adapter->setLogger($this->log);
            }
        }
        $class = get_class($this->pool) . ($this->pool === $inner ? '' : '(' . short_class($inner) . ')');
        $this->info = ['client' => $class, 'client_library' => 'symfony/cache',
            'client_version' => symfony_cache_version()];
        // PSR-6 gives items only through getItem(), a read; a write builds its item as the
        // adapters do internally, so the timed save() is the write alone.
        $taggable = $this->tagged;
        $this->make = Closure::bind(static function (string $key) use ($taggable): CacheItem {
            $item = new CacheItem();
            $item->key = $key;
            $item->isTaggable = $taggable;
            return $item;
        }, null, CacheItem::class);
    }

    private function redisConnection(array $setup, float $timeout, float $connectTimeout): object
    {
        $auth = '';
        $options = ['timeout' => $connectTimeout, 'read_timeout' => $timeout, 'lazy' => false];
        if (!empty($setup['username']) && ($setup['password'] ?? null) !== null) {
            $options['auth'] = [$setup['username'], $setup['password']]; // ACL user: the DSN carries a password only
        } elseif (($setup['password'] ?? null) !== null) {
            $auth = rawurlencode($setup['password']) . '@';
        }
        $scheme = $setup['tls'] ? 'rediss' : 'redis';
        $servers = $setup['servers'];
        $db = (int) ($setup['db'] ?? 0);
        if (count($servers) === 1) {
            $dsn = "$scheme://$auth{$servers[0][0]}:{$servers[0][1]}/$db";
        } else { // several servers: Symfony's RedisArray DSN
            $hosts = implode('&', array_map(fn ($s) => "host[{$s[0]}:{$s[1]}]", $servers));
            $dsn = "$scheme:$auth?$hosts&dbindex=$db";
        }
        return RedisAdapter::createConnection($dsn, $options);
    }

    public function item(string $key, string $value, ?int $ttl, ?array $tags): CacheItem
    {
        $item = ($this->make)($key)->set($value);
        if ($ttl !== null) {
            $item->expiresAfter($ttl);
        }
        if ($tags) {
            $item->tag($tags);
        }
        return $item;
    }

    /** The error an op left (thrown, or logged by the adapter's failsafe), as [kind, one line], or null. */
    public function takeError(?Throwable $thrown, bool $refused): ?array
    {
        $e = $thrown ?? $this->log->exception;
        $message = $thrown ? null : $this->log->message;
        $this->log->clear();
        if ($e === null && $message === null && !$refused) {
            return null;
        }
        $text = $e ? short_class($e) . ': ' . $e->getMessage()
            : ($message ?? 'the adapter answered false (not stored)');
        if ($e === null && $this->redis instanceof \Redis && ($said = $this->redis->getLastError())) {
            $text .= " ($said)"; // e.g. OOM: phpredis keeps the server's reply aside
            $this->redis->clearLastError();
        }
        return [error_kind($e), preg_replace('/[\x00-\x1f]+/', ' ', $text)];
    }
}

// One driver process = one cachemark worker: one pool, one connection.
final class Driver
{
    public static bool $stop = false;
    private ?Store $store = null;
    private Workload $work;
    private array $setup;
    private int $worker = 0;
    private ?int $ttl = null;
    private int $many = 10;
    private ?array $tagSpec = null;
    private array $tagsOf = [];
    private int $canaries = 0;
    private array $kinds = ['verify', 'dropped_write'];
    private array $entries = [];
    private array $opEntry = [];
    private array $opKey = [];
    private array $opSize = [];
    private ?array $opAt = null;
    private bool $more = false; // the ops in memory are a segment with another after it (sent during go)
    private array $samples = [];
    private array $extra = [];
    private string $entryName = '';
    private mixed $got = null; // what the last read returned, checked after the clock stops
    private int $unsent = 0; // bytes of a sequence's steps never sent (exists said no): not bytes_out

    public function serve(): void
    {
        send_msg(['type' => 'hello', 'protocol' => PROTOCOL, 'driver' => NAME, 'runtime' => 'php ' . PHP_VERSION,
            'runtime_detail' => 'PHP ' . PHP_VERSION . ' (' . PHP_SAPI . ', ' . PHP_OS . ')',
            'libraries' => library_versions()]);
        for (;;) {
            $msg = read_msg();
            switch ($msg['type'] ?? null) {
                case 'setup': $this->setup($msg); break;
                case 'prefill': $this->prefill($msg); break;
                case 'ops': $this->loadOps($msg); break;
                case 'go': $this->go($msg); break;
                case 'bye':
                    send_msg(['type' => 'bye']);
                    return;
                default:
                    send_msg(['type' => 'error', 'kind' => 'protocol',
                        'message' => 'unknown message ' . json_encode($msg['type'] ?? null)]);
            }
        }
    }

    private function kindCode(string $kind): int
    {
        $index = array_search($kind, $this->kinds, true);
        if ($index === false) {
            $this->kinds[] = $kind;
            $index = count($this->kinds) - 1;
        }
        return ERR + $index;
    }

    private function setup(array $msg): void
    {
        $this->setup = $msg;
        $this->work = new Workload($msg['namespace'], $msg);
        $this->worker = (int) ($msg['worker'] ?? 0);
        $ttl = (float) ($msg['ttl_s'] ?? 0);
        $this->ttl = $ttl > 0 ? (int) ceil($ttl) : null;
        $this->many = (int) ($msg['get_many_count'] ?? 10);
        $this->tagSpec = $msg['tags'] ?? null;
        $this->tagsOf = [];
        $this->canaries = 0;
        $scheme = (string) ($msg['scheme'] ?? 'null');
        $needs = str_starts_with($scheme, 'redis') || str_starts_with($scheme, 'valkey') ? 'redis'
            : ($scheme === 'memcached' ? 'memcached' : null);
        if ($needs !== null && !extension_loaded($needs)) {
            send_msg(['type' => 'error', 'kind' => 'missing',
                'message' => NAME . ": the PHP extension $needs is not loaded; "
                    . "apt-get install php-$needs (Debian) or pecl install $needs"]);
            return;
        }
        try {
            $this->store = new Store($msg);
        } catch (Throwable $e) {
            send_msg(['type' => 'error', 'kind' => 'setup', 'message' => short_class($e) . ': ' . $e->getMessage()]);
            return;
        }
        send_msg(['type' => 'ready'] + $this->store->info);
    }

    /** The tags of key id k: cachemark's tags_for_key (src/cachemark/workload/ops.py). */
    private function tags(int $k): ?array
    {
        if ($this->tagSpec === null) {
            return null;
        }
        if (!isset($this->tagsOf[$k])) {
            ['pool' => $pool, 'min' => $min, 'max' => $max] = $this->tagSpec;
            // (k * 0x9E3779B1) mod 2^32 in two halves: a u32 key id times it would overflow PHP's int
            $h = (((($k >> 16) * 0x9E3779B1) & 0xFFFF) << 16) + ($k & 0xFFFF) * 0x9E3779B1;
            $h = ($h + 0x7F4A7C15) & 0xFFFFFFFF;
            $tags = [];
            for ($j = 0, $n = $min + $h % ($max - $min + 1); $j < $n; $j++) {
                $tags[] = 't' . (($h + $j * 0x5BD1E995) % $pool);
            }
            $this->tagsOf[$k] = $tags;
        }
        return $this->tagsOf[$k];
    }

    private function prefill(array $msg): void
    {
        $n = (int) $msg['count'];
        $ids = $n ? array_values(unpack('V*', substr($msg['_blob'], 0, 4 * $n))) : [];
        $sizes = $n ? array_values(unpack('V*', substr($msg['_blob'], 4 * $n, 4 * $n))) : [];
        $store = $this->store;
        $written = $refused = 0;
        $sample = null;
        foreach ($ids as $i => $k) {
            if (self::$stop) {
                break;
            }
            $thrown = null;
            $ok = false;
            try {
                $value = $this->work->value($k, $sizes[$i]);
                $item = $store->item($this->work->keys[$k], $value, $this->ttl, $this->tags($k));
                $ok = $store->pool->save($item);
            } catch (Throwable $e) {
                $thrown = $e;
            }
            $err = $store->takeError($thrown, !$ok);
            if ($err === null) {
                $written++;
            } else {
                $refused++;
                $sample ??= $err[1];
            }
        }
        send_msg(['type' => 'prefilled', 'written' => $written, 'refused' => $refused, 'error_sample' => $sample,
            'interrupted' => self::$stop]);
    }

    /** The first (or only) segment of a batch, before go: answered by loaded. */
    private function loadOps(array $msg): void
    {
        $error = $this->takeOps($msg);
        send_msg($error === null ? ['type' => 'loaded', 'count' => count($this->opEntry)]
            : ['type' => 'error', 'kind' => 'unsupported', 'message' => $error]);
    }

    /** An ops message (a batch or one segment of it) in place of the last one; why not, when it cannot run. */
    private function takeOps(array $msg): ?string
    {
        $n = (int) $msg['count'];
        $blob = $msg['_blob'];
        $this->entries = $msg['entries'];
        $this->more = false;
        $known = ['get', 'set', 'delete', 'exists', 'get_many', 'clean'];
        $unknown = array_values(array_unique(array_diff(array_merge(...$this->entries), $known)));
        if ($unknown) {
            return NAME . ' does not run ' . implode(', ', $unknown);
        }
        if ($this->tagSpec === null && in_array('clean', array_merge(...$this->entries), true)) {
            return NAME . ' runs clean only in a tagged workload';
        }
        $this->opEntry = $n ? array_values(unpack('C*', substr($blob, 0, $n))) : [];
        $this->opKey = $n ? array_values(unpack('V*', substr($blob, $n, 4 * $n))) : [];
        $this->opSize = $n ? array_values(unpack('V*', substr($blob, 5 * $n, 4 * $n))) : [];
        $this->opAt = !empty($msg['schedule']) && $n ? array_values(unpack('P*', substr($blob, 9 * $n, 8 * $n))) : null;
        $this->more = !empty($msg['more']);
        return null;
    }

    /** Per entry of the mix: prep, run, name, whether it writes, whether its read is verified. */
    private function handlers(): array
    {
        $preps = $runs = $names = $writes = $verifiable = [];
        foreach ($this->entries as $e => $steps) {
            [$preps[$e], $runs[$e]] = $this->handler($steps);
            $names[$e] = implode('+', $steps);
            $writes[$e] = in_array('set', $steps, true);
            $verifiable[$e] = in_array(end($steps), ['get', 'get_many'], true);
        }
        return [$preps, $runs, $names, $writes, $verifiable];
    }

    // -- the ops: for each step, prep (untimed: key, item, tag) and run (the timed adapter call) --
    /** @return array{0: Closure, 1: Closure} prep(k, size, &bytesOut) and run(arg): outcome */
    private function step(string $op): array
    {
        $pool = $this->store->pool;
        $store = $this->store;
        $work = $this->work;
        $keys = $work->keys;
        $nsBytes = strlen($work->ns); // keys travel with the namespace prefix
        $got = &$this->got;
        $keyOf = static function (int $k, int $size, int &$out) use ($keys, $nsBytes): string {
            $out += $nsBytes + strlen($keys[$k]);
            return $keys[$k];
        };
        switch ($op) {
            case 'get':
                return [$keyOf, static function (string $key) use ($pool, &$got): int {
                    $item = $pool->getItem($key);
                    if (!$item->isHit()) {
                        return MISS;
                    }
                    $got = $item->get();
                    return HIT;
                }];
            case 'set':
                $ttl = $this->ttl;
                return [function (int $k, int $size, int &$out) use ($store, $work, $keys, $ttl, $nsBytes): CacheItem {
                    $out += $nsBytes + strlen($keys[$k]) + $size;
                    return $store->item($keys[$k], $work->value($k, $size), $ttl, $this->tags($k));
                }, static fn (CacheItem $item): int => $pool->save($item) ? OK : REFUSED];
            case 'delete':
                // deleteItem() answers true whether or not the key existed (DEL's count is
                // dropped), so a delete is ok — neither hit nor miss — or an error. (Symfony 5.4's
                // MemcachedAdapter takes php-memcached's `true` for a failure and deletes each key
                // again: two round trips per existing key, and false when a write lands between.)
                return [$keyOf, static fn (string $key): int => $pool->deleteItem($key) ? OK : REFUSED];
            case 'exists':
                return [$keyOf, static fn (string $key): int => $pool->hasItem($key) ? HIT : MISS];
            case 'get_many':
                $count = $work->count;
                $many = min($this->many, $count);
                return [static function (int $k, int $size, int &$out) use ($keys, $count, $many, $nsBytes): array {
                    $names = [];
                    for ($i = 0; $i < $many; $i++) {
                        $names[] = $name = $keys[($k + $i) % $count];
                        $out += $nsBytes + strlen($name);
                    }
                    return $names;
                }, static function (array $names) use ($pool, &$got): int {
                    $found = [];
                    foreach ($pool->getItems($names) as $key => $item) {
                        if ($item->isHit()) {
                            $found[$key] = $item->get();
                        }
                    }
                    $got = $found; // keyed by key id ("17" is an integer array key in PHP)
                    return count($found) < count($names) ? MISS : HIT;
                }];
            case 'clean':
                $tagPool = (int) $this->tagSpec['pool'];
                return [static function (int $k, int $size, int &$out) use ($tagPool): array {
                    $tag = 't' . ($k % $tagPool); // the clean op on key id k: cachemark's choice of tag
                    $out += strlen($tag);
                    return [$tag];
                }, static fn (array $tags): int => $pool->invalidateTags($tags) ? OK : REFUSED];
        }
        throw new LogicException("no op $op");
    }

    /** One entry of the mix: a step, or a sequence (exists+get: a "no" from exists ends it as a miss). */
    private function handler(array $steps): array
    {
        if (count($steps) === 1) {
            return $this->step($steps[0]);
        }
        $parts = array_map(fn ($s) => $this->step($s), $steps);
        $unsent = &$this->unsent;
        $after = []; // bytes of the steps after step i (prepared, counted, not sent when the sequence stops)
        return [static function (int $k, int $size, int &$out) use ($parts, &$after): array {
            $args = [];
            $sizes = [];
            foreach ($parts as $p) {
                $before = $out;
                $args[] = $p[0]($k, $size, $out);
                $sizes[] = $out - $before;
            }
            $rest = 0;
            for ($i = count($sizes) - 1; $i >= 0; $i--) {
                $after[$i] = $rest;
                $rest += $sizes[$i];
            }
            return $args;
        }, static function (array $args) use ($parts, $steps, &$after, &$unsent): int {
            $code = MISS;
            foreach ($parts as $i => $p) {
                $code = $p[1]($args[$i]);
                if ($code >= ERR || $code === REFUSED || ($steps[$i] === 'exists' && $code !== HIT)) {
                    $unsent = $after[$i];
                    return $code;
                }
            }
            return $code;
        }];
    }

    private function sample(string $kind, string $text): void
    {
        if (count($this->samples) < 5) {
            $this->samples[] = substr("{$this->entryName}: $kind: $text", 0, 300);
        }
    }

    /** A write read back at once (untimed, with its own key): a silently dropped write is an error. */
    private function canary(int $entry, int $size): void
    {
        $this->canaries++;
        $key = "verify.{$this->worker}.{$this->canaries}"; // Symfony keys may not hold ':'
        $value = $this->work->valueForKey($this->setup['namespace'] . $key, $size);
        $store = $this->store;
        $thrown = null;
        $back = null;
        try {
            $store->pool->save($store->item($key, $value, $this->ttl, null));
            $item = $store->pool->getItem($key);
            $back = $item->isHit() ? $item->get() : null;
            $store->pool->deleteItem($key);
        } catch (Throwable $e) {
            $thrown = $e;
        }
        $err = $store->takeError($thrown, false);
        $kind = $err[0] ?? ($back !== $value ? 'dropped_write' : null);
        if ($kind === null) {
            return;
        }
        $this->extra["$entry\0$kind"] = ($this->extra["$entry\0$kind"] ?? 0) + 1;
        $this->sample($kind, $err[1]
            ?? "$key: a value just written read back " . ($back === null ? 'as a miss' : 'different'));
    }

    private function go(array $msg): void
    {
        [$preps, $runs, $names, $writes, $verifiable] = $this->handlers();
        $entries = $this->entries;
        $readEvery = ($msg['verify_reads'] ?? 0) > 0 ? (int) (1 / $msg['verify_reads']) : 0;
        $writeEvery = ($msg['verify_writes'] ?? 0) > 0 ? (int) (1 / $msg['verify_writes']) : 0;
        $grace = isset($msg['stop_after_failing_s']) ? (int) ($msg['stop_after_failing_s'] * 1e9) : null;
        $store = $this->store;
        $this->samples = [];
        $this->extra = [];
        $bytesIn = array_fill(0, count($entries), 0);
        $bytesOut = array_fill(0, count($entries), 0);
        $reads = $writesDone = $missed = 0;
        $stopped = $halted = false;
        $cpu0 = self::cpuSeconds();
        $start = hrtime(true);
        $deadline = isset($msg['duration_s']) ? $start + (int) ($msg['duration_s'] * 1e9) : null;
        $lastOk = $start;
        $failingSince = null;
        // one segment (or one pass through a cycling batch) per turn; at_ns counts from go throughout
        for (;;) {
            $opEntry = $this->opEntry;
            $opKey = $this->opKey;
            $opSize = $this->opSize;
            $opAt = $this->opAt;
            $n = count($opEntry);
            $cycle = !empty($msg['cycle']) && $opAt === null && $n > 0;
            $outcomes = $starts = $lats = []; // this segment's (this pass's) results only
            $i = 0;
            while ($i < $n) {
                $e = $opEntry[$i];
                $k = $opKey[$i];
                $out = 0;
                $arg = $preps[$e]($k, $opSize[$i], $out);
                if ($opAt !== null) {
                    $due = $start + $opAt[$i];
                    if ($deadline !== null && $due >= $deadline) {
                        $halted = true;
                        break;
                    }
                    $wait = $due - hrtime(true);
                    if ($wait > 0) {
                        time_nanosleep(intdiv($wait, 1_000_000_000), $wait % 1_000_000_000);
                    }
                }
                $verify = false;
                if ($readEvery > 0 && $verifiable[$e] && ++$reads >= $readEvery) {
                    $reads = 0;
                    $verify = true;
                }
                $this->got = null;
                $thrown = null;
                $t0 = hrtime(true);
                try {
                    $code = $runs[$e]($arg);
                } catch (Throwable $ex) {
                    $thrown = $ex;
                    $code = REFUSED;
                }
                $t1 = hrtime(true);
                // everything below is outside the clock
                $this->entryName = $names[$e];
                if ($thrown !== null || $code === REFUSED || $store->log->message !== null) {
                    [$kind, $text] = $store->takeError($thrown, $code === REFUSED);
                    $this->sample($kind, $text);
                    $code = $this->kindCode($kind);
                }
                $got = $this->got;
                if ($got !== null) {
                    $bytesIn[$e] += self::size($got);
                    if ($verify && $code === HIT && !$this->validRead($k, $got)) {
                        $code = $this->kindCode('verify');
                    }
                }
                $bytesOut[$e] += $out - $this->unsent;
                $this->unsent = 0;
                $outcomes[] = $code;
                $starts[] = $t0 - $start;
                $lats[] = $t1 - $t0;
                $i++;
                if ($code < ERR) {
                    $lastOk = $t1;
                    $failingSince = null;
                    if ($writeEvery > 0 && $writes[$e] && $code === OK && ++$writesDone >= $writeEvery) {
                        $writesDone = 0;
                        $this->canary($e, $opSize[$i - 1]);
                    }
                } else {
                    $failingSince ??= $t1;
                    if ($grace !== null && $t1 - max($lastOk, $failingSince) >= $grace) {
                        $stopped = $halted = true;
                        break;
                    }
                }
                if (self::$stop || ($deadline !== null && $t1 >= $deadline)) {
                    $halted = true;
                    break;
                }
            }
            if ($halted || (!$this->more && !$cycle)) {
                break;
            }
            // the segment (the pass) ran to its end and another follows: its results as a part, and
            // then the next segment, which cachemark sent ahead (no loaded during go); a cycling
            // batch runs its pass again
            send_msg(['type' => 'part', 'count' => $n, 'error_kinds' => $this->kinds],
                self::results($outcomes, $starts, $lats));
            $outcomes = $starts = $lats = []; // held no longer than their part
            if ($this->more) {
                $opEntry = $opKey = $opSize = $opAt = null; // nor the segment that ended, once the next comes
                $next = read_msg();
                $error = ($next['type'] ?? null) === 'ops' ? $this->takeOps($next)
                    : 'expected the next ops segment during go, got ' . json_encode($next['type'] ?? null);
                if ($error !== null) {
                    send_msg(['type' => 'error', 'kind' => 'protocol', 'message' => NAME . ": $error"]);
                    return;
                }
                if ($this->entries !== $entries) { // a segment with a mix of its own (cachemark sends one per phase)
                    [$preps, $runs, $names, $writes, $verifiable] = $this->handlers();
                    $entries = $this->entries;
                    $bytesIn += array_fill(0, count($entries), 0);
                    $bytesOut += array_fill(0, count($entries), 0);
                }
            }
        }
        $finish = hrtime(true);
        if ($opAt !== null && $deadline !== null && $i < $n) {
            for ($x = $i; $x < $n; $x++) {
                $missed += $start + $opAt[$x] < $deadline ? 1 : 0;
            }
        }
        if ($halted && $this->more) {
            // stopped inside a segment with another after it: that one, sent ahead, waits in stdin;
            // it is read and dropped so the next message read is cachemark's next request
            read_msg();
            $this->more = false;
        }
        $cpu = self::cpuSeconds() - $cpu0;
        $extra = [];
        foreach ($this->extra as $key => $count) {
            [$entry, $kind] = explode("\0", (string) $key, 2);
            $extra[] = [(int) $entry, $kind, $count];
        }
        // the blob: the ops run since the last part; everything else: the whole go
        send_msg(['type' => 'done', 'count' => count($outcomes), 'wall_ns' => $finish - $start, 'cpu_s' => $cpu,
            'error_kinds' => $this->kinds, 'extra_errors' => $extra, 'error_samples' => $this->samples,
            'bytes_in' => $bytesIn, 'bytes_out' => $bytesOut, 'missed' => $missed, 'stopped_on_errors' => $stopped,
            'interrupted' => self::$stop],
            self::results($outcomes, $starts, $lats));
    }

    /** A hit's value(s) checked against the value format; a failure is sampled. */
    private function validRead(int $k, mixed $got): bool
    {
        $work = $this->work;
        $values = is_array($got) ? $got : [$k => $got];
        foreach ($values as $id => $value) {
            if (!$work->valid((int) $id, $value)) {
                $size = is_string($value) ? strlen($value) : 0;
                $this->sample('verify', $this->setup['namespace'] . "$id: unexpected value of $size B");
                return false;
            }
        }
        return true;
    }

    /** Bytes of the value(s) a read returned. */
    private static function size(mixed $got): int
    {
        $bytes = 0;
        foreach (is_array($got) ? $got : [$got] as $value) {
            $bytes += is_string($value) ? strlen($value) : 0;
        }
        return $bytes;
    }

    /** part's and done's blob: outcome u8[n], start_ns u64[n], latency_ns u64[n] */
    private static function results(array $outcomes, array $starts, array $lats): string
    {
        return self::pack('C', $outcomes) . self::pack('P', $starts) . self::pack('P', $lats);
    }

    private static function pack(string $format, array $values): string
    {
        $out = '';
        foreach (array_chunk($values, 65536) as $chunk) { // bounded argument lists
            $out .= pack("$format*", ...$chunk);
        }
        return $out;
    }

    private static function cpuSeconds(): float
    {
        $u = getrusage();
        return $u['ru_utime.tv_sec'] + $u['ru_utime.tv_usec'] / 1e6
            + $u['ru_stime.tv_sec'] + $u['ru_stime.tv_usec'] / 1e6;
    }
}

if (function_exists('pcntl_async_signals')) {
    pcntl_async_signals(true);
    pcntl_signal(SIGINT, static function (): void {
        Driver::$stop = true; // Ctrl-C: the loop stops and reports what it ran
    });
}

(new Driver())->serve();
