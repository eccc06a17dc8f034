"""Spreading a coarse clock's ties: requests that share a recorded time fall due evenly over the time
to the next one, not all at once (a burst the application never sent).

Owns :func:`spread_ties` (over an array in memory) and :class:`SpreadTimes` (the same result over a
time-sorted column on disk, a range of rows at a time: the groups that cross the range's edges are
found by binary search on disk, and the last group's step — the median step of the
whole trace — by a radix selection over the column in a few sequential passes, so memory does not
grow with the trace).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .columns import ColumnReader

NO_STEP = 1_000_000  # the last group's step when the trace has one distinct time
DIGIT_BITS = 16  # a radix selection pass counts 2**16 buckets
PASS_ROWS = 1 << 18  # rows a pass over the column reads at a time


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
    last = int(np.median(steps)) if len(steps) else NO_STEP
    step = np.r_[steps, last]
    counts = np.diff(np.r_[starts, len(t_us)])
    group = np.repeat(np.arange(len(starts)), counts)
    rank = np.arange(len(t_us)) - starts[group]
    return t_us + (rank * step[group]) // counts[group]


class SpreadTimes:
    """:func:`spread_ties` of a sorted ``int64`` column on disk, for rows ``[a, b)`` at a time."""

    def __init__(self, stream: ColumnReader, column: str = "t_us") -> None:
        self.stream, self.column = stream, column
        self.n = len(stream)
        self._last_step: int | None = None

    def spread(self, a: int, b: int, t: np.ndarray | None = None) -> np.ndarray:
        """The spread times of rows ``[a, b)`` (``t``: those rows' times, when already read)."""
        if t is None:
            t = self.stream.read(a, b - a, (self.column,))[self.column]
        if not len(t):
            return t
        starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
        first, last = t[0], t[-1]
        group_start = a + starts  # where each group begins in the whole column
        if a > 0 and self.stream.value(self.column, a - 1) == first:
            group_start[0] = self.stream.searchsorted(self.column, first, "left")
        end = b if b == self.n or self.stream.value(self.column, b) != last else \
            self.stream.searchsorted(self.column, last, "right")
        counts = np.diff(np.r_[group_start, end])
        times = t[starts]
        if end < self.n:
            next_times = np.r_[times[1:], self.stream.value(self.column, end)]
            step = next_times - times
        else:  # the trace's last group: the median step (needed only if the group is a tie)
            step = np.r_[np.diff(times), self._median_step() if counts[-1] > 1 else 0]
        group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(t)]))
        rank = np.arange(a, b) - group_start[group]
        return t + (rank * step[group]) // counts[group]

    def _median_step(self) -> int:
        """``int(np.median(steps))`` over the whole column's steps between distinct times."""
        if self._last_step is None:
            total, largest = 0, 0
            for steps in self._steps():
                total += len(steps)
                largest = max(largest, int(steps.max(initial=0)))
            if not total:
                self._last_step = NO_STEP
            else:
                middle = [total // 2] if total % 2 else [total // 2 - 1, total // 2]
                values = [self._select(k, largest) for k in middle]
                self._last_step = int(np.mean(np.array(values, dtype=np.int64)))  # as np.median computes it
        return self._last_step

    def _steps(self) -> Iterator[np.ndarray]:
        """The steps between consecutive distinct times: the non-zero differences of the sorted times."""
        previous = None
        for block in self.stream.blocks(PASS_ROWS, (self.column,)):
            t = block[self.column]
            d = np.diff(t) if previous is None else np.diff(np.r_[previous, t])
            previous = t[-1:]
            yield d[d != 0]

    def _select(self, k: int, largest: int) -> int:
        """The ``k``-th smallest step (0-based): its bits fixed from the top, DIGIT_BITS per pass."""
        prefix, low = 0, largest.bit_length()
        while low > 0:
            width = min(DIGIT_BITS, low)
            low -= width
            counts = np.zeros(1 << width, dtype=np.int64)
            for steps in self._steps():
                mine = steps[(steps >> (low + width)) == prefix]
                counts += np.bincount((mine >> low) & ((1 << width) - 1), minlength=1 << width)
            below = np.cumsum(counts)
            digit = int(np.searchsorted(below, k, "right"))
            k -= int(below[digit - 1]) if digit else 0
            prefix = (prefix << width) | digit
        return prefix
