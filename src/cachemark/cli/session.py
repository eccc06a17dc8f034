"""One experiment end to end: calibrate, run every variant with progress, save, render.

An experiment expands into runs: targets × network profiles × sweep points × repeats.
Results are saved after every run, atomically, so Ctrl-C or a failing target never
loses what was already measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..backends.base import PSEUDO_OPS
from ..errors import Crash, UserError
from ..measure.fingerprint import calibrate as run_calibration
from ..measure.fingerprint import fingerprint
from ..measure.saturation import saturation_summary
from ..plan import describe, experiment_record, named, plan_runs
from ..report.table import render
from ..results import default_path, new_document, write_atomic
from ..results.names import run_name
from ..run.runner import run_target
from ..spec import Experiment
from ..textfile import one_line
from .eta import Clock

LINE_EVERY_S = 5.0  # piped output: at most one progress line per run this often
OVERHEAD_SAMPLES = 2000  # round trips each way for the proxy's own overhead: well under a second


def proxy_overhead(console: Console) -> dict[str, Any]:
    """What the latency proxy itself adds with no delay configured, measured now, on this machine."""
    from ..lab.proxy import measure_overhead

    with console.status("measuring the network proxy's own overhead"):
        overhead = measure_overhead(samples=OVERHEAD_SAMPLES)
    figures = {k: overhead[k] for k in ("added_p50", "added_p99", "direct_p50", "proxied_p50", "samples")
               if k in overhead}
    console.print(f"network proxy: adds {max(figures.get('added_p50', 0), 0):.0f}µs p50, "
                  f"{max(figures.get('added_p99', 0), 0):.0f}µs p99 per round trip with no delay configured "
                  "(measured now; reported beside the network figures)")
    return figures


class BarProgress:
    """A run's progress on a terminal: a line of rich's bar, removed when the run ends."""

    def __init__(self, progress: Progress, name: str) -> None:
        self.progress = progress
        self.task = progress.add_task(name, total=1.0, detail="starting")

    def update(self, phase: str, done: int, ops: int | None, elapsed: float, duration: float | None) -> None:
        fraction = done / ops if ops else (elapsed / duration if duration else 0.0)
        self.progress.update(self.task, completed=min(fraction, 1.0), detail=f"{phase}: {done:,} ops")

    def end(self, status: str, run: dict[str, Any]) -> None:
        self.progress.update(self.task, completed=1.0, detail=status)


class LineProgress:
    """A run's progress where rich's bar draws nothing (a pipe, a CI log): plain lines, no escapes.

    One line when the run starts, one when it ends, and between them at most one every
    ``every`` seconds: ``redis · main: 12,345 ops · 3.0 s of 4 s``.
    """

    def __init__(self, console: Console, name: str, every: float = LINE_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.console, self.name, self.every, self.clock = console, name, every, clock
        self.state: tuple[str, int, int | None, float, float | None] | None = None
        self.last = clock()
        self._say(f"{name}: starting")

    def update(self, phase: str, done: int, ops: int | None, elapsed: float, duration: float | None) -> None:
        self.state = (phase, done, ops, elapsed, duration)
        if self.clock() - self.last >= self.every:
            self._say(self.line())

    def end(self, status: str, run: dict[str, Any]) -> None:
        """The run's own totals (the last update may already be the next phase's zero)."""
        phases = run.get("phases") or []
        if not phases:
            self._say(f"{self.name}: {status}")
            return
        ops = sum(op.get("count") or 0 for phase in phases for name, op in (phase.get("ops") or {}).items()
                  if name not in PSEUDO_OPS)  # an origin call is part of a fetch, not an op of its own
        seconds = sum(phase.get("wall_s") or 0.0 for phase in phases)
        self._say(f"{self.name}: {status} · {ops:,} ops in {seconds:.1f} s")

    def line(self) -> str:
        if self.state is None:
            return f"{self.name}: starting"
        phase, done, ops, elapsed, duration = self.state
        count = f"{done:,} of {ops:,} ops" if ops else f"{done:,} ops"
        seconds = f"{elapsed:.1f} s" + (f" of {duration:g} s" if duration else "")
        return f"{self.name} · {phase}: {count} · {seconds}"

    def _say(self, text: str) -> None:
        self.last = self.clock()
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


def run_experiment(experiment: Experiment, out: Path | None = None, calibrate: bool = True,
                   console: Console | None = None) -> tuple[dict[str, Any], Path]:
    console = console or Console()
    specs = plan_runs(experiment)
    experiment = named(experiment, specs)
    calibration = None
    if calibrate:
        with console.status("calibrating: timer resolution and loopback round trip"):
            calibration = run_calibration()
        rtt = calibration["loopback_rtt"]
        console.print(
            f"calibration: loopback RTT p50 {rtt['busy']['p50_us']:.0f}µs busy, "
            f"{rtt['idle']['p50_us']:.0f}µs idle; timer resolution {calibration['timer_resolution_ns']}ns"
        )
    document = new_document(experiment_record(experiment), fingerprint(calibration))
    if experiment.network and any(spec.network is not None and spec.network.proxied for spec in specs):
        document["environment"]["proxy_overhead"] = proxy_overhead(console)
    path = Path(out) if out else default_path()
    clock = Clock(specs)
    if (opening := clock.opening()) is not None:
        console.print(opening, markup=False, highlight=False)
    interrupted = False
    bar: Progress | None = None  # rich's bar draws nothing where the console is not interactive
    if console.is_interactive:
        bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(), TextColumn("{task.fields[detail]}"),
                       TimeElapsedColumn(), console=console, transient=True)
    with bar or nullcontext():
        for spec in specs:
            shown = BarProgress(bar, describe(spec, experiment.repeat)) if bar is not None \
                else LineProgress(console, describe(spec, experiment.repeat))
            started = time.monotonic()
            try:
                from ..run.distributed import run_or_distribute  # run_target, or the --cluster's agents

                outcome = run_or_distribute(run_target, spec.target, spec.workload, spec.label, shown.update,
                                            network=spec.network, console=console)
            except (UserError, Crash):
                if document["runs"]:
                    write_atomic(path, document)
                raise
            run = outcome.to_json()
            shown.end(outcome.status, run)
            run["sweep"] = spec.sweep or None
            run["repeat"] = spec.repeat if experiment.repeat > 1 else None
            run["display"] = run_name(run)
            document["runs"].append(run)
            write_atomic(path, document)
            if outcome.status == "interrupted":
                interrupted = True
                break
            if (left := clock.finished(time.monotonic() - started)) is not None:
                console.print(left, markup=False, highlight=False)
    if experiment.sweep:
        document["saturation"] = saturation_summary(document["runs"])
        write_atomic(path, document)
    render(document, console, title=f"cachemark: {one_line(experiment.name)}")
    for run in document["runs"]:
        for phase in run["phases"]:
            for sample in phase.get("error_samples", [])[:2]:
                console.print(f"{run['display']}: {sample}", markup=False, highlight=False)
        if run["status"] == "failed":
            console.print(f"{run['display']}: failed: {run['reason']}", markup=False, highlight=False)
    for item in document.get("saturation", []):
        where = item["saturation"]
        console.print(f"{item['label']}: " + (f"saturates at {item['param']}={where}" if where is not None
                                               else f"throughput still rising at the largest {item['param']}"),
                      markup=False, highlight=False)
    if interrupted:
        console.print(f"interrupted: partial results saved to {path}", markup=False, highlight=False)
        raise KeyboardInterrupt
    return document, path
