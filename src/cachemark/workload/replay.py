"""A trace as a workload: ``cachemark run -t … --trace FILE`` replays the recorded requests.

Owns :func:`prepare` (the parent reads the trace once, gives every distinct key a dense id,
splits the requests over the workers by key hash — so each key's requests keep their order,
on one worker — and writes each worker's share as arrays beside the run), :func:`replay_workload`
(the workload the report shows: the trace's own op mix, key count, size range and rate) and
:class:`Share` (what a worker, a driver or the engine reads back: per request the op, the key
id, the value size and when it is due).

Timing: at ``speed`` 1 each request is due at its recorded offset from the trace's first
request (``speed`` 2: twice as fast), in open loop with coordinated-omission correction, as
``--rate`` runs are; ``speed`` 0 replays closed loop, as fast as the target answers.
``amplify`` N replays N copies of the trace at the same times over disjoint key spaces (N× the
load, N× the keys): time compression and key-space amplification for more load than was
recorded. Values are cachemark's self-verifying values, of the recorded size (≥ 1 byte). A
coarse clock's ties are spread evenly to the next recorded time (:func:`spread_ties`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import scratch
from ..errors import UserError
from ..textfile import one_line
from .traces import open_trace
from .traces.record import OPS

#: Ops a replay can run: the trace's others (get_many, set_many, clean, fetch) are not per key.
REPLAYED = ("get", "set", "delete", "exists", "incr")
MIN_SIZE = 1  # a write of a trace that records no value size still writes a value


@dataclass(frozen=True)
class Share:
    """One worker's part of a prepared replay (arrays of equal length, in recorded order)."""

    entries: np.ndarray  # u1: index into the replay's ops
    keys: np.ndarray  # u4: dense key id
    sizes: np.ndarray  # u4: value size
    at_ns: np.ndarray  # u64: due time after the phase's start (already divided by the speed)

    def __len__(self) -> int:
        return len(self.entries)

    def first_due(self) -> int:
        return int(self.at_ns[0]) if len(self.at_ns) else 0

    def gaps(self) -> Iterator[int]:
        """Nanoseconds from each request's due time to the next one's (then 0s: nothing is left)."""
        at = self.at_ns.astype(np.int64)
        yield from np.diff(at).tolist()
        while True:
            yield 0

    def due_between(self, from_ns: int, to_ns: int) -> int:
        """Requests due in [from_ns, to_ns) after the start: at a deadline, those never sent (missed)."""
        return max(0, int(np.searchsorted(self.at_ns, to_ns, "left") - np.searchsorted(self.at_ns, from_ns, "left")))

    def batches(self, size: int = 4096) -> Iterator[tuple[list[int], list[int], list[int]]]:
        """As :meth:`~.ops.OpStream.batches`: (entry indexes, key ids, value sizes), in recorded order."""
        for i in range(0, len(self.entries), size):
            yield (self.entries[i:i + size].tolist(), self.keys[i:i + size].tolist(),
                   self.sizes[i:i + size].tolist())


