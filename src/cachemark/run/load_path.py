"""Where a run's timed phases run: the one interface between the run sequence and its loads.

The sequence (run/sequence.py) provides the target, checks it, probes it, cleans up after it;
a load path only runs the phases. Four exist: this host's Python worker processes
(run/load_workers.py), the native engine (run/load_engine.py), a driver in another stack
(run/load_driver.py), and the agents of a Dask cluster (run/distributed.py). Each may refuse
what it cannot run before anything connects (:meth:`LoadPath.check`) and write the keys before
the phases (:meth:`LoadPath.prefill`); the local paths prefill inside their first phase (untimed),
so their hook does nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..spec import Workload
from ..target import Target
from .outcome import LoadResult, RunOutcome

# (phase name, ops done in it, its op budget, seconds since its first op, its duration); while the
# keys are written first, the phase is PREFILL and the counts are keys written and keys to write
ProgressFn = Callable[[str, int, int | None, float, float | None], None]
PREFILL = "prefill"


@dataclass
class Run:
    """One run as the sequence hands it to its load path, once the target is checked and probed."""

    target: Target  # reachable: provided, and through the network proxy when one was asked for
    workload: Workload
    namespace: str  # every key of the run starts with it; cleanup removes only it
    outcome: RunOutcome  # what the sequence recorded so far (read only: the load path returns its part)
    monitor: Any  # run/monitor.py's PhaseMonitor: told when each timed phase starts and ends
    progress: ProgressFn | None = None

    @property
    def shared(self) -> bool:
        """False where each process has a private cache (``memory://``): each then prefills all of it."""
        return self.outcome.backend.shared


class LoadPath(ABC):
    """Runs a run's phases somewhere; the sequence around it is the same for all."""

    outcome_class: type[RunOutcome] = RunOutcome

    def check(self, target: Target, workload: Workload, capabilities: dict[str, Any], network: Any) -> None:
        """Refuse in one line (UserError), before anything connects, what this path cannot run."""

    def prefill(self, run: Run) -> None:
        """Write every key before the phases (untimed). By default the load does it in its first phase."""

    @abstractmethod
    def run_phases(self, run: Run) -> LoadResult:
        """Run every phase of ``run.workload``: the phase records and how the run ended, which the
        sequence records in ``run.outcome``."""
