"""HDR latency histograms with fixed parameters, recorded in bulk with numpy.

Every histogram in cachemark tracks 1 ns … 60 s at 3 significant digits, so any two
merge by adding their count arrays. Recording one value at a time in Python costs
microseconds; instead the timed loop appends raw nanosecond latencies to a list and
:func:`bucket_indexes` maps a whole batch to counts-array slots at once.

Serialisation is the standard HdrHistogram "V2 compressed" form (zlib-deflated V2
payload, base64), so any HdrHistogram library can read what cachemark writes.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterable

import numpy as np

LOWEST = 1
HIGHEST = 60_000_000_000  # 60 s in ns
SIGNIFICANT_DIGITS = 3
SUB_BUCKET_COUNT = 2048  # 2 * 10**3 rounded up to a power of two
SUB_BUCKET_HALF_COUNT = SUB_BUCKET_COUNT // 2
SUB_BUCKET_HALF_COUNT_MAGNITUDE = 10
SUB_BUCKET_MASK = SUB_BUCKET_COUNT - 1


def _bucket_count() -> int:
    smallest_untrackable = SUB_BUCKET_COUNT
    buckets = 1
    while smallest_untrackable <= HIGHEST:
        smallest_untrackable <<= 1
        buckets += 1
    return buckets


BUCKET_COUNT = _bucket_count()
COUNTS_LEN = (BUCKET_COUNT + 1) * SUB_BUCKET_HALF_COUNT

_V2_ENCODING_COOKIE = 0x1C849303 | 0x10
_V2_COMPRESSED_COOKIE = 0x1C849304 | 0x10
_HEADER = struct.Struct(">iiiiqqd")
_COMPRESSED_HEADER = struct.Struct(">ii")
# A payload holds at most one LEB128 value (≤ 9 bytes) per slot: anything longer is not ours.
_MAX_INFLATED = _HEADER.size + COUNTS_LEN * 9
_MAX_TOTAL = 2.0**62  # counts summed in int64 must not wrap


def bucket_indexes(values: np.ndarray) -> np.ndarray:
    """Counts-array index of each value (int64 ns), clamped to [0, HIGHEST]."""
    v = np.clip(values.astype(np.int64, copy=False), 0, HIGHEST)
    # bit length of (v | mask): exact through float64 because v < 2**53
    bit_length = np.frexp((v | SUB_BUCKET_MASK).astype(np.float64))[1].astype(np.int64)
    bucket = bit_length - (SUB_BUCKET_HALF_COUNT_MAGNITUDE + 1)
    sub_bucket = v >> bucket
    return ((bucket + 1) << SUB_BUCKET_HALF_COUNT_MAGNITUDE) + (sub_bucket - SUB_BUCKET_HALF_COUNT)


def _index_bounds() -> tuple[np.ndarray, np.ndarray]:
    """Lowest and highest value equivalent to each counts-array slot."""
    index = np.arange(COUNTS_LEN, dtype=np.int64)
    bucket = (index >> SUB_BUCKET_HALF_COUNT_MAGNITUDE) - 1
    sub_bucket = (index & (SUB_BUCKET_HALF_COUNT - 1)) + SUB_BUCKET_HALF_COUNT
    first = bucket < 0
    sub_bucket[first] -= SUB_BUCKET_HALF_COUNT
    bucket[first] = 0
    lowest = sub_bucket << bucket
    return lowest, lowest + (np.int64(1) << bucket) - 1


_LOWEST_EQUIVALENT, _HIGHEST_EQUIVALENT = _index_bounds()


class Histogram:
    """A counts array with the fixed parameters above; cheap to merge and summarise.

    >>> latencies_ns = Histogram.of([100, 200, 300, 1000])
    >>> latencies_ns.total, latencies_ns.percentile(50), latencies_ns.percentile(100)
    (4, 200, 1000)
    >>> Histogram.decode(latencies_ns.encode()).add(latencies_ns).total  # as saved in results, merged
    8
    """

    __slots__ = ("counts",)

    def __init__(self, counts: np.ndarray | None = None) -> None:
        self.counts = np.zeros(COUNTS_LEN, dtype=np.int64) if counts is None else counts

    @classmethod
    def of(cls, values: Iterable[int]) -> Histogram:
        hist = cls()
        hist.record_array(np.fromiter(values, dtype=np.int64))
        return hist

    def record_array(self, values: np.ndarray) -> None:
        if len(values):
            self.counts += np.bincount(bucket_indexes(values), minlength=COUNTS_LEN)

    def add(self, other: Histogram) -> Histogram:
        self.counts += other.counts
        return self

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def percentile(self, percentile: float) -> int:
        """Value at a percentile (0–100), as HdrHistogram reports it: the slot's highest equivalent."""
        total = self.total
        if total == 0:
            return 0
        rank = max(1, int(np.ceil(percentile / 100.0 * total)))
        index = int(np.searchsorted(np.cumsum(self.counts), rank))
        return int(_HIGHEST_EQUIVALENT[min(index, COUNTS_LEN - 1)])

    def percentiles(self, percentiles: Iterable[float]) -> list[int]:
        total = self.total
        if total == 0:
            return [0 for _ in percentiles]
        cumulative = np.cumsum(self.counts)
        ranks = [max(1, int(np.ceil(p / 100.0 * total))) for p in percentiles]
        indexes = np.searchsorted(cumulative, ranks)
        return [int(_HIGHEST_EQUIVALENT[min(int(i), COUNTS_LEN - 1)]) for i in indexes]

    @property
    def max(self) -> int:
        nonzero = np.flatnonzero(self.counts)
        return int(_HIGHEST_EQUIVALENT[nonzero[-1]]) if len(nonzero) else 0

    @property
    def min(self) -> int:
        nonzero = np.flatnonzero(self.counts)
        return int(_LOWEST_EQUIVALENT[nonzero[0]]) if len(nonzero) else 0

    @property
    def mean(self) -> float:
        total = self.total
        if total == 0:
            return 0.0
        middle = (_LOWEST_EQUIVALENT + _HIGHEST_EQUIVALENT) / 2.0
        return float((self.counts * middle).sum() / total)

    def distribution(self) -> list[tuple[int, int]]:
        """(highest equivalent value, count) for every non-empty slot — for plots."""
        nonzero = np.flatnonzero(self.counts)
        return [(int(_HIGHEST_EQUIVALENT[i]), int(self.counts[i])) for i in nonzero]

    # -- the standard V2 compressed form ---------------------------------------------
    def encode(self) -> str:
        nonzero = np.flatnonzero(self.counts)
        payload = bytearray()
        if len(nonzero):
            position = 0
            for index in nonzero.tolist():
                if index > position:  # a run of empty slots is written as its negated length
                    payload += _zigzag_leb128(-(index - position))
                payload += _zigzag_leb128(int(self.counts[index]))
                position = index + 1
        header = _HEADER.pack(_V2_ENCODING_COOKIE, len(payload), 0, SIGNIFICANT_DIGITS, LOWEST, HIGHEST, 1.0)
        compressed = zlib.compress(header + bytes(payload))
        return base64.b64encode(_COMPRESSED_HEADER.pack(_V2_COMPRESSED_COOKIE, len(compressed)) + compressed).decode()

    @classmethod
    def decode(cls, encoded: str) -> Histogram:
        """Read a V2 compressed histogram; it must have cachemark's fixed parameters.

        Anything else — not base64, truncated, another tool's parameters, counts placed
        past the last slot, a deflate stream that inflates beyond what any histogram of
        these parameters needs — raises ``ValueError`` with a one-line reason: results
        files come from users, and a corrupt one must not end in a traceback.
        """
        if not isinstance(encoded, str | bytes):
            raise ValueError(f"expected a base64 string, not {type(encoded).__name__}")
        try:
            raw = base64.b64decode(encoded)
        except (ValueError, TypeError):  # binascii.Error is a ValueError; non-ASCII text a ValueError too
            raise ValueError("not base64 text") from None
        if len(raw) < _COMPRESSED_HEADER.size:
            raise ValueError("truncated (no header)")
        cookie, length = _COMPRESSED_HEADER.unpack_from(raw)
        if cookie & ~0xF0 != _V2_COMPRESSED_COOKIE & ~0xF0:
            raise ValueError(f"not a V2 compressed histogram (cookie {cookie & 0xFFFFFFFF:#x})")
        if not 0 <= length <= len(raw) - _COMPRESSED_HEADER.size:
            raise ValueError("truncated (compressed length beyond the data)")
        inflater = zlib.decompressobj()
        try:
            data = inflater.decompress(raw[_COMPRESSED_HEADER.size : _COMPRESSED_HEADER.size + length], _MAX_INFLATED)
        except zlib.error:
            raise ValueError("corrupt deflate stream") from None
        if inflater.unconsumed_tail:
            raise ValueError(f"inflates beyond {_MAX_INFLATED:,} bytes, more than any histogram needs")
        if len(data) < _HEADER.size:
            raise ValueError("truncated (no payload header)")
        cookie, payload_len, offset, digits, lowest, highest, _ = _HEADER.unpack_from(data)
        if cookie & ~0xF0 != _V2_ENCODING_COOKIE & ~0xF0:
            raise ValueError(f"not a V2 histogram payload (cookie {cookie & 0xFFFFFFFF:#x})")
        if (digits, lowest, offset) != (SIGNIFICANT_DIGITS, LOWEST, 0) or not 0 < highest <= HIGHEST:
            raise ValueError(
                f"histogram parameters ({lowest}..{highest}, {digits} digits) differ from cachemark's"
            )
        if not 0 <= payload_len <= len(data) - _HEADER.size:
            raise ValueError("truncated (payload shorter than its header says)")
        counts = _read_counts(data[_HEADER.size : _HEADER.size + payload_len])
        if float(counts.sum(dtype=np.float64)) > _MAX_TOTAL:
            raise ValueError("counts too large (their total would overflow)")
        return cls(counts)


