"""Bytes per item, measured: what one cached object really costs in Redis and in memcached.

A miss-ratio curve says how many objects the cache must hold; the server's memory limit
(`maxmemory`, memcached's `-m`) is in bytes, and the two differ by each server's per-item
overhead (Redis: dict entry, robj and allocator rounding; memcached: the item header and
the slab class's chunk size). Guessing that overhead is where sizing goes wrong, so it is
measured: a private server is spawned, a sample of items with the workload's key and value
sizes is written, and the server's own accounting is read before and after.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..lab import spawn_server

SAMPLE_ITEMS = 20_000


@dataclass
class Footprint:
    server: str  # "redis" | "memcached"
    version: str
    items: int
    bytes_per_item: float
    payload_per_item: float  # mean key + value bytes of the sample

    @property
    def overhead_per_item(self) -> float:
        return self.bytes_per_item - self.payload_per_item


def _sample(value_sizes: np.ndarray, key_size: int, items: int, seed: int) -> tuple[list[bytes], list[int]]:
    rng = np.random.default_rng(seed)
    sizes = rng.choice(value_sizes, size=items) if len(value_sizes) else np.full(items, 100)
    keys = [f"fp:{i:0{max(1, key_size - 3)}d}".encode()[:max(key_size, 4)] for i in range(items)]
    return keys, [int(s) for s in sizes]


def redis_footprint(value_sizes: np.ndarray, key_size: int = 16, items: int = SAMPLE_ITEMS,
                    seed: int = 0) -> Footprint:
    """``used_memory`` grown by writing ``items`` values, per item (Redis's own allocator figure)."""
    import redis

    with spawn_server("redis") as server:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        keys, sizes = _sample(value_sizes, key_size, items, seed)
        before = int(client.info("memory")["used_memory"])
        pipe = client.pipeline(transaction=False)
        for i, (key, size) in enumerate(zip(keys, sizes, strict=True)):
            pipe.set(key, b"v" * size)
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
        after = int(client.info("memory")["used_memory"])
        version = str(client.info("server").get("redis_version", "?"))
        client.close()
    payload = float(np.mean([len(k) + s for k, s in zip(keys, sizes, strict=True)]))
    return Footprint("redis", version, items, (after - before) / items, payload)


def memcached_footprint(value_sizes: np.ndarray, key_size: int = 16, items: int = SAMPLE_ITEMS,
                        seed: int = 0) -> Footprint:
    """The slab chunks the items occupy (``chunk_size × used_chunks`` per class), per item:
    what counts against ``-m``, without the page rounding a small sample would exaggerate."""
    from pymemcache.client.base import Client

    with spawn_server("memcached", memory_mb=1024) as server:
        client = Client(("127.0.0.1", server.port))
        keys, sizes = _sample(value_sizes, key_size, items, seed)
        for key, size in zip(keys, sizes, strict=True):
            client.set(key, b"v" * size, noreply=False)
        slabs = client.stats("slabs")
        version = client.version().decode() if hasattr(client, "version") else "?"
        client.close()
    used = 0
    for name, value in slabs.items():
        name = name.decode() if isinstance(name, bytes) else str(name)
        if name.endswith(":used_chunks"):
            klass = name.split(":")[0]
            chunk = slabs.get(f"{klass}:chunk_size".encode(), slabs.get(f"{klass}:chunk_size"))
            used += int(value) * int(chunk)
    payload = float(np.mean([len(k) + s for k, s in zip(keys, sizes, strict=True)]))
    return Footprint("memcached", version, items, used / items, payload)
