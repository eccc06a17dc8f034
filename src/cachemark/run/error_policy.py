"""The on-error policy: a run whose server is gone ends, marked failed, instead of
recording errors until its deadline.

``on_error = "stop"`` (the default) ends a phase once ``error_grace`` seconds have passed
in which ops failed and none succeeded; the measured part is kept and the run is failed
with a one-line reason. ``"continue"`` runs on; the error rate per second is in the series.

A target that fails over (``redis+sentinel://``) is given at least its scheme's
``failover_grace`` (60 s: Sentinel's default down-after of 30 s plus an election) before
the policy stops it, so a failover is measured, not cut short.
"""

from __future__ import annotations

import time

from ..results.phase_record import PhaseRecord
from ..schemes import find_scheme
from ..spec import Workload
from ..target import Target


def error_grace(workload: Workload, target: Target | None = None) -> float | None:
    """Seconds of nothing but errors before a phase stops; None: never (``on_error = "continue"``)."""
    if workload.on_error != "stop":
        return None
    row = find_scheme(target.scheme) if target is not None else None
    if row is not None and row.failover_grace is not None:
        return max(workload.error_grace, row.failover_grace)
    return workload.error_grace


class ErrorWatch:
    """Watches the workers' published counts (ops done, ops failed) for one phase at a time."""

    def __init__(self, workload: Workload, target: Target | None = None) -> None:
        self.grace = error_grace(workload, target)
        self.reset()

    def reset(self) -> None:
        self.ok = self.failed = 0
        self.last_ok = time.monotonic()
        self.failing_since: float | None = None  # monotonic time of the first failure after the last success
        self.failing_since_wall: float | None = None

    def should_stop(self, done: int, failed: int) -> bool:
        """Feed the current totals; True once only failures have come in for ``grace`` seconds."""
        now = time.monotonic()
        ok = done - failed
        if ok > self.ok:
            self.ok, self.last_ok, self.failing_since = ok, now, None
        if failed > self.failed:
            self.failed = failed
            if self.failing_since is None:
                self.failing_since, self.failing_since_wall = now, time.time()
        if self.grace is None or self.failing_since is None:
            return False
        return now - max(self.last_ok, self.failing_since) >= self.grace

    def reason(self, phase: PhaseRecord, since_wall: float) -> str:
        """``connection errors from 12:01:03: only failures for 2 s (last: …)``, from the merged phase."""
        return stopped_reason(phase, self.grace, since_wall)


def stopped_reason(phase: PhaseRecord, grace: float | None, since_wall: float | None = None) -> str:
    """Why the on-error policy stopped ``phase``: the kind of error most of its failed ops ended in,
    since when (if known), for how long only failures came in, and the last error."""
    kinds = phase.error_kinds()
    kind = max(kinds, key=kinds.__getitem__) if kinds else "op"
    since = "" if since_wall is None else f" from {time.strftime('%H:%M:%S', time.localtime(since_wall))}"
    seconds = f"{grace:g}" if grace is not None else "?"
    last = phase.error_samples[-1] if phase.error_samples else ""
    return (f"{kind} errors{since}: 100 % of ops failed for {seconds} s, so the run stopped "
            "(--on-error continue runs on)" + (f"; last: {last}" if last else ""))
