"""One experiment end to end: calibrate, run each target with progress, save, render.

Results are saved after every target, atomically, so Ctrl-C or a failing target
never loses what was already measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .errors import UserError
from .measure.fingerprint import calibrate as run_calibration
from .measure.fingerprint import fingerprint
from .report.table import render
from .results import default_path, new_document, write_atomic
from .run.runner import run_target
from .spec import Experiment
from .target import redact


def experiment_record(experiment: Experiment) -> dict[str, Any]:
    """The spec as saved: complete enough to re-run, with credentials redacted."""
    data = experiment.model_dump(mode="json")
    data["targets"] = [redact(t) for t in experiment.targets]
    return data


def run_experiment(experiment: Experiment, out: Path | None = None, calibrate: bool = True,
                   console: Console | None = None) -> tuple[dict[str, Any], Path]:
    console = console or Console()
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
    path = Path(out) if out else default_path()
    labels = experiment.labels or [None] * len(experiment.targets)
    if len(labels) != len(experiment.targets):
        raise UserError(f"{len(labels)} labels for {len(experiment.targets)} targets: give one label per target")
    interrupted = False
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[detail]}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        for url, label in zip(experiment.targets, labels, strict=True):
            task = progress.add_task(label or redact(url), total=1.0, detail="starting")

            def on_progress(phase: str, done: int, ops: int | None, elapsed: float, duration: float | None,
                            task=task) -> None:
                fraction = done / ops if ops else (elapsed / duration if duration else 0.0)
                progress.update(task, completed=min(fraction, 1.0), detail=f"{phase}: {done:,} ops")

            try:
                outcome = run_target(url, experiment.workload, label, on_progress)
            except UserError:
                write_atomic(path, document) if document["runs"] else None
                raise
            progress.update(task, completed=1.0, detail=outcome.status)
            document["runs"].append(outcome.to_json())
            write_atomic(path, document)
            if outcome.status == "interrupted":
                interrupted = True
                break
    render(document, console, title=f"cachemark: {experiment.name}")
    for run in document["runs"]:
        for phase in run["phases"]:
            for sample in phase.get("error_samples", [])[:2]:
                console.print(f"[yellow]{run['label']}[/yellow] {sample}", markup=True, highlight=False)
    if interrupted:
        console.print(f"interrupted: partial results saved to {path}")
        raise KeyboardInterrupt
    return document, path
