"""How long an experiment will take: planned from its phases, learned from its finished runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from cachemark.cli.eta import Clock, planned_seconds
from cachemark.plan import plan_runs
from cachemark.spec import build_experiment
from cachemark.units import fmt_span


def _specs(workload: dict, targets: int = 3, network: str | None = None, repeat: int = 1):
    data = {"targets": ["memory://"] * targets, "labels": [f"m{i}" for i in range(targets)],
            "workload": workload, "repeat": repeat}
    if network:
        data["network"] = network
    return plan_runs(build_experiment(data))


def test_a_run_bounded_by_time_is_planned_to_the_second():
    assert planned_seconds(_specs({"warmup": "2s", "duration": "10s"})[0]) == 12.0
    phases = [{"name": "a", "duration": "3s"}, {"name": "b", "duration": "5s", "warmup": 0}]
    assert planned_seconds(_specs({"warmup": "1s", "phases": phases})[0]) == 3 + 1 + 5
    assert planned_seconds(_specs({"ops": 1000})[0]) is None  # as long as the backend needs
    assert planned_seconds(_specs({"phases": [{"name": "w", "ops": 1}, {"name": "r", "duration": "5s"}]})[0]) is None


def test_the_opening_line_says_how_long_only_when_it_is_over_a_minute():
    assert Clock(_specs({"warmup": 0, "duration": "4s"}, targets=2)).opening() is None  # 10 s: no clock
    long = Clock(_specs({"warmup": "1s", "duration": "20s"}, targets=3))
    assert long.opening() == "3 runs, about 1 min 6 s"  # 3 × (21 s + 1 s of set-up, before any was timed)
    assert Clock(_specs({"ops": 10**6}, targets=5)).opening() is None  # op counts: said after the first run


def test_the_time_left_learns_the_set_up_and_the_op_bounded_runs_pace():
    clock = Clock(_specs({"warmup": 0, "duration": "30s"}, targets=4))
    assert clock.finished(34.0) == "1 of 4 runs done · about 1 min 42 s left"  # 3 × (30 + the 4 s seen)
    assert clock.finished(32.0) == "2 of 4 runs done · about 1 min 6 s left"  # median set-up: 3 s
    assert clock.finished(33.0) == "3 of 4 runs done · about 33 s left"
    ops = Clock(_specs({"ops": 10**6}, targets=4))
    assert ops.left() is None
    assert ops.finished(40.0) == "1 of 4 runs done · about 2 min left"
    assert ops.finished(1.0) == "2 of 4 runs done · about 41 s left"  # the median of 40 s and 1 s, twice
    assert Clock(_specs({"duration": "30s"}, targets=1)).finished(31.0) is None  # the last run: nothing left


def test_op_bounded_runs_are_timed_by_their_own_network_profile():
    # targets × profiles: m0@same-host, m0@cross-region, m1@same-host, m1@cross-region
    clock = Clock(_specs({"ops": 1000}, targets=2, network="same-host,cross-region"))
    clock.finished(2.0)
    assert clock.left() == 3 * 2.0  # no cross-region run done yet: any run's pace
    clock.finished(140.0)  # the emulated cross-region round trip makes the run long
    assert clock.left() == 2.0 + 140.0


def test_spans_read_as_a_person_says_them():
    assert [fmt_span(s) for s in (0.4, 59.6, 61, 599, 600, 3725)] == \
        ["0 s", "1 min", "1 min 1 s", "9 min 59 s", "10 min", "1 h 2 min"]


def test_a_long_run_says_how_long_before_it_starts(tmp_path):
    argv = [sys.executable, "-m", "cachemark", "run", "-t", "memory://", "--duration", "40s", "--warmup", "0",
            "--repeat", "2", "--no-calibrate", "-o", "out.json"]
    proc = subprocess.Popen(argv, cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    try:
        first = proc.stdout.readline()  # the plan is said before the first run starts
    finally:
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
    assert first.strip() == "2 runs, about 1 min 22 s", first
