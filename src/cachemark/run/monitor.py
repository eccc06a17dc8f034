"""Server-side measurement of exactly the timed part of each phase.

The runner tells a :class:`PhaseMonitor` when a phase is coming (its sampler connects),
when it starts (the start reading) and when it ends (the end reading and the summary);
the monitor then hands back the phase with the server's figures and their per-second series.

The runner calls from two threads (a clock thread at the workers' barrier announces and
starts phases; the main thread ends them), so the monitor owns the ordering:

- ``phase_coming(i)`` waits until every earlier phase has taken its end reading. The clock
  thread calls it before it joins the barrier, so phase ``i`` cannot start — and its ops
  cannot land in phase ``i-1``'s figures — before that reading.
- A phase may end before the clock thread gets to start its sampler (a phase of a few ops);
  the sampler then summarises from the reading taken when it connected, and a late
  ``phase_started`` does nothing.
- ``stop_all`` ends what is still open and releases a waiting ``phase_coming``; after it,
  nothing new starts. Every call is safe in any order, any number of times.

All phases share one stats connection, opened at the first phase: no connection churn
between phases (memcached retires a closed connection only a moment later, which the
next phase would count as a client), one connection attempt, and exact own-traffic
accounting across phases.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..results.phase_record import PhaseRecord
    from ..target import Target


def sampled_url(target: Target) -> str:
    """The URL whose server the monitor samples: a Sentinel target's primary (asked now), else the
    target's own (the Sentinels' URL has no server figures to give)."""
    from ..errors import UserError
    from ..schemes import scheme

    if scheme(target.scheme).failover_grace is None:
        return target.url
    from ..engine import sentinel_primary

    try:
        return sentinel_primary(target).url
    except UserError:
        return target.url  # no primary named: the preflight says so in one line; nothing to sample


class PhaseMonitor:
    """Samples the server (INFO / stats / /proc) during exactly the timed part of each phase."""

    def __init__(self, url: str, pid: int | None, enabled: bool = True) -> None:
        self.url, self.pid, self.enabled = url, pid, enabled
        self.samplers: dict[int, Any] = {}  # phases announced and not yet ended
        self.results: dict[int, dict[str, Any]] = {}
        self._ended: set[int] = set()
        self._closed = False
        self._changed = threading.Condition()
        self._source_lock = threading.Lock()
        self._source: Any = None
        self._source_error: str | None = None
        self._source_tried = False

    def _shared_source(self) -> tuple[Any, str | None]:
        with self._source_lock:
            if not self._source_tried:
                from ..measure.server_stats import open_source

                self._source_tried = True
                self._source, self._source_error = open_source(self.url)
            return self._source, self._source_error

    def phase_coming(self, index: int) -> None:
        """Connect phase ``index``'s sampler once every earlier phase has its end reading."""
        if not self.enabled:
            return
        with self._changed:
            # no timeout: a phase may run for hours; stop_all() releases this wait
            self._changed.wait_for(lambda: self._closed or all(i >= index for i in self.samplers))
            if self._closed or index in self.samplers or index in self._ended:
                return
        source, error = self._shared_source()  # outside the lock: a connect may take seconds
        from ..measure.server_stats import ServerSampler

        sampler = ServerSampler(self.url, self.pid, source=source, source_error=error)
        with self._changed:
            if self._closed or index in self.samplers or index in self._ended:
                return
            self.samplers[index] = sampler
        sampler.connect()  # after a concurrent stop() this does nothing

    def phase_started(self, index: int) -> None:
        """Take phase ``index``'s start reading (announcing it first if nobody did)."""
        if not self.enabled:
            return
        with self._changed:
            sampler = self.samplers.get(index)
            known = index in self._ended or self._closed
        if sampler is None and not known:
            self.phase_coming(index)
            with self._changed:
                sampler = self.samplers.get(index)
        if sampler is not None:
            sampler.start()  # does nothing if the phase has already ended

    def phase_ended(self, index: int, total_ops: int) -> None:
        """Take phase ``index``'s end reading and summarise it; then let the next phase start."""
        with self._changed:
            sampler = self.samplers.get(index)
        if sampler is None:
            return
        result = sampler.stop(total_ops=total_ops)  # a second stop returns the first summary
        with self._changed:
            if self.samplers.get(index) is sampler:
                del self.samplers[index]
                self.results[index] = result
                self._ended.add(index)
            self._changed.notify_all()

    def stop_all(self) -> None:
        """End every open phase (with no op count: they were cut short) and start nothing more."""
        with self._changed:
            self._closed = True
            open_phases = sorted(self.samplers)
            self._changed.notify_all()
        for index in open_phases:
            self.phase_ended(index, 0)
        with self._source_lock:
            source, self._source = self._source, None
            self._source_tried = True
        if source is not None:
            source.close()

    def attach(self, index: int, record: PhaseRecord) -> PhaseRecord:
        """The phase with its server figures and their per-second series (aligned at phase start)."""
        server = self.results.get(index)
        if server is None or server.get("source") == "none":
            return record.with_server(None, [])
        from ..measure.server_stats import timeseries

        # the sample at t=1.0 covers second 0
        series = [{**row, "t": max(0, round(row["t"]) - 1)} for row in timeseries(server)]
        return record.with_server(server, series)
