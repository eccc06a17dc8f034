"""Each server as it accounts for memory and evicts: what an object costs it, and which setting
gives a simulated cache of a given capacity.

Redis: ``maxmemory`` is compared with ``used_memory``, which holds the server's own base memory
(measured on a spawned server with a client connected) and, per key, jemalloc's size classes of
its allocations (the key's sds, the value's object and sds — embedded up to 44 bytes —, a dict
entry; another with a TTL) plus what is left over per item — hash-table buckets, allocator
slack —, measured by writing a sample of the trace's own objects and reading ``used_memory``.
Eviction is simulated as Redis does it (``redis_evict.rs``: ``maxmemory-samples`` keys sampled
into a pool of 16, the idlest evicted): ``allkeys-lru`` on a clock of seconds, ``allkeys-lfu`` by
its logarithmic use counter decaying by the minute.

memcached: ``-m`` MiB of 1 MiB pages; an item (48-byte header, 8 of CAS, key + 1, value + 2)
takes the smallest chunk of the slab classes (96 bytes growing by the factor 1.25, 8-byte
aligned, up to 512 KiB) that holds it, and each class evicts its own least recently used item.

Keys are replayed as ``k`` + the object id in hex, padded to the trace's key size: a key shorter
than 17 bytes counts as 17 (:func:`replay_key`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import UserError
from ..lab import spawn_server

KEY_MIN = 17
MEMCACHED_ITEM_HEADER = 48 + 8  # sizeof(item) and the CAS value
MEMCACHED_PAGE = 1 << 20
MEMCACHED_MIN_MB = 2  # memcached refuses -m below twice its 1 MiB item size limit
SAMPLE_OBJECTS = 20_000
#: The ``maxmemory-policy`` values the Redis model simulates (the simulator's policy for each).
REDIS_EVICTIONS = {"allkeys-lru": "redis", "allkeys-lfu": "redis-lfu"}

# jemalloc's small size classes; above 16 KiB four per doubling
_JE_SMALL = np.array([8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896,
                      1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288,
                      14336, 16384], dtype=np.int64)


def jemalloc_size(n: np.ndarray) -> np.ndarray:
    """The allocation jemalloc hands out for requests of ``n`` bytes (its usable size)."""
    n = np.asarray(n, dtype=np.int64)
    small = _JE_SMALL[np.minimum(np.searchsorted(_JE_SMALL, n), len(_JE_SMALL) - 1)]
    big = n > 16384
    if not big.any():
        return small
    nb = np.maximum(n[big], 16385)
    group = 2 ** np.floor(np.log2(nb - 1)).astype(np.int64)  # the power of two below
    step = group // 4
    out = small.copy()
    out[big] = ((nb + step - 1) // step) * step
    return out


def replay_key_size(key_size: np.ndarray) -> np.ndarray:
    return np.maximum(np.asarray(key_size, dtype=np.int64), KEY_MIN)


def replay_key(object_id: int, key_size: int) -> bytes:
    """The key a replay writes object ``object_id`` under: unique, ``replay_key_size`` bytes."""
    key = b"k%016x" % object_id
    return key + b"_" * (max(key_size, KEY_MIN) - KEY_MIN)


def redis_allocations(key_size: np.ndarray, value_size: np.ndarray, ttl: np.ndarray) -> np.ndarray:
    """What jemalloc hands Redis for one string key: dict entry, key sds, value (embedded in its
    object up to 44 bytes), and the expires dict's entry for a key with a TTL."""
    k = replay_key_size(key_size)
    v = np.asarray(value_size, dtype=np.int64)
    sds_header = lambda n: np.where(n < 32, 1, np.where(n < 256, 3, np.where(n < 65536, 5, 9)))  # noqa: E731
    value = np.where(v <= 44, jemalloc_size(16 + 3 + v + 1), 16 + jemalloc_size(sds_header(v) + v + 1))
    entry = int(jemalloc_size(np.array([24]))[0])  # a 24-byte dictEntry: jemalloc has no 24-byte class (32)
    return entry + jemalloc_size(sds_header(k) + k + 1) + value + entry * (np.asarray(ttl) > 0)


def memcached_item_size(key_size: np.ndarray, value_size: np.ndarray) -> np.ndarray:
    return MEMCACHED_ITEM_HEADER + replay_key_size(key_size) + 1 + np.asarray(value_size, dtype=np.int64) + 2


