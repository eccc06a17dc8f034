"""A stable k-way merge of sorted column files, in blocks.

Owns :func:`merge_sorted`: runs, each sorted by one column, merged into one output in the order a
stable sort of their concatenation would give — by that column, then by run, then by position in the
run — so the replay's external sort (trace chunks sorted one by one, then merged) and its merges by due
time (a share's key-space copies, the engine's stream of all shares) equal what one ``np.argsort(...,
kind="stable")`` over everything in memory gave. Memory: about ``budget`` rows whatever the runs'
lengths; more than :data:`FAN_IN` runs are merged in rounds through ``scratch``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from .columns import Block, ColumnReader, ColumnWriter

FAN_IN = 64  # runs merged at once; more go through intermediate rounds
BUDGET = 1 << 19  # rows buffered over all runs
MIN_BLOCK = 4096  # rows read from a run at a time, however many runs


def merge_sorted(runs: list[ColumnReader], by: str, out: ColumnWriter, *, scratch: str | Path | None = None,
                 budget: int | None = None, fan_in: int | None = None) -> None:
    """Append the stable merge of ``runs`` (each sorted by column ``by``) to ``out``."""
    budget = budget or BUDGET
    fan_in = max(2, fan_in or FAN_IN)
    rounds = 0
    while len(runs) > fan_in:
        if scratch is None:
            raise ValueError(f"{len(runs)} runs: merging more than {fan_in} needs a scratch directory")
        rounds += 1
        merged = []
        for g in range(0, len(runs), fan_in):  # consecutive groups: the run order, and so the ties', survives
            group = ColumnWriter(Path(scratch) / f"round-{rounds}" / f"run-{g // fan_in}", runs[0].layout)
            _merge(runs[g:g + fan_in], by, group, budget)
            merged.append(group.publish())
        if rounds > 1:
            shutil.rmtree(Path(scratch) / f"round-{rounds - 1}", ignore_errors=True)
        runs = merged
    _merge(runs, by, out, budget)
    if rounds:
        shutil.rmtree(Path(scratch) / f"round-{rounds}", ignore_errors=True)


class _Cursor:
    """One run's rows read but not yet merged."""

    def __init__(self, run: ColumnReader, block: int) -> None:
        self.run, self.block, self.next = run, block, 0
        self.rows: Block | None = None

    @property
    def buffered(self) -> int:
        return len(next(iter(self.rows.values()))) if self.rows else 0

    @property
    def exhausted(self) -> bool:
        """Nothing left on disk beyond what is buffered."""
        return self.next >= len(self.run)

    def fill(self) -> None:
        if self.buffered > self.block // 2 or self.exhausted:
            return
        more = self.run.read(self.next, self.block)
        self.next += len(next(iter(more.values())))
        self.rows = more if not self.buffered else {k: np.concatenate([self.rows[k], more[k]]) for k in more}

    def take(self, count: int) -> Block:
        taken = {k: v[:count] for k, v in self.rows.items()}
        self.rows = {k: v[count:] for k, v in self.rows.items()}
        return taken


def _merge(runs: list[ColumnReader], by: str, out: ColumnWriter, budget: int) -> None:
    block = max(MIN_BLOCK, budget // max(1, len(runs)))
    cursors = [_Cursor(run, block) for run in runs]
    while True:
        for cursor in cursors:
            cursor.fill()
        live = [(i, c) for i, c in enumerate(cursors) if c.buffered]
        if not live:
            return
        # Safe to emit: every row ordered before (key, run) = the smallest among the runs with more on
        # disk of (last key buffered, run index) — no row still on disk can come before it.
        pending = [(int(c.rows[by][-1]), i) for i, c in live if not c.exhausted]
        bound = min(pending) if pending else None
        parts = []
        for i, cursor in live:
            if bound is None:
                count = cursor.buffered
            else:
                count = int(np.searchsorted(cursor.rows[by], bound[0], "right" if i <= bound[1] else "left"))
            if count:
                parts.append(cursor.take(count))
        out.append(stable_merge(parts, by))


def stable_merge(parts: list[Block], by: str) -> Block:
    """Sorted parts (in run order) as one block sorted by ``by``, ties in part order (parts in memory)."""
    if len(parts) == 1:
        return parts[0]
    joined = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(joined[by], kind="stable")
    return {k: v[order] for k, v in joined.items()}
