"""Server-side measurement of exactly the timed part of each phase.

The runner tells a :class:`PhaseMonitor` when a phase is coming (the sampler connects),
when it starts (baseline sample) and when it ends (final sample and summary); the
monitor then puts the server's figures on the phase and into its per-second series.
"""

from __future__ import annotations

from typing import Any


class PhaseMonitor:
    """Samples the server (INFO / stats / /proc) during exactly the timed part of each phase."""

    def __init__(self, url: str, pid: int | None, enabled: bool = True) -> None:
        self.url, self.pid, self.enabled = url, pid, enabled
        self.samplers: dict[int, Any] = {}
        self.results: dict[int, dict[str, Any]] = {}

    def phase_coming(self, index: int) -> None:
        """Connect the sampler before the phase starts: its baseline must not lag the first op."""
        if self.enabled:
            from ..measure.server_stats import ServerSampler

            self.samplers[index] = ServerSampler(self.url, self.pid).connect()

    def phase_started(self, index: int) -> None:
        if index not in self.samplers:
            self.phase_coming(index)
        if index in self.samplers:
            self.samplers[index].start()

    def phase_ended(self, index: int, total_ops: int) -> None:
        sampler = self.samplers.pop(index, None)
        if sampler is not None:
            self.results[index] = sampler.stop(total_ops=total_ops)

    def stop_all(self) -> None:
        for index in list(self.samplers):
            self.phase_ended(index, 0)

    def attach(self, index: int, phase: dict[str, Any]) -> None:
        """Put the server figures on the phase and its per-second series (aligned at phase start)."""
        server = self.results.get(index)
        if server is None or server.get("source") == "none":
            phase["server"] = None
            return
        from ..measure.server_stats import timeseries

        phase["server"] = server
        series = phase.setdefault("timeseries", [])
        by_second = {entry["t"]: entry for entry in series}
        for row in timeseries(server):
            second = max(0, round(row["t"]) - 1)  # the sample at t=1.0 covers second 0
            if second not in by_second:  # e.g. the engine keeps no client-side series
                by_second[second] = {"t": second}
                series.append(by_second[second])
            by_second[second].update({k: v for k, v in row.items() if k != "t" and v is not None})
        series.sort(key=lambda entry: entry["t"])
