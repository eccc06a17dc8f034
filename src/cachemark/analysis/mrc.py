"""Miss-ratio curves: how the miss ratio falls as the cache grows, for a stream of keys.

LRU curves come from one pass of stack distances in the native simulator (exact, or
SHARDS-sampled for long traces: exact up to the engine's exact stack of recent objects,
estimated beyond with a standard error at each size, and "not resolved" where that error is
too wide to answer within 0.01); other policies (FIFO, SIEVE) are simulated at each size.
The stream is fed in chunks of numpy arrays — u64 object ids and u32 sizes — so a trace of
any length goes through in bounded memory.
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

# A sampled point is answered when three standard errors stay within 0.01 of hit ratio.
RESOLVED_ERROR = 0.01 / 3


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
    # sampled: the standard error of each miss ratio (0 where exact); empty: exact everywhere
    errors: list[float] = field(default_factory=list)
    objects_exact: bool = True  # False: ``objects`` (and ``cold``) are estimated from a sample
    exact_up_to: float = math.inf  # sizes up to this are exact (a sampled curve's near stack)

    def _at(self, values: list[float], size: float) -> float:
        """``values`` (one per size) interpolated linearly in log size."""
        xs = self.sizes
        if size <= xs[0]:
            return values[0]
        for i in range(1, len(xs)):
            if size <= xs[i]:
                x0, x1 = xs[i - 1], xs[i]
                f = 0.0 if x1 == x0 else (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
                return values[i - 1] + f * (values[i] - values[i - 1])
        return values[-1]

    def error_at(self, size: float) -> float:
        """The standard error of the hit ratio at ``size`` (0 where exact)."""
        if not self.errors or size <= self.exact_up_to:
            return 0.0
        return self._at(self.errors, size)

    def resolved_at(self, size: float) -> bool:
        """Whether the sample pins the hit ratio at ``size`` within 0.01 (three standard errors)."""
        return self.error_at(size) <= RESOLVED_ERROR

    def hit_ratio_at(self, size: float) -> float | None:
        """Interpolated (linearly in log size) between the computed points; None where a
        sampled curve does not resolve it (see ``resolved_at``)."""
        if not self.resolved_at(size):
            return None
        return 1.0 - self._at(self.miss_ratios, size)

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

    def size_resolved(self, size: float | None) -> bool:
        """Whether an answer of ``size_for`` stands: the points around it are resolved (for
        None, "no size reaches it": the largest size is)."""
        if size is None:
            return self.resolved_at(self.sizes[-1])
        below = max((x for x in self.sizes if x <= size), default=self.sizes[0])
        above = min((x for x in self.sizes if x >= size), default=self.sizes[-1])
        return self.resolved_at(below) and self.resolved_at(above)


def size_grid(largest: float, points: int = 48) -> list[float]:
    """Sizes from 1 to ``largest``, evenly spaced in log scale (cache sizing is a ratio question)."""
    largest = max(largest, 2.0)
    return sorted({max(1.0, round(largest ** (i / (points - 1)))) for i in range(points)})


def _ids_bytes(ids: np.ndarray) -> bytes:
    return np.ascontiguousarray(ids, dtype="<u8").tobytes()


def lru_curves(chunks: Iterable[Chunk], sample_rate: float = 1.0, seed: int = 0, points: int = 48,
               warmup: int = 0, objects: float | None = None, shares: Iterable[float] = (),
               near: int | None = None, level: int | None = None) -> tuple[Curve, Curve | None]:
    """LRU miss ratio by objects, and by bytes when the chunks carry sizes; the first
    ``warmup`` requests fill the cache uncounted (a synthetic stream: the steady state).

    ``objects``: the key space when it is known (a synthetic workload), else counted or
    estimated from the stream; the curve also holds the points at these ``shares`` of it.
    ``near``, ``level``: a sampled run's exact stack and its denser samples' stacks (None: the
    engine's defaults; ``near=0``: plain SHARDS-adj, for comparison).

    Ten keys read in turn, a hundred times: LRU hits only once all ten fit.

    >>> keys = np.tile(np.arange(10, dtype=np.uint64), 100)
    >>> by_objects, by_bytes = lru_curves([(keys, None)])
    >>> by_objects.hit_ratio_at(9), by_objects.hit_ratio_at(10), round(by_objects.size_for(0.99))
    (0.0, 0.99, 10)
    """
    if not 0 < sample_rate <= 1:
        raise UserError(f"sample rate {sample_rate!r}: must be in (0, 1]")
    distances = StackDistances(sample_rate, seed, warmup, near, level)
    total_bytes_seen, sized = 0, False
    for ids, sizes in chunks:
        if sizes is not None:
            sized = True
            sizes = np.ascontiguousarray(np.clip(sizes, 0, 2**32 - 1), dtype="<u4")
            total_bytes_seen += int(sizes.sum())
            distances.feed(_ids_bytes(ids), sizes.tobytes())
        else:
            distances.feed(_ids_bytes(ids))
    exact = objects is not None or distances.objects_exact
    if objects is None:
        objects = distances.objects
    exact_up_to = distances.exact_up_to
    notes = []
    if sample_rate < 1 and exact_up_to == 0:
        notes.append(f"plain SHARDS-adj at {sample_rate:g}: every size estimated, with no standard error.")
    elif sample_rate < 1 and exact_up_to < math.inf:
        notes.append(f"SHARDS at {sample_rate:g}: exact up to {exact_up_to:,.0f} objects (every request's "
                     f"{exact_up_to:,.0f} most recent objects are kept); larger sizes estimated from samples of "
                     "the objects, each with its standard error.")
    elif sample_rate < 1:
        notes.append(f"SHARDS at {sample_rate:g}: the stream's objects all fit the exact stack, so the curve is exact.")
    grid = sorted(set(size_grid(objects, points)) | {max(1.0, float(round(objects * s))) for s in shares})
    cold = distances.cold
    sampled = sample_rate < 1

    def curve(unit: str, sizes: list[float], miss: list[float], errors: list[float]) -> Curve:
        return Curve("lru", unit, sizes, miss, distances.requests, objects, sample_rate, list(notes), cold,
                     warmup, errors if sampled else [], exact, exact_up_to if unit == "objects" else 0.0)

    by_objects = curve("objects", grid, distances.miss_ratios_by_objects(grid),
                       distances.std_errors_by_objects(grid))
    by_bytes = None
    if sized and distances.requests:
        mean_size = total_bytes_seen / distances.requests
        byte_grid = size_grid(objects * mean_size * 2, points)
        by_bytes = curve("bytes", byte_grid, distances.miss_ratios_by_bytes(byte_grid),
                         distances.std_errors_by_bytes(byte_grid))
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
