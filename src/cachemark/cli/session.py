"""An experiment on the terminal: calibration, a progress bar (or lines) per run, the time left,
each distributed run's agents, then the table and what to read in it.

The experiment itself (its runs, saved after each) is run/experiment.py's; this module only
draws what it is told, through a :class:`TerminalView`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..backends.base import PSEUDO_OPS
from ..plan import RunSpec
from ..report.table import render
from ..results import ResultsDocument, Run
from ..run.experiment import run_experiment as run_all
from ..run.load_path import PREFILL, ProgressFn
from ..run.outcome import RunOutcome
from ..run.prefill_plan import announced
from ..spec import Experiment
from ..textfile import one_line
from ..units import fmt_span
from .agents_table import print_agents
from .eta import Clock

LINE_EVERY_S = 5.0  # piped output: at most one progress line per run this often


def line_every_s() -> float:
    """The piped progress line's interval: ``CACHEMARK_PROGRESS_EVERY`` seconds (a CI log that wants
    more or fewer lines), else 5 s; a value that is not a positive number is ignored."""
    try:
        every = float(os.environ.get("CACHEMARK_PROGRESS_EVERY", ""))
    except ValueError:
        return LINE_EVERY_S
    return every if every > 0 else LINE_EVERY_S


class BarProgress:
    """A run's progress on a terminal: a line of rich's bar, removed when the run ends."""

    def __init__(self, progress: Progress, name: str) -> None:
        self.progress = progress
        self.task = progress.add_task(name, total=1.0, detail="starting")

    def update(self, phase: str, done: int, ops: int | None, elapsed: float, duration: float | None) -> None:
        fraction = done / ops if ops else (elapsed / duration if duration else 0.0)
        detail = (f"{phase}: {done:,} of {ops or 0:,} keys{_left(done, ops, elapsed)}" if phase == PREFILL
                  else f"{phase}: {done:,} ops")
        self.progress.update(self.task, completed=min(fraction, 1.0), detail=detail)

    def end(self, status: str, run: Run) -> None:
        self.progress.update(self.task, completed=1.0, detail=status)


def _left(done: int, total: int | None, elapsed: float) -> str:
    """`` · about 4 min left`` at the pace so far (the prefill's: its keys are known, its speed is not)."""
    if not total or done <= 0 or elapsed < 1.0:
        return ""
    return f" · about {fmt_span(elapsed * (total - done) / done)} left"


class LineProgress:
    """A run's progress where rich's bar draws nothing (a pipe, a CI log): plain lines, no escapes.

    One line when the run starts, one when it ends, and between them at most one every
    ``every`` seconds: ``redis · main: 12,345 ops · 3.0 s of 4 s``.
    """

    def __init__(self, console: Console, name: str, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.console, self.name, self.clock = console, name, clock
        self.every = every if every is not None else line_every_s()
        self.state: tuple[str, int, int | None, float, float | None] | None = None
        self.last = clock()
        self._say(f"{name}: starting")

    def update(self, phase: str, done: int, ops: int | None, elapsed: float, duration: float | None) -> None:
        self.state = (phase, done, ops, elapsed, duration)
        if self.clock() - self.last >= self.every:
            self._say(self.line())

    def end(self, status: str, run: Run) -> None:
        """The run's own totals (the last update may already be the next phase's zero)."""
        if not run.phases:
            self._say(f"{self.name}: {status}")
            return
        ops = sum(op.count for phase in run.phases for name, op in phase.ops.items()
                  if name not in PSEUDO_OPS)  # an origin call is part of a fetch, not an op of its own
        seconds = sum(phase.wall_s for phase in run.phases)
        self._say(f"{self.name}: {status} · {ops:,} ops in {seconds:.1f} s")

    def line(self) -> str:
        if self.state is None:
            return f"{self.name}: starting"
        phase, done, ops, elapsed, duration = self.state
        unit = "keys" if phase == PREFILL else "ops"
        count = f"{done:,} of {ops:,} {unit}" if ops else f"{done:,} {unit}"
        seconds = f"{elapsed:.1f} s" + (f" of {duration:g} s" if duration else "")
        left = _left(done, ops, elapsed) if phase == PREFILL else ""
        return f"{self.name} · {phase}: {count} · {seconds}{left}"

    def _say(self, text: str) -> None:
        self.last = self.clock()
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


class TerminalView:
    """The experiment as the terminal shows it (run/experiment.py's ExperimentView)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar: Progress | None = None
        self.clock: Clock | None = None
        self.shown: BarProgress | LineProgress | None = None

    def busy(self, what: str) -> contextlib.AbstractContextManager[Any]:
        return self.console.status(what)

    def calibrated(self, calibration: dict[str, Any]) -> None:
        rtt = calibration["loopback_rtt"]
        self.console.print(
            f"calibration: loopback RTT p50 {rtt['busy']['p50_us']:.0f}µs busy, "
            f"{rtt['idle']['p50_us']:.0f}µs idle; timer resolution {calibration['timer_resolution_ns']}ns"
        )

    def proxy_overhead(self, figures: dict[str, Any]) -> None:
        self.console.print(f"network proxy: adds {max(figures.get('added_p50', 0), 0):.0f}µs p50, "
                           f"{max(figures.get('added_p99', 0), 0):.0f}µs p99 per round trip with no delay "
                           "configured (measured now; reported beside the network figures)")

    @contextlib.contextmanager
    def runs(self, specs: list[RunSpec]) -> Iterator[None]:
        self.clock = Clock(specs)
        if (opening := self.clock.opening()) is not None:
            self._say(opening)
        if self.console.is_interactive:  # rich's bar draws nothing where the console is not interactive
            self.bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=self.console,
                                transient=True)
        with self.bar or contextlib.nullcontext():
            yield

    def run_started(self, spec: RunSpec, name: str) -> ProgressFn:
        if (prefill := announced(spec)) is not None:
            self._say(f"{name}: {prefill}")
        self.shown = BarProgress(self.bar, name) if self.bar is not None else LineProgress(self.console, name)
        return self.shown.update

    def run_finished(self, spec: RunSpec, outcome: RunOutcome, run: Run, seconds: float) -> None:
        if run.dask is not None and not run.dask.is_empty and run.phases:  # a distributed run: its agents
            print_agents(self.console, run)
        if self.shown is not None:
            self.shown.end(outcome.status, run)
        if outcome.status == "interrupted" or self.clock is None:
            return  # the experiment ends here: no time left to tell
        if (left := self.clock.finished(seconds)) is not None:
            self._say(left)

    def _say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)


def run_experiment(experiment: Experiment, out: Path | None = None, calibrate: bool = True,
                   console: Console | None = None, cluster: Any = None) -> tuple[ResultsDocument, Path]:
    """``cachemark run``'s experiment, drawn on ``console``: its runs, then the table and the lines
    that say how to read it; Ctrl-C ends it after saving (KeyboardInterrupt, once said where).
    The document comes back as the typed document the reports read."""
    console = console or Console()
    finished = run_all(experiment, out, calibrate, TerminalView(console), cluster)
    document, path = finished.document.model, finished.path
    assert document is not None  # the writer keeps the model it validated
    render(document, console, title=f"cachemark: {one_line(finished.experiment.name)}")
    for run in document.runs:
        for phase in run.phases:
            # a run that drops writes is said to once (the warnings, the exit line): not again by its canaries
            samples = [s for s in phase.error_samples if not (run.dropped_writes and "dropped_write" in s)]
            for sample in samples[:2]:
                console.print(f"{run.name}: {sample}", markup=False, highlight=False)
        if run.status == "failed":
            console.print(f"{run.name}: failed: {run.reason}", markup=False, highlight=False)
    for item in document.saturation or []:
        where = item.saturation
        console.print(f"{item.label}: " + (f"saturates at {item.param}={where}" if where is not None
                                           else f"throughput still rising at the largest {item.param}"),
                      markup=False, highlight=False)
    if finished.interrupted:
        console.print(f"interrupted: partial results saved to {path}", markup=False, highlight=False)
        raise KeyboardInterrupt
    return document, path
