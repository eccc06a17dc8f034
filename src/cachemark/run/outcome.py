"""What one run produced: the outcome the run sequence records and the results file keeps.

A run's record is the same whichever way its load ran (Python workers, the native engine, a
driver in another stack, or agents on a Dask cluster), so reports never need to know which.
Only the run sequence (run/sequence.py) changes an outcome: a load path returns what its
phases produced (:class:`LoadResult`) and the sequence records it (``tests/test_spine_rules.py``
fails on a module that assigns into an outcome elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..results.names import ENGINE_CLIENT
from ..results.phase_record import PhaseRecord
from ..target import scrub

INTERRUPTED = "stopped by Ctrl-C; results cover what ran"

RunStatus = Literal["ok", "skipped", "failed", "interrupted"]


@dataclass
class RunBackend:
    """The backend as a run saw it (a run's ``backend`` in the results file): what the preflight
    found (capabilities, scheme, the client's info), the run's namespace, and what cleanup removed
    or why it could not. A field not (yet) known is left out of the file."""

    capabilities: dict[str, Any] | None = None
    scheme: str | None = None
    info: dict[str, Any] | None = None  # the client's own description (library, version, options)
    namespace: str | None = None
    cleanup_removed: int | None = None
    cleanup_error: str | None = None

    @property
    def shared(self) -> bool:
        """False where each process has a private cache (``memory://``)."""
        return (self.capabilities or {}).get("shared", True)

    def to_json(self) -> dict[str, Any]:
        # the order a run's steps learn them in, as files have always had them
        fields = (("capabilities", self.capabilities), ("scheme", self.scheme), ("info", self.info),
                  ("namespace", self.namespace), ("cleanup_removed", self.cleanup_removed),
                  ("cleanup_error", self.cleanup_error))
        return {k: v for k, v in fields if v is not None}


@dataclass(frozen=True)
class LoadResult:
    """What a load path's phases produced, for the sequence to record: the phase records, how the
    run ended, the client that really ran the load (the engine, a driver: its info replaces the
    preflight client's) and what only that path's outcome holds (``dask``, ``stampedes``)."""

    phases: list[PhaseRecord] = field(default_factory=list)
    status: RunStatus = "ok"
    reason: str = ""
    client_info: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # fields of the load path's outcome_class


@dataclass
class RunOutcome:
    """What one target's run produced (a RunResult in the results file)."""

    label: str
    target: str  # redacted
    status: RunStatus = "ok"
    reason: str = ""
    backend: RunBackend = field(default_factory=RunBackend)
    server: dict[str, Any] | None = None
    network: dict[str, Any] | None = None
    phases: list[PhaseRecord] = field(default_factory=list)
    dropped_writes: str | None = None  # the write-then-read probe's finding (run/write_probe.py)

    def to_json(self) -> dict[str, Any]:
        # scrub: client exceptions in reason/error_samples may echo a DSN or a password
        return scrub({
            "label": self.label, "target": self.target, "status": self.status, "reason": self.reason,
            "backend": self.backend.to_json(), "server": self.server, "network": self.network,
            "phases": [p.to_json() for p in self.phases], "dropped_writes": self.dropped_writes,
        })


def stopped_on_errors(phases: list[PhaseRecord]) -> str | None:
    """Why the on-error policy stopped a phase (it fails the run, exit 1), if it stopped one."""
    return next((p.stopped_on_errors for p in phases if p.stopped_on_errors), None)


def engine_info(preflight_info: dict[str, Any] | None) -> dict[str, Any]:
    """The preflight client's info with the native engine named as the client that ran the load."""
    return {**(preflight_info or {}), "client": ENGINE_CLIENT}
