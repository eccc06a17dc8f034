"""A trace as a workload: ``cachemark run -t … --trace FILE`` replays the recorded requests.

Owns :func:`prepare` (the parent reads the trace once, gives every distinct key a dense id,
splits the requests over the workers by key hash — so each key's requests keep their order,
on one worker — and writes each worker's share as column files beside the run), :class:`Share`
(what a worker, a driver or the engine reads back: per request the op, the key id, the value size
and when it is due) and :func:`engine_stream` (the shares merged back into one stream for the
native engine).

Timing: at ``speed`` 1 each request is due at its recorded offset from the trace's first
request (``speed`` 2: twice as fast), in open loop with coordinated-omission correction, as
``--rate`` runs are; ``speed`` 0 replays closed loop, as fast as the target answers.
``amplify`` N replays N copies of the trace at the same times over disjoint key spaces (N× the
load, N× the keys): time compression and key-space amplification for more load than was
recorded. Values are cachemark's self-verifying values, of the recorded size (≥ 1 byte). A
coarse clock's ties are spread evenly to the next recorded time (:func:`~.ties.spread_ties`).

Memory does not grow with the trace's length: the trace is read a batch at a time into a time-sorted
spool on disk (:mod:`.replay_spool`), which is split a block at a time into the shares; shares and the
engine's stream are read and merged a block at a time (:mod:`.columns`, :mod:`.merge`). What grows is
the table of distinct keys: 8 bytes a key (up to 24 while it is built). The result is the same, byte
for byte, as sorting, splitting and merging the whole trace in memory (tests/test_replay.py).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import scratch
from ..errors import UserError
from ..textfile import one_line
from .columns import Block, ColumnReader, ColumnWriter
from .merge import merge_sorted, stable_merge
from .replay_spool import MIN_SIZE, REPLAYED, Spool, spool_trace
from .ties import SpreadTimes, spread_ties
from .traces.record import OPS

__all__ = ["MIN_SIZE", "REPLAYED", "Prepared", "Share", "engine_stream", "load_share", "prepare", "spread_ties"]

BLOCK = 1 << 18  # requests split at a time
READ_ROWS = 1 << 16  # requests a share reader holds at a time
WHOLE = "shares.json"  # written last: the shares beside it are whole
SHARE_LAYOUT = (("entries", "entries.u8", "u1"), ("keys", "keys.u32", "<u4"), ("sizes", "sizes.u32", "<u4"),
                ("at_ns", "at_ns.u64", "<u8"))
#: The native engine's files (engine/load/src/replay.rs reads them; at.u64 last: its presence says whole).
ENGINE_LAYOUT = (("entries", "ops.u8", "u1"), ("keys", "keys.u32", "<u4"), ("sizes", "sizes.u32", "<u4"),
                 ("at_ns", "at.u64", "<u8"))


class Share:
    """One worker's part of a prepared replay (columns of equal length, in due order), read from disk a
    block at a time: a worker's memory stays flat however long its share."""

    def __init__(self, directory: str | Path) -> None:
        self.columns = ColumnReader(directory, SHARE_LAYOUT)

    def __len__(self) -> int:
        return len(self.columns)

    # Whole columns, memory-mapped: for a look at the whole share (tests); a driver's feed reads it in blocks.
    entries = property(lambda self: self.columns.mapped("entries"))  # u1: index into the replay's ops
    keys = property(lambda self: self.columns.mapped("keys"))  # u4: dense key id
    sizes = property(lambda self: self.columns.mapped("sizes"))  # u4: value size
    at_ns = property(lambda self: self.columns.mapped("at_ns"))  # u64: due after the phase's start (÷ speed)

    def first_due(self) -> int:
        return int(self.columns.read(0, 1, ("at_ns",))["at_ns"][0]) if len(self) else 0

    def gaps(self) -> Iterator[int]:
        """Nanoseconds from each request's due time to the next one's (then 0s: nothing is left)."""
        previous = None
        for block in self.columns.blocks(READ_ROWS, ("at_ns",)):
            at = block["at_ns"].astype(np.int64)
            if previous is not None:
                yield int(at[0] - previous)
            yield from np.diff(at).tolist()
            previous = at[-1]
        while True:
            yield 0

    def due_between(self, from_ns: int, to_ns: int) -> int:
        """Requests due in [from_ns, to_ns) after the start: at a deadline, those never sent (missed)."""
        due = self.columns.searchsorted
        return max(0, due("at_ns", to_ns, "left") - due("at_ns", from_ns, "left"))

    def batches(self, size: int = 4096) -> Iterator[tuple[list[int], list[int], list[int]]]:
        """As :meth:`~.ops.OpStream.batches`: (entry indexes, key ids, value sizes), in recorded order."""
        for block in self.columns.blocks(size * max(1, READ_ROWS // size), ("entries", "keys", "sizes")):
            entries, keys, sizes = block["entries"], block["keys"], block["sizes"]
            for i in range(0, len(entries), size):
                yield entries[i:i + size].tolist(), keys[i:i + size].tolist(), sizes[i:i + size].tolist()


def load_share(prepared: str, worker: int) -> Share:
    if not (Path(prepared) / WHOLE).exists():
        raise FileNotFoundError(f"{prepared}: not a whole prepared replay (its prepare did not finish)")
    return Share(Path(prepared) / f"worker-{worker}")


@dataclass(frozen=True)
class Prepared:
    """What the trace held, for the workload and the report."""

    directory: str
    ops: dict[str, int]  # op → requests, in entry order
    keys: int
    records: int
    span_s: float  # recorded time from the first request to the last (before the speed)
    min_size: int
    max_size: int
    skipped: dict[str, int]  # op → requests of ops a replay does not run


def prepare(path: str, workers: int, *, format: str | None = None, speed: float = 1.0, amplify: int = 1,
            limit: int | None = None, directory: str | None = None) -> Prepared:
    """Read the trace once and write each worker's share (``worker-N/``) to ``directory``."""
    if speed < 0 or amplify < 1 or workers < 1:
        raise UserError("--speed must be ≥ 0 (0: as fast as possible) and --amplify ≥ 1")
    target = Path(directory or scratch.make("cachemark-replay-"))
    target.mkdir(parents=True, exist_ok=True)
    (target / WHOLE).unlink(missing_ok=True)  # what is there now is not whole until WHOLE is back
    shutil.rmtree(target / "engine", ignore_errors=True)
    spool_dir = target / ".spool"
    shutil.rmtree(spool_dir, ignore_errors=True)
    try:
        spool = spool_trace(path, spool_dir, format=format, limit=limit)
        n_keys = len(spool.keys)
        if n_keys * amplify > 1_000_000_000:
            raise UserError(f"{one_line(path)}: {n_keys:,} keys × amplify {amplify} is over the 10⁹ keys a run takes")
        span_us = _ShareSplitter(spool, target, workers, speed, amplify).run()
    except BaseException:
        if directory is None:
            shutil.rmtree(target, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(spool_dir, ignore_errors=True)
    records = len(spool.stream)
    _write_atomic(target / WHOLE, json.dumps({"workers": workers, "records": records * amplify}))
    present = np.flatnonzero(spool.op_counts)
    names = [OPS[c] for c in present.tolist()]
    counts = spool.op_counts[present] * amplify
    return Prepared(str(target), dict(zip(names, counts.tolist(), strict=True)), n_keys * amplify,
                    records * amplify, span_us / 1e6, spool.min_size, spool.max_size, spool.skipped)


class _ShareSplitter:
    """The spool, a block at a time, into the workers' shares: per request its entry (the op's index
    among the ops present), dense key id (its hash's index among the distinct hashes), size and due
    time; each key-space copy's requests to the worker its key id spreads to. Within a share the copies
    are merged by due time, ties in copy order — as a stable sort of all copies by due time puts them."""

    def __init__(self, spool: Spool, target: Path, workers: int, speed: float, amplify: int) -> None:
        self.stream, self.key_hashes = spool.stream, spool.keys
        self.workers, self.speed, self.amplify = workers, speed, amplify
        self.times = SpreadTimes(spool.stream)
        self.t0 = int(self.stream.read(0, 1, ("t_us",))["t_us"][0])
        present = np.flatnonzero(spool.op_counts)
        self.entry_of = np.zeros(256, dtype=np.uint8)
        self.entry_of[present] = np.arange(len(present))
        self.shares = [ColumnWriter(target / f"worker-{w}", SHARE_LAYOUT) for w in range(workers)]

    def run(self) -> int:
        """Write every share; the recorded span (µs, ties spread) from the first request to the last."""
        n = len(self.stream)
        a = 0
        while a < n:
            b = min(a + BLOCK, n)
            rows = self._rows(a, b)
            if self.amplify == 1 or b == n:
                self._emit(rows, range(self.amplify))
                a = b
                continue
            at = rows["at_ns"]
            cut = int(np.searchsorted(at, at[-1], "left"))  # the last due time's requests may go on past b
            if cut:
                self._emit({k: v[:cut] for k, v in rows.items()}, range(self.amplify))
                a += cut
                continue
            # One due time fills the block (--speed 0: the whole trace) and may run on: its requests go
            # copy by copy, each copy's in recorded order.
            end = self._due_end(b, int(at[-1]))
            for copy in range(self.amplify):
                for x in range(a, end, BLOCK):
                    self._emit(self._rows(x, min(x + BLOCK, end)), (copy,))
            a = end
        for share in self.shares:
            share.publish()
        return int(self.times.spread(n - 1, n)[0]) - self.t0

    def _due(self, a: int, b: int, t: np.ndarray | None = None) -> np.ndarray:
        if self.speed == 0:
            return np.zeros(min(b, len(self.stream)) - a, dtype=np.uint64)
        return ((self.times.spread(a, b, t) - self.t0) * (1000.0 / self.speed)).astype(np.uint64)

    def _rows(self, a: int, b: int) -> Block:
        block = self.stream.read(a, b - a)
        return {"entries": self.entry_of[block["op"]],
                "keys": np.searchsorted(self.key_hashes, block["key_hash"]).astype(np.int64),
                "sizes": block["size"], "at_ns": self._due(a, b, block["t_us"])}

    def _due_end(self, start: int, due: int) -> int:
        """The first row from ``start`` on due after ``due``."""
        n = len(self.stream)
        for x in range(start, n, BLOCK):
            at = self._due(x, min(x + BLOCK, n))
            past = int(np.searchsorted(at, due, "right"))
            if past < len(at):
                return x + past
        return n

    def _emit(self, rows: Block, copies: range | tuple[int, ...]) -> None:
        parts: list[list[Block]] = [[] for _ in range(self.workers)]
        n_keys = len(self.key_hashes)
        for copy in copies:
            ids = rows["keys"] + copy * n_keys
            owner = _spread(ids) % self.workers if self.workers > 1 else None
            for w, part in enumerate(parts):
                mine = owner == w if owner is not None else slice(None)
                part.append({"entries": rows["entries"][mine], "keys": ids[mine], "sizes": rows["sizes"][mine],
                             "at_ns": rows["at_ns"][mine]})
        for share, part in zip(self.shares, parts, strict=True):
            share.append(stable_merge(part, "at_ns"))


def _spread(ids: np.ndarray) -> np.ndarray:
    """Key id → a well-mixed number, so the workers' shares are even even for sequential ids."""
    x = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return x >> np.uint64(33)


def _write_atomic(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)


def engine_stream(prepared: str, workers: int) -> str:
    """The whole replay as the native engine reads it (engine/load/src/replay.rs): the workers'
    shares merged back into recorded order (by due time, ties in worker order), as four
    little-endian arrays in ``prepared/engine``; written once per prepared replay, a block at a time."""
    target = Path(prepared) / "engine"
    if (target / "at.u64").exists():
        return str(target)
    shares = [load_share(prepared, w).columns for w in range(workers)]
    out = ColumnWriter(target, ENGINE_LAYOUT)
    merge_sorted(shares, "at_ns", out, scratch=target / ".rounds")  # rounds only past merge.FAN_IN workers
    shutil.rmtree(target / ".rounds", ignore_errors=True)
    out.publish()  # at.u64 last
    return str(target)
