"""Miss-ratio curves: how the miss ratio falls as the cache grows, for a stream of keys.

LRU curves come from one pass of stack distances in the native simulator (exact, or
SHARDS-sampled for long traces: constant memory in the objects kept); other policies
(FIFO, SIEVE) are simulated at each size. The stream is fed in chunks of numpy arrays —
u64 object ids and u32 sizes — so a trace of any length goes through in bounded memory.
A synthetic workload becomes such a stream by drawing from cachemark's own key chooser,
the same one the workers use.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .._engine import PolicySim, StackDistances
from ..errors import UserError

Chunk = tuple[np.ndarray, np.ndarray | None]  # (object ids, sizes in bytes or None)

POLICIES = ("lru", "fifo", "sieve")


@dataclass
class Curve:
    """Miss ratio at each cache size (objects, or bytes), under one policy."""

    policy: str
    unit: str  # "objects" | "bytes"
    sizes: list[float]
    miss_ratios: list[float]
    requests: int
    objects: float  # distinct objects (estimated when sampled)
    sample_rate: float = 1.0
    notes: list[str] = field(default_factory=list)
    cold: float = 0.0  # first requests of an object (estimated when sampled): a miss at any size
    warmup: int = 0  # requests that filled the cache before any was counted

    def hit_ratio_at(self, size: float) -> float:
        """Interpolated (linearly in log size) between the computed points."""
        xs, ys = self.sizes, self.miss_ratios
        if size <= xs[0]:
            return 1.0 - ys[0]
        for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:]), strict=False):
            if x0 <= size <= x1:
                f = 0.0 if x1 == x0 else (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
                return 1.0 - (y0 + f * (y1 - y0))
        return 1.0 - ys[-1]

    def size_for(self, hit_ratio: float) -> float | None:
        """The smallest size reaching ``hit_ratio`` (interpolated), or None when no size does."""
        xs, ys = self.sizes, self.miss_ratios
        target = 1.0 - hit_ratio
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            if y <= target + 1e-12:
                if i == 0:
                    return x
                x0, y0 = xs[i - 1], ys[i - 1]
                f = (y0 - target) / (y0 - y) if y0 != y else 1.0
                return math.exp(math.log(x0) + f * (math.log(x) - math.log(x0)))
        return None


def size_grid(largest: float, points: int = 48) -> list[float]:
    """Sizes from 1 to ``largest``, evenly spaced in log scale (cache sizing is a ratio question)."""
    largest = max(largest, 2.0)
    return sorted({max(1.0, round(largest ** (i / (points - 1)))) for i in range(points)})


def _ids_bytes(ids: np.ndarray) -> bytes:
    return np.ascontiguousarray(ids, dtype="<u8").tobytes()


def lru_curves(chunks: Iterable[Chunk], sample_rate: float = 1.0, seed: int = 0, points: int = 48,
               warmup: int = 0) -> tuple[Curve, Curve | None]:
    """LRU miss ratio by objects, and by bytes when the chunks carry sizes; the first
    ``warmup`` requests fill the cache uncounted (a synthetic stream: the steady state)."""
    if not 0 < sample_rate <= 1:
        raise UserError(f"sample rate {sample_rate!r}: must be in (0, 1]")
    distances = StackDistances(sample_rate, seed, warmup)
    total_bytes_seen, sized = 0, False
    for ids, sizes in chunks:
        if sizes is not None:
            sized = True
            sizes = np.ascontiguousarray(np.clip(sizes, 0, 2**32 - 1), dtype="<u4")
            total_bytes_seen += int(sizes.sum())
            distances.feed(_ids_bytes(ids), sizes.tobytes())
        else:
            distances.feed(_ids_bytes(ids))
    objects = distances.objects
    notes = [f"SHARDS: {sample_rate:g} of the objects sampled"] if sample_rate < 1 else []
    grid = size_grid(objects, points)
    cold = distances.cold / distances.rate
    by_objects = Curve("lru", "objects", grid, distances.miss_ratios_by_objects(grid), distances.requests,
                       objects, distances.rate, notes, cold, warmup)
    by_bytes = None
    if sized and distances.requests:
        mean_size = total_bytes_seen / distances.requests
        byte_grid = size_grid(objects * mean_size * 2, points)
        by_bytes = Curve("lru", "bytes", byte_grid, distances.miss_ratios_by_bytes(byte_grid), distances.requests,
                         objects, distances.rate, notes, cold, warmup)
    return by_objects, by_bytes


def policy_curve(policy: str, chunks: Iterable[Chunk], sizes: list[float], warmup: int = 0) -> Curve:
    """FIFO or SIEVE simulated at each of ``sizes`` (objects)."""
    if policy not in ("fifo", "sieve"):
        raise UserError(f"policy {policy!r}: cachemark simulates {', '.join(POLICIES)}")
    sim = PolicySim(policy, [max(1, int(s)) for s in sizes], warmup)
    requests, seen = 0, set()
    for ids, _ in chunks:
        sim.feed(_ids_bytes(ids))
        requests += len(ids)
        seen.update(np.unique(ids).tolist())
    return Curve(policy, "objects", list(sizes), sim.miss_ratios(), max(0, requests - warmup), float(len(seen)),
                 warmup=warmup)


def workload_stream(keys: int, key_dist: str, value_sizes: object, requests: int, seed: int = 0,
                    chunk: int = 1 << 20) -> Iterator[Chunk]:
    """The key stream a synthetic workload draws (one worker's chooser), with value sizes."""
    from ..workload.keys import KeyChooser, KeyDist
    from ..workload.values import ValueSizes

    rng = np.random.default_rng(seed)
    chooser = KeyChooser(KeyDist.parse(key_dist), keys, rng)
    sizes = ValueSizes.parse(value_sizes)
    # a key's size is fixed by its id, as the workers' values are: draw one size per key once
    size_of = np.asarray(sizes.draw(np.random.default_rng(seed + 1), keys), dtype=np.uint32)
    left = requests
    while left > 0:
        n = min(chunk, left)
        ids = chooser.draw(n).astype(np.uint64)
        yield ids, size_of[ids.astype(np.int64)]
        left -= n
