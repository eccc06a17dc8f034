"""The one record every trace reader yields, the key hash, and the count of lines we could not use.

Owns :data:`RECORD_DTYPE` (a numpy structured dtype: readers hand out *batches* of records as
arrays of it, because a Python object per request costs more than parsing the line did),
:class:`Record` (one request as a dataclass, for code that wants them one at a time),
:func:`key_hash`/:func:`hash_spans` (the stable 64-bit hash of a raw key used by every reader and
the writer, vectorised), and
:class:`Problems` (lines skipped, per reason, with the first few line numbers; in strict mode
the first malformed line is a one-line :class:`~cachemark.errors.UserError`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import UserError
from ...textfile import one_line

#: cachemark's op names, in the order of ``backends.base.OPS`` (the workload layer may not import
#: backends; tests/test_traces.py checks the two agree). A record's ``op`` is an index into it.
OPS = ("get", "set", "delete", "exists", "get_many", "set_many", "incr", "clean", "fetch")
OP_CODE = {name: code for code, name in enumerate(OPS)}
GET, SET, DELETE, EXISTS, INCR = (OP_CODE[n] for n in ("get", "set", "delete", "exists", "incr"))

#: One request. ``t_us``: microseconds (since the epoch when the trace has wall-clock times, else
#: since its own zero); ``ttl_s`` 0 means no TTL; sizes in bytes, 0 when the trace does not say.
RECORD_DTYPE = np.dtype([
    ("t_us", "<i8"), ("op", "u1"), ("key_hash", "<u8"), ("key_size", "<u4"),
    ("value_size", "<u4"), ("ttl_s", "<u4"), ("client", "<u4"),
])

SHOWN_LINES = 5  # line numbers kept per reason


_K1, _K2, _SEED = np.uint64(0x87C37B91114253D5), np.uint64(0x4CF5AD432745937F), np.uint64(0x2545F4914F6CDD1D)


def mix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser over a ``uint64`` array (a copy): every input bit reaches every output bit."""
    z = values.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def hash_spans(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The key hash of each byte span ``buf[start:start+length]`` (``buf``: uint8, with 8 spare bytes
    after the last span), vectorised: keys are read 8 bytes at a time through an overlapping
    ``uint64`` view, so the cost is one numpy pass per 8-byte word of the longest key — over only the
    keys that long, so one huge key costs its own length, not the batch's.

    The hash: h = seed ^ length·K1; per little-endian word w (the last one zero-padded):
    h = rotl(h ^ w·K1, 31)·K2; then SplitMix64's finaliser. Not cryptographic — keys that can be
    guessed can be confirmed whatever the hash — but well mixed for counting and sampling.
    """
    n = len(starts)
    if not n:
        return np.zeros(0, np.uint64)
    words = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - 7, 8), strides=(1, 1)).view("<u8")[:, 0]
    lengths = lengths.astype(np.int64)
    h = (lengths.astype(np.uint64) * _K1) ^ _SEED
    nwords = (lengths + 7) >> 3
    order = np.argsort(nwords, kind="stable")
    sorted_words = nwords[order]
    starts = starts.astype(np.int64)
    for j in range(int(sorted_words[-1])):
        rows = order[np.searchsorted(sorted_words, j, side="right"):]  # the keys longer than j words
        w = words[starts[rows] + 8 * j]
        left = lengths[rows] - 8 * j
        short = left < 8
        if short.any():  # the last word of a key: keep only its own bytes
            w = np.where(short, w & ((np.uint64(1) << (np.minimum(left, 8) * 8).astype(np.uint64)) - np.uint64(1)), w)
        x = h[rows] ^ (w * _K1)
        h[rows] = ((x << np.uint64(31)) | (x >> np.uint64(33))) * _K2
    return mix64(h)


def key_hashes(keys: list[bytes]) -> np.ndarray:
    """The key hash (:func:`hash_spans`) of each key, as a ``uint64`` array."""
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    starts = np.zeros(len(keys), dtype=np.int64)
    if len(keys) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    buf = np.frombuffer(b"".join(keys) + bytes(8), dtype=np.uint8)
    return hash_spans(buf, starts, lengths)


def key_hash(key: bytes) -> int:
    """The stable 64-bit hash of one raw key: the same in every process, run and reader."""
    return int(key_hashes([key])[0])


@dataclass(frozen=True)
class Record:
    """One request of a trace, normalised. ``key`` is the raw key when the reader kept it."""

    t_us: int
    op: str
    key_hash: int
    key_size: int
    value_size: int
    ttl_s: int = 0
    client: int = 0
    key: bytes | None = None


@dataclass
class Batch:
    """Consecutive records: ``records`` (an array of :data:`RECORD_DTYPE`), ``keys`` when kept."""

    records: np.ndarray
    keys: list[bytes] | None = None

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):  # -> Iterator[Record]
        keys = self.keys
        for i, row in enumerate(self.records.tolist()):
            t_us, op, h, ks, vs, ttl, client = row
            yield Record(t_us, OPS[op], h, ks, vs, ttl, client, keys[i] if keys is not None else None)


def empty_batch(n: int = 0) -> np.ndarray:
    return np.zeros(n, dtype=RECORD_DTYPE)


@dataclass
class Problems:
    """Lines a reader skipped: ``malformed`` (a line that breaks the format; fatal when strict)
    and ``skipped`` (well-formed but not a cache request we replay, e.g. Redis ``PING``).
    Each maps a reason to ``[count, first line numbers]``."""

    path: str
    strict: bool = False
    malformed: dict[str, list] = field(default_factory=dict)
    skipped: dict[str, list] = field(default_factory=dict)

    def bad(self, line_no: int, reason: str) -> None:
        if self.strict:
            raise UserError(f"{one_line(self.path)}:{line_no}: {one_line(reason, 120)}")
        _count(self.malformed, line_no, reason)

    def skip(self, line_no: int, reason: str) -> None:
        _count(self.skipped, line_no, reason)

    @property
    def malformed_total(self) -> int:
        return sum(entry[0] for entry in self.malformed.values())

    @property
    def skipped_total(self) -> int:
        return sum(entry[0] for entry in self.skipped.values())

    def lines(self) -> list[str]:
        """One line per reason: ``malformed: 3 × bad integer (lines 4, 9, 12)``."""
        out = []
        for kind, table in (("malformed", self.malformed), ("skipped", self.skipped)):
            for reason, (count, where) in sorted(table.items(), key=lambda kv: -kv[1][0]):
                shown = ", ".join(str(n) for n in where) + (", …" if count > len(where) else "")
                out.append(f"{kind}: {count:,} × {reason} (line{'s' if count > 1 else ''} {shown})")
        return out


def _count(table: dict[str, list], line_no: int, reason: str) -> None:
    entry = table.get(reason)
    if entry is None:
        if len(table) >= 64:  # a file of garbage must not grow the table without bound
            reason = "other"
            entry = table.setdefault(reason, [0, []])
        else:
            entry = table[reason] = [0, []]
    entry[0] += 1
    if len(entry[1]) < SHOWN_LINES:
        entry[1].append(line_no)
