"""A phase's wall time is the application's: its first op's start to its last op's end, on the
clock of the process that ran them, with cachemark's own coordination (workers starting, the
barrier, a driver's go, the engine's threads waking) outside it — on every load path. A one-op
phase's wall is then its op's latency, which the saved histograms give independently.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from cachemark.measure.histogram import Histogram
from cachemark.results import as_model, as_run
from cachemark.run.runner import run_target
from cachemark.spec import Workload
from driver_kit import needs_driver  # noqa: E402

pytestmark = pytest.mark.alone  # times phases to 0.5 ms, and a stall: runs by itself (conftest.py)

# the query each load path is asked for by (docs/drivers.md: Rails.cache's own client for a driver)
LOAD_PATHS = {"python workers": "", "engine": "client=engine", "driver": "client=ruby-activesupport"}


def latency_s(op: dict) -> float:
    """Σ latency of one op's outcomes, from its saved histograms (decoded here)."""
    total = Histogram()
    for encoded in op.get("histograms", {}).values():
        total.add(Histogram.decode(encoded))
    return total.mean * total.total / 1e9


def one_op_phases() -> Workload:
    """Reference 004's write and delete around a read: each phase one op, as rails-local-vs-remote's are."""
    return Workload(keys=1, value_size=1001, workers=1, prefill=False, warmup=0, phases=[
        {"name": "write", "mix": {"set": 1}, "ops": 1},
        {"name": "read", "mix": {"get": 1}, "ops": 1},
        {"name": "delete", "mix": {"delete": 1}, "ops": 1},
    ])


@pytest.mark.parametrize("path", list(LOAD_PATHS))
def test_a_one_op_phase_wall_is_its_op_latency(redis_server, path):
    query = LOAD_PATHS[path]
    if path == "driver":
        needs_driver("ruby-activesupport")  # ruby and its gems, or a skip saying what to install
    url = redis_server.url() + (f"?{query}" if query else "")
    run = run_target(url, one_op_phases()).to_json()
    assert run["status"] == "ok", run["reason"]
    assert [p["name"] for p in run["phases"]] == ["write", "read", "delete"]
    for phase in run["phases"]:
        (op,) = phase["ops"].values()
        assert op["count"] == 1
        latency = latency_s(op)
        # the histogram rounds a latency to its bucket (well under 1 %); nothing of cachemark's own is added
        assert phase["wall_s"] >= latency * 0.98 - 2e-6, (path, phase["name"], phase["wall_s"], latency)
        assert phase["wall_s"] - latency < 0.5e-3, (path, phase["name"], phase["wall_s"], latency)


def test_an_engine_run_with_a_stalled_server_warns_of_its_extreme_tail(spawn):
    """A server stopped (SIGSTOP) for 0.4 s under an open-loop engine load: the ops due meanwhile wait
    it out, p99 lands at ≥ 100× p50, and the verdict says so (it once printed "No warnings")."""
    from cachemark.report.verdict import warnings
    from report_fixtures import document

    server = spawn("redis")
    workload = Workload(keys=100, value_size=100, workers=1, prefill=True, warmup=0, duration=2.0, rate=2000,
                       mix={"get": 90, "set": 10})

    def stall() -> None:
        time.sleep(0.8)
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(0.4)
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)

    stopper = threading.Thread(target=stall)
    stopper.start()
    try:
        run = run_target(f"{server.url()}?client=engine", workload, "stalled").to_json()
    finally:
        stopper.join()
    assert run["status"] == "ok", run["reason"]
    found = warnings(as_model(document([run], ["spawn:redis"], "stall", 2.0)), [as_run(run)])
    tail = [w for w in found if "an extreme tail" in w]
    print(tail)  # the line, with -s
    assert tail, found
    get = run["phases"][0]["ops"]["get"]
    assert "get: an extreme tail: p99" in tail[0] and get["count"] > 1000
