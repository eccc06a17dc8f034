"""The load on the native engine (``?client=engine``): wire speed, the same phase records.

run/engine_runner.py translates the workload into the engine's config and shapes its answer;
here it is one load path among the others, naming the client and the run's end as they do.
"""

from __future__ import annotations

from ..errors import PrefillFailed
from .engine_runner import run_engine_phases
from .load_path import LoadPath, Run
from .outcome import INTERRUPTED, LoadResult, engine_info


class NativeEngine(LoadPath):
    """The Rust engine's threads and connections, in this process."""

    def run_phases(self, run: Run) -> LoadResult:
        try:
            phases = run_engine_phases(run.target, run.workload, run.namespace, run.monitor, run.progress)
        except PrefillFailed as exc:  # named by the user's URL, as the workers' refusals are
            raise PrefillFailed(f"{run.outcome.target}: {exc}") from None
        interrupted = any(p.interrupted for p in phases)
        return LoadResult(phases, "interrupted" if interrupted else "ok", INTERRUPTED if interrupted else "",
                          engine_info(run.outcome.backend.info))
