"""A trace's replayable requests, read once into a time-sorted spool on disk.

Owns :func:`spool_trace`: the trace read batch by batch (``--trace-limit`` counts every record read),
its replayable ops kept, their counts and sizes summed up, their distinct key hashes gathered
(:class:`DistinctKeys`), and the requests written in time order — the order a stable sort by time of
the whole trace gives (a trace merged from several clients may interleave): chunks that follow on in
time are appended to one sorted run, a chunk that goes back in time starts another, and the runs are
merged at the end (:func:`~.merge.merge_sorted`). An in-order trace is one run, written once.
Memory: a chunk of :data:`CHUNK` requests and 8–24 bytes per distinct key.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..textfile import one_line
from .columns import ColumnReader, ColumnWriter
from .merge import merge_sorted
from .traces import open_trace
from .traces.record import OPS

#: Ops a replay can run: the trace's others (get_many, set_many, clean, fetch) are not per key.
REPLAYED = ("get", "set", "delete", "exists", "incr")
MIN_SIZE = 1  # a write of a trace that records no value size still writes a value
CHUNK = 1 << 19  # requests sorted in memory at a time
SPOOL_LAYOUT = (("t_us", "t_us.i64", "<i8"), ("op", "op.u8", "u1"), ("key_hash", "key_hash.u64", "<u8"),
                ("size", "size.u32", "<u4"))


class DistinctKeys:
    """The distinct key hashes seen, sorted: 8 bytes a key, up to 3× that while a fold sorts."""

    def __init__(self) -> None:
        self.sorted = np.zeros(0, dtype=np.uint64)
        self._new: list[np.ndarray] = []
        self._new_count = 0

    def add(self, hashes: np.ndarray) -> None:
        fresh = np.unique(hashes)
        if len(self.sorted) and len(fresh):
            at = np.minimum(np.searchsorted(self.sorted, fresh), len(self.sorted) - 1)
            fresh = fresh[self.sorted[at] != fresh]
        if len(fresh):
            self._new.append(fresh)
            self._new_count += len(fresh)
            if self._new_count > max(len(self.sorted), 1 << 16):  # folds cost O(keys) each, amortised
                self._fold()

    def _fold(self) -> None:
        if self._new:
            self.sorted = np.unique(np.concatenate([self.sorted, *self._new]))
            self._new, self._new_count = [], 0

    def finish(self) -> np.ndarray:
        self._fold()
        return self.sorted


@dataclass
class Spool:
    """What :func:`spool_trace` found: the requests in time order, on disk, and their summary."""

    stream: ColumnReader  # t_us, op (the trace's op code), key_hash, size (≥ MIN_SIZE)
    keys: np.ndarray  # the distinct key hashes, sorted: a key's dense id is its index
    op_counts: np.ndarray  # requests per op code (OPS)
    skipped: dict[str, int]  # op → requests of ops a replay does not run
    min_size: int
    max_size: int


def spool_trace(path: str, directory: Path, *, format: str | None = None, limit: int | None = None) -> Spool:
    """Read the trace at ``path`` into ``directory`` (made and owned by the caller)."""
    reader = open_trace(path, format)
    replayed = np.zeros(256, dtype=bool)
    replayed[[OPS.index(name) for name in REPLAYED]] = True
    runs = _Runs(directory)
    keys = DistinctKeys()
    codes = np.zeros(256, dtype=np.int64)
    taken, min_size, max_size = 0, None, 0
    for batch in reader.batches():
        records = batch.records if limit is None else batch.records[:limit - taken]
        taken += len(records)
        codes += np.bincount(records["op"], minlength=256)
        records = records[replayed[records["op"]]]
        if len(records):
            sizes = np.maximum(records["value_size"], MIN_SIZE).astype(np.uint32)
            min_size = min(int(sizes.min()), min_size if min_size is not None else 1 << 32)
            max_size = max(int(sizes.max()), max_size)
            keys.add(records["key_hash"])
            runs.add({"t_us": records["t_us"].copy(), "op": records["op"].copy(),
                      "key_hash": records["key_hash"].copy(), "size": sizes})
        if limit is not None and taken >= limit:
            break
    for line in reader.problems.lines():
        print(f"cachemark: {line}")
    if not taken:
        raise UserError(f"{one_line(path)}: the trace holds no request to replay")
    if min_size is None:
        raise UserError(f"{one_line(path)}: no request of a replayable op ({', '.join(REPLAYED)}) in the trace")
    skipped = {OPS[code]: int(codes[code]) for code in np.flatnonzero((codes > 0) & ~replayed).tolist()}
    kept = np.where(replayed, codes, 0)[:len(OPS)]
    return Spool(runs.finish(), keys.finish(), kept, skipped, min_size, max_size)


class _Runs:
    """Chunks of requests, each sorted by time (stably), appended to the current run while they
    follow on in time; :meth:`finish` merges the runs into one sorted stream."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.done: list[ColumnReader] = []
        self.current: ColumnWriter | None = None
        self.last_t = 0
        self.pending: list[dict[str, np.ndarray]] = []
        self.pending_rows = 0

    def add(self, rows: dict[str, np.ndarray]) -> None:
        self.pending.append(rows)
        self.pending_rows += len(rows["t_us"])
        if self.pending_rows >= CHUNK:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        chunk = {k: np.concatenate([p[k] for p in self.pending]) if len(self.pending) > 1 else self.pending[0][k]
                 for k in self.pending[0]}
        self.pending, self.pending_rows = [], 0
        t = chunk["t_us"]
        if np.any(t[1:] < t[:-1]):
            order = np.argsort(t, kind="stable")
            chunk = {k: v[order] for k, v in chunk.items()}
        if self.current is None or int(chunk["t_us"][0]) < self.last_t:  # goes back in time: a new run
            if self.current is not None:
                self.done.append(self.current.publish())
            self.current = ColumnWriter(self.directory / f"run-{len(self.done)}", SPOOL_LAYOUT)
        self.current.append(chunk)
        self.last_t = int(chunk["t_us"][-1])

    def finish(self) -> ColumnReader:
        self._flush()
        if self.current is not None:
            self.done.append(self.current.publish())
        if len(self.done) == 1:
            return self.done[0]
        out = ColumnWriter(self.directory / "sorted", SPOOL_LAYOUT)
        merge_sorted(self.done, "t_us", out, scratch=self.directory / "rounds")
        for run in self.done:
            shutil.rmtree(run.directory, ignore_errors=True)
        return out.publish()
