"""The load on this host's Python worker processes: the application's own Python client.

N worker processes (run/supervise.py starts and watches them) each prefill their share, meet
at a barrier before each timed phase, and report their phase; here their reports become one
phase record per phase (histograms added, counters summed), and their progress the caller's.
"""

from __future__ import annotations

import time
from typing import Any

from ..measure.outage import merge_outages
from ..measure.summary import merge_ops, merge_timeseries
from ..results.phase_record import PhaseRecord
from ..spec import Workload
from ..workload.origin import remove_pool
from .load_path import PREFILL, LoadPath, ProgressFn, Run
from .messages import PhaseReport
from .outcome import INTERRUPTED, LoadResult
from .supervise import Tick, supervise
from .worker import WorkerTask


class PythonWorkers(LoadPath):
    """``workload.workers`` processes on this host, each with its own client connection."""

    def run_phases(self, run: Run) -> LoadResult:
        workload = run.workload
        tasks = [WorkerTask(run.target, run.namespace, workload.model_dump(), w, workload.workers, run.shared)
                 for w in range(workload.workers)]
        try:
            got = supervise(tasks, workload, run.monitor, len(tasks),
                            progress_tick(run.progress, workload, run.shared))
        finally:
            run.monitor.stop_all()
            remove_pool(run.namespace)  # the origin pool's names, a killed worker's too
        status, reason = got.status(f"{run.outcome.target}: ", INTERRUPTED)
        return LoadResult(got.records(workload, run.monitor, merge_phase), status, reason)


def progress_tick(progress: ProgressFn | None, workload: Workload, shared: bool = True) -> Tick | None:
    """The progress callback, fed the current phase, its ops done and the keys prefilled: the
    prefill's keys until every one is written (its clock from the first tick), then each phase's
    ops (its clock from the phase's first op)."""
    if progress is None:
        return None
    phases = workload.effective_phases()
    seen: dict[str, Any] = {"phase": -1, "started": None, "prefill_started": time.monotonic()}
    to_prefill = (workload.keys if shared else workload.keys * workload.workers) if workload.prefill else 0

    def tick(current: int, done: int, prefilled: int) -> None:
        if current == 0 and not done and prefilled < to_prefill:
            progress(PREFILL, prefilled, to_prefill, time.monotonic() - seen["prefill_started"], None)
            return
        if current != seen["phase"]:
            seen["phase"], seen["started"] = current, None
        if seen["started"] is None and done:
            seen["started"] = time.monotonic()
        phase = phases[min(current, len(phases) - 1)]
        elapsed = time.monotonic() - seen["started"] if seen["started"] else 0.0
        progress(phase.name, done, phase.ops, elapsed, phase.duration)

    return tick


def merge_phase(phase: Any, parts: list[PhaseReport], workload: Workload) -> PhaseRecord:
    """One phase's record from its workers' reports (an agent adds what the coordinator needs)."""
    start = min(p.start_ns for p in parts)
    end = max(p.end_ns for p in parts)
    wall_s = (end - start) / 1e9
    return PhaseRecord(
        name=phase.name,
        mode="open" if phase.rate else "closed",
        rate=phase.rate,
        workers=workload.workers,
        workers_reported=len(parts),
        wall_s=wall_s,
        client_cpu_s=sum(p.cpu_s for p in parts),
        interrupted=any(p.interrupted for p in parts),
        missed=sum(p.missed for p in parts),
        error_samples=[s for p in parts for s in p.error_samples][:5],
        ops=merge_ops([p.ops for p in parts], wall_s),
        timeseries=merge_timeseries([p.timeseries for p in parts]),
        write_outages=merge_outages([p.write_outages for p in parts], start) or None,
    )