def memcached_chunks(factor: float = 1.25, smallest: int = 96, largest: int = 512 * 1024) -> list[int]:
    """The slab classes' chunk sizes, as memcached -vv lists them (1.6, defaults)."""
    sizes, size = [], smallest
    while size <= largest / factor:
        sizes.append(size)
        size = int(math.ceil(size * factor / 8) * 8)
    return [*sizes, largest]


# What a model is told apart by: the setting its server is sized with (not the scheme's name: schemes.py
# owns those facts)
MAXMEMORY, MEMORY_MB, ENTRIES = "maxmemory", "memory_mb", "max_entries"


@dataclass
class ServerModel:
    """How one server charges an object and maps a simulated capacity to its setting."""

    server: str  # "redis" | "memcached" | "memory" (cachemark's in-process LRU, memory://)
    param: str  # the URL's parameter: "maxmemory" | "memory_mb" | "max_entries"
    version: str = "?"
    base_bytes: int = 0  # Redis: used_memory with nothing stored and a client connected
    per_item: float = 0.0  # Redis: measured beyond the allocations, per key
    per_ttl: float = 0.0  # Redis: measured beyond the allocations, per key with a TTL
    samples: int = 5  # Redis: maxmemory-samples
    eviction: str = "allkeys-lru"  # Redis: maxmemory-policy (REDIS_EVICTIONS)
    chunks: list[int] = field(default_factory=memcached_chunks)  # memcached: its slab classes
    notes: list[str] = field(default_factory=list)
    mean_bytes: float = 0.0  # memory: key + value bytes per object, to show entries as bytes

    @property
    def policy(self) -> str:
        if self.param == ENTRIES:
            return "lru"
        return REDIS_EVICTIONS[self.eviction] if self.param == MAXMEMORY else self.server

    @property
    def lazy_expiry(self) -> bool:
        """memory:// drops an expired entry only when it is read; the servers sweep theirs."""
        return self.param == ENTRIES

    def charge(self, key_size: np.ndarray, value_size: np.ndarray, ttl: np.ndarray) -> np.ndarray:
        """Bytes each request's object costs the server (memcached: the item before its chunk)."""
        if self.param == ENTRIES:
            return np.ones(len(key_size), dtype=np.uint32)
        if self.param == MAXMEMORY:
            cost = redis_allocations(key_size, value_size, ttl) + self.per_item + self.per_ttl * (np.asarray(ttl) > 0)
        else:
            cost = memcached_item_size(key_size, value_size)
        return np.clip(np.rint(cost), 1, 2**32 - 1).astype(np.uint32)

    def chunk_of(self, item_size: np.ndarray) -> np.ndarray:
        """memcached: the chunk an item of ``item_size`` bytes takes."""
        chunks = np.asarray(self.chunks, dtype=np.int64)
        return chunks[np.minimum(np.searchsorted(chunks, item_size), len(chunks) - 1)]

    def capacity(self, setting: int) -> int:
        """The simulated cache's capacity (bytes) for a setting of the server's parameter."""
        if self.param == MAXMEMORY:
            return max(0, int(setting) - self.base_bytes)
        if self.param == ENTRIES:
            return int(setting)
        return int(setting) * MEMCACHED_PAGE

    def setting(self, capacity: float) -> int:
        """The server's setting that gives at least ``capacity`` bytes of cache."""
        if self.param == MAXMEMORY:
            return int(math.ceil(capacity)) + self.base_bytes
        if self.param == ENTRIES:
            return max(1, int(math.ceil(capacity)))
        return max(MEMCACHED_MIN_MB, int(math.ceil(capacity / MEMCACHED_PAGE - 1e-9)))

    def setting_bytes(self, setting: int) -> int:
        """The memory the setting stands for, in bytes (maxmemory; -m × 1 MiB; memory://: its
        entries' key + value bytes, the mean object's — Python's own overhead not counted)."""
        if self.param == ENTRIES:
            return int(setting * self.mean_bytes)
        return int(setting) if self.param == MAXMEMORY else int(setting) * MEMCACHED_PAGE

    def spawn_params(self, setting: int) -> dict[str, object]:
        if self.param == ENTRIES:
            return {"max_entries": int(setting)}
        if self.param == MAXMEMORY:
            return {"maxmemory": int(setting), "maxmemory_policy": self.eviction}
        return {"memory_mb": int(setting)}

    def spawn_url(self, setting: int) -> str:
        if self.param == ENTRIES:
            return f"memory://?max_entries={int(setting)}"
        return f"spawn:{self.server}?" + "&".join(f"{k}={v}" for k, v in self.spawn_params(setting).items())

    def settings_grid(self, largest_bytes: float, points: int) -> list[int]:
        """Settings from small to ``largest_bytes`` of cache, evenly spaced in log scale."""
        if self.param == MEMORY_MB:
            # each slab class in use holds a page of its own whatever -m says: beyond the footprint
            top = max(3, int(math.ceil(largest_bytes / MEMCACHED_PAGE)) + len(self.chunks) // 2)
            return sorted({max(MEMCACHED_MIN_MB, round(top ** (i / (points - 1)))) for i in range(points)})
        if self.param == ENTRIES:  # largest_bytes: here the objects
            return sorted({max(1, round(g)) for g in np.geomspace(1, max(largest_bytes, 2), points)})
        low = max(4096.0, largest_bytes / 1000)
        caps = np.geomspace(low, max(largest_bytes, low * 2), points)
        return sorted({self.setting(c) for c in caps})


def measure_redis(requests: object, samples: int = 5, objects: int = SAMPLE_OBJECTS, seed: int = 0,
                  eviction: str = "allkeys-lru") -> ServerModel:
    """Redis's base memory and per-key remainder, measured on a spawned server with a sample of
    the trace's own objects (their key and value sizes), without and with a TTL."""
    import redis

    if eviction not in REDIS_EVICTIONS:
        raise UserError(f"maxmemory_policy {eviction!r}: sizing simulates {' and '.join(REDIS_EVICTIONS)}")

    ids, key_size, value_size = _object_sample(requests, objects, seed)
    with spawn_server("redis") as server:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        try:
            version = str(client.info("server").get("redis_version", "?"))
            client.ping()
            base = int(client.info("memory")["used_memory"])
            remainders = []
            for ttl in (False, True):
                client.flushall()
                before = int(client.info("memory")["used_memory"])
                pipe = client.pipeline(transaction=False)
                for i, (oid, k, v) in enumerate(zip(ids.tolist(), key_size.tolist(), value_size.tolist(),
                                                    strict=True)):
                    pipe.set(replay_key(oid, k), b"v" * v, px=3_600_000 if ttl else None)
                    if i % 500 == 499:
                        pipe.execute()
                pipe.execute()
                grown = int(client.info("memory")["used_memory"]) - before
                modelled = redis_allocations(key_size, value_size, np.full(len(ids), int(ttl))).sum()
                remainders.append((grown - float(modelled)) / len(ids))
        finally:
            client.close()
    notes = [f"Redis {version} ({eviction}): base used_memory {base:,} B with a client connected; per key "
             f"{remainders[0]:.1f} B "
             f"beyond its allocations (hash-table buckets, allocator slack), {remainders[1] - remainders[0]:.1f} B "
             f"more with a TTL (measured on {len(ids):,} of the trace's objects)."]
    return ServerModel("redis", "maxmemory", version, base, remainders[0], remainders[1] - remainders[0], samples,
                       eviction, notes=notes)


def memory_model(requests: object) -> ServerModel:
    """cachemark's in-process LRU (``memory://?max_entries=N``): entries, lazy expiry."""
    r = requests
    _, first = np.unique(r.ids, return_index=True)
    mean = float((r.key_size[first].astype(np.int64) + r.value_size[first]).mean()) if len(first) else 0.0
    return ServerModel("memory", "max_entries", mean_bytes=mean,
                       notes=["memory://: an LRU of max_entries entries in the worker's process; an expired entry "
                              "is dropped when read (no sweep), so it holds its place until then."])


def memcached_model() -> ServerModel:
    from ..lab.base import find_binary

    try:
        import subprocess

        out = subprocess.run([find_binary("memcached"), "-V"], capture_output=True, text=True, timeout=10).stdout
        version = out.split()[-1] if out.strip() else "?"
    except Exception:  # noqa: BLE001 — the version is only shown
        version = "?"
    return ServerModel("memcached", "memory_mb", version,
                       notes=[f"memcached {version}: -m in 1 MiB pages; items (56 B header with CAS, key + 1, "
                              "value + 2) in slab classes from 96 B by the factor 1.25, one LRU per class."])


def _object_sample(requests: object, objects: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Up to ``objects`` distinct objects of the requests, with their (last non-zero) sizes."""
    r = requests
    writes = r.value_size > 0
    ids = r.ids[writes]
    _, first = np.unique(ids, return_index=True)
    rng = np.random.default_rng(seed)
    pick = rng.choice(first, size=min(objects, len(first)), replace=False) if len(first) else first
    return ids[pick], r.key_size[writes][pick], r.value_size[writes][pick]
