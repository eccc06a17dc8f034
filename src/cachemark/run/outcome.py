"""What one run produced: the outcome every load path fills and the results file keeps.

A run's record is the same whichever way its load ran (Python workers, the native engine, a
driver in another stack, or agents on a Dask cluster), so reports never need to know which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..results.phase_record import PhaseRecord
from ..target import scrub

INTERRUPTED = "stopped by Ctrl-C; results cover what ran"


@dataclass
class RunOutcome:
    """What one target's run produced (a RunResult in the results file)."""

    label: str
    target: str  # redacted
    status: str = "ok"  # ok | skipped | failed | interrupted
    reason: str = ""
    backend: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] | None = None
    network: dict[str, Any] | None = None
    phases: list[PhaseRecord] = field(default_factory=list)
    dropped_writes: str | None = None  # the write-then-read probe's finding (run/write_probe.py)

    def to_json(self) -> dict[str, Any]:
        # scrub: client exceptions in reason/error_samples may echo a DSN or a password
        return scrub({
            "label": self.label, "target": self.target, "status": self.status, "reason": self.reason,
            "backend": self.backend, "server": self.server, "network": self.network,
            "phases": [p.to_json() for p in self.phases], "dropped_writes": self.dropped_writes,
        })


def fail_on_errors(outcome: RunOutcome) -> None:
    """A phase the on-error policy stopped fails the run (exit 1), with its reason."""
    stopped = [p.stopped_on_errors for p in outcome.phases if p.stopped_on_errors]
    if stopped:
        outcome.status, outcome.reason = "failed", stopped[0]
