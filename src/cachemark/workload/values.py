"""Value sizes and the self-checking value format (see docs/contracts.md).

A value is a function of its key and its length only, so any reader can verify any
value without knowing who wrote it: ``cm:<crc32 of key>:`` then filler text. The filler
is base-36 text as random as an application's (reference 004's `rand(36).to_s(36)`):
clients that compress (Rails, Dalli, php-memcached) shrink it by about a third, as they
would real values (a repeating pattern would shrink to a seventh). It repeats every
64 KiB, beyond the reach of deflate's 32 KiB window and LZ4's and Snappy's 64 KiB.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..errors import SpecError

MAX_VALUE_SIZE = 64 * 1024 * 1024
FILLER_PERIOD = 64 * 1024
FILLER_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyz"


def filler_period() -> bytes:
    """The filler's first ``FILLER_PERIOD`` bytes: byte ``i`` is ``FILLER_ALPHABET[j]``, ``j`` the
    multiply-shift of SplitMix64(i) onto 36 (``keys.length_index(i, 36)``, here over all i at once)."""
    z = np.arange(FILLER_PERIOD, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    n = np.uint64(len(FILLER_ALPHABET))  # the high word of z × n, in 32-bit halves (no 128-bit integers here)
    high = ((z >> np.uint64(32)) * n + (((z & np.uint64(0xFFFFFFFF)) * n) >> np.uint64(32))) >> np.uint64(32)
    return np.frombuffer(FILLER_ALPHABET, dtype=np.uint8)[high].tobytes()


_PATTERN = filler_period()
# The filler values are cut from, grown to the largest value asked for so far: every process
# imports this module, and building all 64 MiB up front cost each one 50 ms and 64 MiB.
_filler = _PATTERN * 2
_filler_view = memoryview(_filler)


def _grow_filler(size: int) -> None:
    global _filler, _filler_view
    _filler = _PATTERN * (max(size, 2 * len(_filler)) // len(_PATTERN) + 1)
    _filler_view = memoryview(_filler)


def value_header(key: str) -> bytes:
    return b"cm:%08x:" % (zlib.crc32(key.encode()) & 0xFFFFFFFF)


def make_value(header: bytes, size: int) -> bytes:
    """The value for the key whose :func:`value_header` is ``header``, ``size`` bytes long."""
    if size <= 12:
        return header[:size]
    if size > len(_filler):
        _grow_filler(size)
    return header + _filler[12:size]


def value_matches(header: bytes, value: bytes) -> bool:
    size = len(value)
    if size <= 12:
        return value == header[:size]
    if size > len(_filler):
        _grow_filler(size)
    return value[:12] == header and _filler_view[12:size] == value[12:]


@dataclass(frozen=True)
class ValueSizes:
    """``fixed`` (one size), ``range`` (uniform min..max), ``choice`` (sizes with weights) or ``etc``
    (Facebook's ETC value sizes: a choice from :func:`.etc.value_table`)."""

    sizes: tuple[int, ...] = (100, 1000)
    weights: tuple[float, ...] = ()
    kind: str = "range"

    @classmethod
    def parse(cls, spec: object) -> ValueSizes:
        """Accepts 100, "100", "100-1000", "100:9,10000:1", [[100, 9], [10000, 1]], or {min, max}."""
        try:
            if isinstance(spec, ValueSizes):
                return spec
            if isinstance(spec, int):
                return cls._checked((spec,), (), "fixed")
            if isinstance(spec, dict):
                return cls._checked((int(spec["min"]), int(spec["max"])), (), "range")
            if isinstance(spec, list | tuple):
                pairs = [(int(size), float(weight)) for size, weight in spec]
                return cls._checked(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), "choice")
            text = str(spec).strip().lower().replace("_", "")
            if text == "etc":  # Facebook's ETC pool: a measured head, then a generalised Pareto (workload/etc.py)
                from .etc import value_table

                sizes, weights = value_table()
                return cls(sizes, weights, "etc")
            if ":" in text or "," in text:
                pairs = []
                for part in text.split(","):
                    size, _, weight = part.partition(":")
                    pairs.append((_size(size), float(weight or 1)))
                return cls._checked(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), "choice")
            if "-" in text:
                low, high = text.split("-", 1)
                return cls._checked((_size(low), _size(high)), (), "range")
            return cls._checked((_size(text),), (), "fixed")
        except (ValueError, KeyError, TypeError, OverflowError):  # OverflowError: int(float("1e400"))
            raise SpecError(
                f"value_size {spec!r}: expected a size (100, 4k), a range (100-1000) "
                "or sizes with weights (100:9,10000:1)"
            ) from None

    @classmethod
    def _checked(cls, sizes: tuple[int, ...], weights: tuple[float, ...], kind: str) -> ValueSizes:
        if any(s < 0 or s > MAX_VALUE_SIZE for s in sizes):
            raise SpecError(f"value sizes must be between 0 and {MAX_VALUE_SIZE} bytes, got {sizes}")
        if kind == "range" and sizes[0] > sizes[1]:
            raise SpecError(f"value_size range {sizes[0]}-{sizes[1]} is empty")
        # NaN passes every comparison and an infinite sum makes every probability NaN: refuse both
        if kind == "choice" and not (all(0 <= w < math.inf for w in weights) and 0 < sum(weights) < math.inf):
            raise SpecError("value_size weights must be finite, non-negative and not all zero")
        return cls(sizes, weights, kind)

    @property
    def min(self) -> int:
        return min(self.sizes)

    @property
    def max(self) -> int:
        return max(self.sizes)

    def allows(self, size: int) -> bool:
        if self.kind == "range":
            return self.sizes[0] <= size <= self.sizes[1]
        return size in self._allowed

    @cached_property
    def _allowed(self) -> frozenset[int]:
        return frozenset(self.sizes)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.sizes[0], dtype=np.int64)
        if self.kind == "range":
            return rng.integers(self.sizes[0], self.sizes[1] + 1, size=n, dtype=np.int64)
        p = np.asarray(self.weights, dtype=np.float64)
        return rng.choice(np.asarray(self.sizes, dtype=np.int64), size=n, p=p / p.sum())

    def mean(self) -> float:
        if self.kind == "range":
            return (self.sizes[0] + self.sizes[1]) / 2
        if self.kind == "fixed":
            return float(self.sizes[0])
        return float(np.average(self.sizes, weights=self.weights))

    def __str__(self) -> str:
        if self.kind == "etc":
            return "etc"
        if self.kind == "fixed":
            return str(self.sizes[0])
        if self.kind == "range":
            return f"{self.sizes[0]}-{self.sizes[1]}"
        return ",".join(f"{s}:{w:g}" for s, w in zip(self.sizes, self.weights, strict=True))


def _size(text: str) -> int:
    text = text.strip()
    for suffix, factor in (("kib", 1024), ("mib", 1024**2), ("kb", 1000), ("mb", 1000**2),
                           ("k", 1024), ("m", 1024**2), ("b", 1)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)