def load_share(prepared: str, worker: int) -> Share:
    with np.load(Path(prepared) / f"worker-{worker}.npz") as data:
        return Share(data["entries"], data["keys"], data["sizes"], data["at_ns"])


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
    """Read the trace once and write each worker's share (``worker-N.npz``) to ``directory``."""
    if speed < 0 or amplify < 1 or workers < 1:
        raise UserError("--speed must be ≥ 0 (0: as fast as possible) and --amplify ≥ 1")
    reader = open_trace(path, format)
    columns: list[np.ndarray] = []
    taken = 0
    for batch in reader.batches():
        records = batch.records if limit is None else batch.records[:limit - taken]
        columns.append(records[["t_us", "op", "key_hash", "value_size"]].copy())
        taken += len(records)
        if limit is not None and taken >= limit:
            break
    for line in reader.problems.lines():
        print(f"cachemark: {line}")
    if not taken:
        raise UserError(f"{one_line(path)}: the trace holds no request to replay")
    records = np.concatenate(columns)
    ops = records["op"]
    keep = np.isin(ops, [OPS.index(name) for name in REPLAYED])
    skipped = {OPS[code]: int(n) for code, n in zip(*np.unique(ops[~keep], return_counts=True), strict=True)}
    records = records[keep]
    if not len(records):
        raise UserError(f"{one_line(path)}: no request of a replayable op ({', '.join(REPLAYED)}) in the trace")
    order = np.argsort(records["t_us"], kind="stable")  # a trace merged from several clients may interleave
    records = records[order]
    distinct, key_ids = np.unique(records["key_hash"], return_inverse=True)
    present, codes = np.unique(records["op"], return_inverse=True)
    names = [OPS[c] for c in present.tolist()]
    sizes = np.maximum(records["value_size"], MIN_SIZE).astype(np.uint32)
    t = spread_ties(records["t_us"].astype(np.int64))
    span_us = int(t[-1] - t[0])
    at = np.zeros(len(t), dtype=np.uint64) if speed == 0 else ((t - t[0]) * (1000.0 / speed)).astype(np.uint64)
    n_keys = len(distinct)
    if n_keys * amplify > 1_000_000_000:
        raise UserError(f"{one_line(path)}: {n_keys:,} keys × amplify {amplify} is over the 10⁹ keys a run takes")
    target = Path(directory or scratch.make("cachemark-replay-"))
    target.mkdir(parents=True, exist_ok=True)
    for w in range(workers):
        parts = []
        for copy in range(amplify):
            ids = key_ids.astype(np.int64) + copy * n_keys
            mine = (_spread(ids) % workers) == w
            parts.append((codes[mine], ids[mine], sizes[mine], at[mine]))
        entries, ids, share_sizes, due = (np.concatenate([p[i] for p in parts]) for i in range(4))
        order = np.argsort(due, kind="stable")
        _save_atomic(target / f"worker-{w}.npz", entries=entries[order].astype(np.uint8),
                     keys=ids[order].astype(np.uint32), sizes=share_sizes[order], at_ns=due[order])
    counts = np.bincount(codes, minlength=len(names)) * amplify
    return Prepared(str(target), dict(zip(names, counts.tolist(), strict=True)), n_keys * amplify,
                    len(records) * amplify, span_us / 1e6, int(sizes.min()), int(sizes.max()), skipped)


def spread_ties(t_us: np.ndarray) -> np.ndarray:
    """Times of a trace whose clock is coarse (Twitter's: whole seconds): the requests that share a
    time are spread evenly over the time to the next one (the last group over the median step),
    instead of falling due all at once — a burst the application never sent."""
    if len(t_us) < 2:
        return t_us
    starts = np.flatnonzero(np.r_[True, t_us[1:] != t_us[:-1]])
    if len(starts) == len(t_us):
        return t_us  # every time is distinct: nothing to spread
    times = t_us[starts]
    steps = np.diff(times)
    last = int(np.median(steps)) if len(steps) else 1_000_000
    step = np.r_[steps, last]
    counts = np.diff(np.r_[starts, len(t_us)])
    group = np.repeat(np.arange(len(starts)), counts)
    rank = np.arange(len(t_us)) - starts[group]
    return t_us + (rank * step[group]) // counts[group]


def _spread(ids: np.ndarray) -> np.ndarray:
    """Key id → a well-mixed number, so the workers' shares are even even for sequential ids."""
    x = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return x >> np.uint64(33)


def _save_atomic(path: Path, **arrays: np.ndarray) -> None:
    partial = path.with_suffix(".partial.npz")
    np.savez(partial, **arrays)
    os.replace(partial, path)


def engine_stream(prepared: str, workers: int) -> str:
    """The whole replay as the native engine reads it (engine/load/src/replay.rs): the workers'
    shares merged back into recorded order, as four little-endian arrays in ``prepared/engine``;
    written once per prepared replay."""
    target = Path(prepared) / "engine"
    if (target / "at.u64").exists():
        return str(target)
    shares = [load_share(prepared, w) for w in range(workers)]
    at = np.concatenate([s.at_ns for s in shares])
    order = np.argsort(at, kind="stable")
    target.mkdir(exist_ok=True)
    for name, column, dtype in (("ops.u8", "entries", "u1"), ("keys.u32", "keys", "<u4"),
                                ("sizes.u32", "sizes", "<u4"), ("at.u64", "at_ns", "<u8")):
        merged = np.concatenate([getattr(s, column) for s in shares])[order].astype(dtype)
        partial = target / f".{name}.partial"
        partial.write_bytes(merged.tobytes())
        os.replace(partial, target / name)  # at.u64 last: its presence says the set is whole
    return str(target)

