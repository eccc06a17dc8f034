"""A run's phase as the experiment planned it (:class:`PhasePlan`), read back from the saved workload.

The verdict judges a phase against its plan: its planned duration and op budget, whether keys were
prefilled, the warm-up, the mix's expected hit ratio. The plan is the saved workload
(``experiment.workload_spec``: spec.Workload's JSON as the file's version wrote it) with the run's
sweep point and then the phase's own fields over it, merged by ``spec.phase_over_workload``, the
rule ``Workload.effective_phases`` runs by. It is read as saved rather than validated again as a
``Workload``: a file of another version, or a swept value saved as text, must still read, so each
field holds the file's value (or None when the file has none) and each reader checks its type
before using it (validated, absent fields would read as today's defaults, not as what ran).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..results import ResultsDocument, Run
from ..spec import phase_over_workload

# An object of a results file kept free-form by the schema (Table[Any]): the workload and its phases as the
# file's version wrote them, what a backend said about itself. Read by key, each value's type checked.
SavedObject = dict[str, Any]


@dataclass(frozen=True)
class PhasePlan:
    """The settings one phase ran under, as far as the verdict reads them; None: not in the file."""

    keys: object = None
    mix: object = None  # op → share, or the text a sweep gave ("get=1;set=1")
    ops: object = None  # the op budget
    duration: object = None  # seconds
    warmup: object = None
    warmup_ops: object = None
    prefill: object = None
    ttl: object = None
    trace: object = None  # a replayed trace's settings (path, speed, …)

    @classmethod
    def of(cls, settings: SavedObject) -> PhasePlan:
        return cls(**{f.name: settings.get(f.name) for f in fields(cls)})

    @property
    def warmed(self) -> bool:
        """A warm-up ran before the phase (by time or by ops)."""
        return bool(self.warmup or self.warmup_ops)

    @property
    def replayed_on_schedule(self) -> bool:
        """A trace replayed at its recorded times (speed 0 replays as fast as it can)."""
        trace = self.trace if isinstance(self.trace, dict) else {}
        return bool(trace) and trace.get("speed", 1) != 0


def swept(value: object) -> object:
    """A swept value as the workload field it replaced (sweeps are saved as strings)."""
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return value


def phase_plan(document: ResultsDocument, run: Run, name: str) -> PhasePlan:
    """The experiment's settings for a run's phase: the phase's own fields over the run's sweep point
    over the workload's (an op budget only where the phase has no duration of its own, and no duration
    where it has only an op budget, as ``Workload.effective_phases`` runs it)."""
    wl = dict(document.experiment.workload_spec)
    wl.update({k: swept(v) for k, v in (run.sweep or {}).items()})
    planned = next((p for p in document.experiment.planned_phases if (p.get("name") or "main") == name), None)
    return PhasePlan.of(phase_over_workload(planned, wl) if planned is not None else wl)
