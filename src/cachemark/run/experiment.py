"""One experiment end to end: calibrate, run every variant, save after every run.

An experiment expands into runs: targets × network profiles × sweep points × repeats, each
run on this host or, under ``--cluster``, from the cluster's agents. Results are saved after
every run, atomically, so Ctrl-C or a failing target never loses what was already measured.
What the user sees (calibration figures, progress, the time left) is the caller's to draw:
it is told through an :class:`ExperimentView` (cli/session.py draws one on the terminal);
without one the experiment runs silently.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import Crash, UserError
from ..lab.wakeups import fast_wakeups
from ..measure.fingerprint import calibrate as run_calibration
from ..measure.fingerprint import fingerprint
from ..plan import RunSpec, describe, experiment_record, named, plan_runs
from ..results import LoadedDocument, ResultsBuilder, Run, default_path
from ..spec import Experiment
from .load_path import ProgressFn
from .outcome import RunOutcome
from .prefill_plan import check_prefills

OVERHEAD_SAMPLES = 2000  # round trips each way for the proxy's own overhead: well under a second


class ExperimentView(Protocol):
    """What an experiment tells whoever shows it; every call returns at once."""

    def busy(self, what: str) -> contextlib.AbstractContextManager[Any]:
        """A long untimed step (calibration, the proxy's overhead) is under way."""

    def calibrated(self, calibration: dict[str, Any]) -> None: ...

    def proxy_overhead(self, figures: dict[str, Any]) -> None: ...

    def runs(self, specs: list[RunSpec]) -> contextlib.AbstractContextManager[Any]:
        """The runs are about to start (in this order); they have ended when the context exits."""

    def run_started(self, spec: RunSpec, name: str) -> ProgressFn | None:
        """A run starts; what it returns is told the run's progress."""

    def run_finished(self, spec: RunSpec, outcome: RunOutcome, run: Run, seconds: float) -> None:
        """A run ended and was saved (``run``: its record in the results, typed)."""


class Silent:
    """The view of an experiment nobody watches."""

    def busy(self, what: str) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def calibrated(self, calibration: dict[str, Any]) -> None:
        pass

    def proxy_overhead(self, figures: dict[str, Any]) -> None:
        pass

    @contextlib.contextmanager
    def runs(self, specs: list[RunSpec]) -> Iterator[None]:
        yield

    def run_started(self, spec: RunSpec, name: str) -> ProgressFn | None:
        return None

    def run_finished(self, spec: RunSpec, outcome: RunOutcome, run: Run, seconds: float) -> None:
        pass


@dataclass
class Finished:
    """An experiment's end: the saved document, where it is, and whether Ctrl-C cut it short."""

    experiment: Experiment  # as named for its title (plan.named)
    document: LoadedDocument  # the JSON, with its typed model kept (results.as_model reads it at once)
    path: Path
    interrupted: bool


def run_experiment(experiment: Experiment, out: Path | None = None, calibrate: bool = True,
                   view: ExperimentView | None = None, cluster: Any = None) -> Finished:
    """Every run of ``experiment``, saved to ``out`` (or the default results path) after each.

    A user error or a crash of ours ends the experiment (raised), with the runs done so far saved;
    Ctrl-C ends it after saving the interrupted run (``Finished.interrupted``). With ``cluster``
    (run/distributed.py's, ``--cluster``) every run's load runs on its agents, else on this host."""
    view = view or Silent()
    specs = plan_runs(experiment)
    check_prefills(specs)  # before the first run: one that cannot finish is refused, not started
    experiment = named(experiment, specs)
    proxied = bool(experiment.network) and any(spec.network is not None and spec.network.proxied for spec in specs)
    # idle CPUs poll for the whole experiment, baseline and profiles alike (lab/wakeups.py)
    with fast_wakeups() if proxied else contextlib.nullcontext(False):
        return _run_all(experiment, specs, out, calibrate, view, proxied, cluster)


def _run_all(experiment: Experiment, specs: list[RunSpec], out: Path | None, calibrate: bool, view: ExperimentView,
             proxied: bool, cluster: Any) -> Finished:
    if cluster is None:  # this host: straight to the run sequence
        from .runner import run_target as run_one
    else:  # the --cluster's agents (the Dask module is imported only then)
        from functools import partial

        from .distributed import run_distributed

        run_one = partial(run_distributed, cluster)

    calibration = None
    if calibrate:
        with view.busy("calibrating: timer resolution and loopback round trip"):
            calibration = run_calibration()
        view.calibrated(calibration)
    results = ResultsBuilder(experiment_record(experiment), fingerprint(calibration))
    if proxied:
        results.set_proxy_overhead(_proxy_overhead(view))
    path = Path(out) if out else default_path()
    interrupted = False
    with view.runs(specs):
        for spec in specs:
            progress = view.run_started(spec, describe(spec, experiment.repeat))
            started = time.monotonic()
            try:
                outcome = run_one(spec.target, spec.workload, spec.label, progress, network=spec.network)
            except (UserError, Crash):
                if results.has_runs:
                    results.write(path)
                raise
            results.add_run(outcome.to_json(), spec.sweep, spec.repeat if experiment.repeat > 1 else None)
            results.write(path)
            view.run_finished(spec, outcome, results.model.runs[-1], time.monotonic() - started)
            if outcome.status == "interrupted":
                interrupted = True
                break
    if experiment.sweep:
        results.summarize_saturation()
        results.write(path)
    return Finished(experiment, results.saved(), path, interrupted)


def _proxy_overhead(view: ExperimentView) -> dict[str, Any]:
    """What the latency proxy itself adds with no delay configured, measured now, on this machine."""
    from ..lab.proxy import measure_overhead

    with view.busy("measuring the network proxy's own overhead"):
        overhead = measure_overhead(samples=OVERHEAD_SAMPLES)
    figures = {k: overhead[k] for k in ("added_p50", "added_p99", "direct_p50", "proxied_p50", "samples",
                                        "fast_wakeups") if k in overhead}
    view.proxy_overhead(figures)
    return figures
