"""Session fixtures for the report tests: results documents made by real runs, checked in
(``tests/data/report-doc.json``, ``slower-doc.json``), so the report tests need no server.
``python tests/report_fixtures.py`` runs the experiments again and rewrites them.

Loaded by the report test modules through ``pytest_plugins = ["report_fixtures"]``.
``report_doc`` holds three repeats of ``memory://`` and a
three-point value-size sweep against a spawned redis-server sampled by
:class:`~cachemark.measure.server_stats.ServerSampler` (the phase's ``server`` block; the
runner supplies ``timeseries``), i.e. every shape the reports read.
Nothing in it is hand-written except the ``sweep``/``repeat`` tags the runner would add.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cachemark.measure.fingerprint import calibrate, fingerprint
from cachemark.measure.server_stats import ServerSampler
from cachemark.results import new_document
from cachemark.run.runner import run_target
from cachemark.spec import Experiment, Workload

SWEEP_SIZES = ("100", "1000", "10000")


def _workload(**overrides: Any) -> Workload:
    base = {"duration": 0.5, "warmup": 0, "workers": 1, "keys": 1000, "prefill": False, "seed": 7}
    return Workload(**{**base, **overrides})


def run_json(url: str, workload: Workload, label: str, *, sweep: dict[str, str] | None = None,
             repeat: int | None = None, sampler: ServerSampler | None = None) -> dict[str, Any]:
    """One real run as its results-file entry, with the server sampled around it when asked."""
    if sampler is not None:
        sampler.start()
    outcome = run_target(url, workload, label)
    run = outcome.to_json()
    assert run["status"] == "ok", run["reason"]
    if sampler is not None:
        phase = run["phases"][0]
        phase["server"] = sampler.stop(total_ops=sum(op["count"] for op in phase["ops"].values()))
    run["sweep"] = sweep
    if repeat is not None:
        run["repeat"] = repeat
    return run


def document(runs: list[dict[str, Any]], targets: list[str], name: str, duration: float) -> dict[str, Any]:
    """The document of ``runs``; its experiment plans the longest ``duration`` they ran (the verdict
    reads a phase that ran well past its plan as a hiccup)."""
    experiment = Experiment(name=name, targets=targets, workload=_workload(duration=duration)).model_dump(mode="json")
    doc = new_document(experiment, fingerprint(calibrate()))
    doc["runs"] = runs
    return doc


DATA = Path(__file__).parent / "data"


def _load(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text())


@pytest.fixture(scope="session")
def report_doc() -> dict[str, Any]:
    return _load("report-doc")


@pytest.fixture(scope="session")
def slower_doc() -> dict[str, Any]:
    """A run labelled "memory" that really went to redis over loopback: a real, large slowdown."""
    return _load("slower-doc")


def regenerate() -> None:
    """Run the experiments again and rewrite the two files (``python tests/report_fixtures.py``).
    A script, not a test: its redis is started here, as conftest's fixtures exist only under pytest."""
    from cachemark.lab.redis import RedisServer
    from cachemark.measure.server_stats import ServerSampler

    server = RedisServer().start()
    try:
        runs = [run_json("memory://", _workload(duration=0.4), "memory", repeat=i) for i in range(3)]
        for size in SWEEP_SIZES:
            sampler = ServerSampler(server.url(), server.pid(), interval=0.2)
            runs.append(run_json(server.url(), _workload(duration=0.8, workers=2, value_size=size), "redis",
                                 sweep={"value_size": size}, sampler=sampler))
        report = document(runs, ["memory://", "spawn:redis"], "report-tests", duration=0.8)
        slower = document([run_json(server.url(), _workload(duration=0.4), "memory", repeat=0)],
                          ["spawn:redis"], "report-tests-slower", duration=0.4)
    finally:
        server.stop()
    for name, doc in (("report-doc", report), ("slower-doc", slower)):
        (DATA / f"{name}.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    regenerate()