def merge(encoded: Iterable[str]) -> Histogram:
    total = Histogram()
    for item in encoded:
        total.add(Histogram.decode(item))
    return total


def _zigzag_leb128(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while True:
        if len(out) == 8:  # HdrHistogram's 9th byte carries 8 full bits
            out.append(value & 0xFF)
            return bytes(out)
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_counts(payload: bytes) -> np.ndarray:
    """The counts array from a V2 payload: ZigZag LEB128 values, runs of empty slots negative.

    Vectorised: the Python loop (:func:`_read_zigzag_leb128`) costs ~1 µs per value, and
    a report decodes every histogram of a results file. Values of 8+ continuation bytes
    (counts ≥ 2**56, which take HdrHistogram's 9-byte form) and malformed payloads go
    through the loop, which checks every step.
    """
    data = np.frombuffer(payload, dtype=np.uint8)
    if not len(data):
        return np.zeros(COUNTS_LEN, dtype=np.int64)
    ends = np.flatnonzero(data < 0x80)
    if not len(ends) or ends[-1] != len(data) - 1:
        return _counts_slowly(payload)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    longest = int(lengths.max())
    if longest > 8:
        return _counts_slowly(payload)
    raw = np.zeros(len(ends), dtype=np.uint64)
    for k in range(longest):
        present = lengths > k
        raw[present] |= (data[starts[present] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return _place(values)


def _place(values: np.ndarray) -> np.ndarray:
    """Counts at their slots: a negative value skips that many empty slots."""
    if len(values) and int(values.min()) < -COUNTS_LEN:
        raise ValueError("a run of empty slots goes past the histogram's range")
    skip = values < 0
    advance = np.where(skip, -values, 1)
    position = np.cumsum(advance) - advance
    slots = position[~skip]
    if len(slots) and int(slots[-1]) >= COUNTS_LEN:
        raise ValueError("counts go past the histogram's range")
    counts = np.zeros(COUNTS_LEN, dtype=np.int64)
    counts[slots] = values[~skip]
    return counts


def _counts_slowly(payload: bytes) -> np.ndarray:
    return _place(np.fromiter(_read_zigzag_leb128(payload), dtype=np.int64))


def _read_zigzag_leb128(data: bytes) -> Iterable[int]:
    i, n = 0, len(data)
    while i < n:
        value = shift = 0
        for _ in range(8):
            if i >= n:
                raise ValueError("truncated (a count is cut off)")
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        else:
            if i >= n:
                raise ValueError("truncated (a count is cut off)")
            value |= data[i] << 56
            i += 1
        value &= 0xFFFFFFFFFFFFFFFF
        yield (value >> 1) ^ -(value & 1)
