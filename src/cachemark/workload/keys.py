"""Key choosers: uniform, zipf, sequential and hotspot over ``count`` key ids.

Zipf draws ranks by inverting a precomputed CDF (exact for any exponent, including
s < 1 which numpy's own zipf cannot do), then scatters ranks over ids with a fixed
multiplicative permutation so that hot keys are not all neighbours (which matters
for client-side sharding and for ordered stores).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError

MAX_ZIPF_KEYS = 50_000_000  # the CDF table costs 8 bytes per key


@dataclass(frozen=True)
class KeyDist:
    """A parsed key distribution: ``uniform``, ``zipf:S``, ``sequential``, ``hotspot:F,P``."""

    kind: str = "zipf"
    s: float = 0.99  # zipf exponent
    hot_fraction: float = 0.2  # hotspot: this share of the keys ...
    hot_probability: float = 0.8  # ... gets this share of the ops

    @classmethod
    def parse(cls, text: str) -> KeyDist:
        kind, _, args = text.strip().lower().partition(":")
        try:
            if kind == "uniform" and not args:
                return cls("uniform")
            if kind == "sequential" and not args:
                return cls("sequential")
            if kind == "zipf":
                s = float(args) if args else 0.99
                if not 0 < s <= 5:
                    raise ValueError
                return cls("zipf", s=s)
            if kind == "hotspot":
                fraction, probability = (float(x) for x in args.split(",")) if args else (0.2, 0.8)
                if not (0 < fraction < 1 and 0 < probability < 1):
                    raise ValueError
                return cls("hotspot", hot_fraction=fraction, hot_probability=probability)
        except ValueError:
            pass
        raise SpecError(
            f"key_dist {text!r}: expected uniform, sequential, zipf[:S] (0<S<=5) or hotspot[:F,P] (0<F,P<1)"
        )

    def __str__(self) -> str:
        if self.kind == "zipf":
            return f"zipf:{self.s:g}"
        if self.kind == "hotspot":
            return f"hotspot:{self.hot_fraction:g},{self.hot_probability:g}"
        return self.kind


def _scatter_multiplier(count: int) -> int:
    """An odd multiplier coprime with ``count``: rank -> (rank * m) % count is a bijection."""
    m = int(count * 0.6180339887) | 1
    while math.gcd(m, count) != 1:
        m += 2
    return m


class KeyChooser:
    """Draws key ids for one worker. ``sequential`` strides by worker so workers never overlap."""

    def __init__(self, dist: KeyDist, count: int, rng: np.random.Generator, worker: int = 0, workers: int = 1):
        if count < 1:
            raise SpecError("keys must be at least 1")
        self.dist, self.count, self.rng = dist, count, rng
        self.worker, self.workers = worker, workers
        self._next = 0
        if dist.kind == "zipf":
            if count > MAX_ZIPF_KEYS:
                raise SpecError(f"zipf over {count} keys: at most {MAX_ZIPF_KEYS} are supported")
            weights = 1.0 / np.power(np.arange(1, count + 1, dtype=np.float64), dist.s)
            self._cdf = np.cumsum(weights)
            self._cdf /= self._cdf[-1]
            self._multiplier = _scatter_multiplier(count)

    def rank_to_id(self, ranks: np.ndarray) -> np.ndarray:
        return (ranks * self._multiplier) % self.count

    def draw(self, n: int) -> np.ndarray:
        kind = self.dist.kind
        if kind == "uniform":
            return self.rng.integers(0, self.count, size=n, dtype=np.int64)
        if kind == "zipf":
            ranks = np.searchsorted(self._cdf, self.rng.random(n), side="right")
            return self.rank_to_id(np.minimum(ranks, self.count - 1))
        if kind == "sequential":
            steps = np.arange(self._next, self._next + n, dtype=np.int64)
            self._next += n
            return (self.worker + steps * self.workers) % self.count
        # hotspot: the first hot_fraction of ids get hot_probability of the draws
        hot_count = max(1, int(self.count * self.dist.hot_fraction))
        hot = self.rng.random(n) < self.dist.hot_probability
        ids = self.rng.integers(hot_count, max(hot_count + 1, self.count), size=n, dtype=np.int64)
        ids[hot] = self.rng.integers(0, hot_count, size=int(hot.sum()), dtype=np.int64)
        return np.minimum(ids, self.count - 1)


# --- key sizes -----------------------------------------------------------------------
# Key i is ``prefix + str(i)``, padded with "_" to its length when ``key_size`` asks for one:
# a fixed N bytes, or ETC's GEV (workload/etc.py). A key's length comes from a table of
# lengths, indexed by a hash of i alone, so every worker, the engine (keyspace.rs) and the
# clean-up agree on every key without sharing state. A plain key already longer than its
# length stays as it is (ids stay unique: digits, then underscores).

KEY_LENGTH_POINTS = 4096  # quantiles of the key-size distribution in the table
MAX_KEY_SIZE = 250  # memcached's limit; the longest key any backend here takes
_MASK = (1 << 64) - 1


def parse_key_size(value: object) -> str | None:
    """``None`` (plain keys; also ``"none"``), ``"N"`` (1…250 bytes) or ``"etc"``; anything else is
    a SpecError."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text == "none":
        return None
    if text == "etc":
        return text
    if text.isdigit() and 1 <= int(text) <= MAX_KEY_SIZE:
        return str(int(text))
    raise SpecError(f"key_size {value!r}: a number of bytes from 1 to {MAX_KEY_SIZE}, etc (Facebook's ETC pool) "
                    f"or none")


def key_lengths(key_size: str | None) -> tuple[int, ...]:
    """The table key lengths are drawn from (empty: plain keys)."""
    if key_size is None:
        return ()
    if key_size == "etc":
        from .etc import key_length_table

        return key_length_table(KEY_LENGTH_POINTS)
    return (int(key_size),)


def length_index(i: int, points: int) -> int:
    """Which entry of a ``points``-long table key ``i`` takes: SplitMix64 of i, multiply-shift."""
    z = (i + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    z ^= z >> 31
    return (z * points) >> 64


def key_name(prefix: str, i: int, lengths: tuple[int, ...] = ()) -> str:
    """Key ``i`` of a run (docs/contracts.md)."""
    key = f"{prefix}{i}"
    if lengths:
        want = lengths[length_index(i, len(lengths))]
        if want > len(key):
            key += "_" * (want - len(key))
    return key
