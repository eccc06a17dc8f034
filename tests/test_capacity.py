"""``cachemark capacity`` against a server whose answer is known: an M/M/1 queue (tests/mm1_server.py).

Fed Poisson arrivals at rate λ, M/M/1 with service rate μ has exponential response times of mean
1/(μ − λ), so p99 = ln 100 ÷ (μ − λ) and the highest rate within a p99 budget B is
λ* = μ − ln 100 ÷ B. The search must find it within 10 %.

Why these settings (S = 0.5 ms, so μ = 2,000/s; budgets 9 ms and 12.5 ms, λ* = 1,488/s and 1,632/s,
ρ = 0.74 and 0.82): a step's p99 is a sample of an autocorrelated queue, noisy by ±10–25 % at
5,000 samples; an error δ in p99 moves the rate found by (μ − λ)/λ · δ, small at high ρ, while the
noise grows with ρ (relaxation time ≈ S/(1 − √ρ)²), and a fixed overhead (the loopback, the engine)
weighs less in a larger budget. Simulated with the same search (Lindley recursion, 400 searches per
budget), the estimate lands within 10 % of λ* in 98–99.8 % of searches. Measured on a shared 2-core
VM, with other servers' seeds: 0.95–1.04× at 9 ms (8 searches) and 1.02–1.06× at 12.5 ms; at 6 ms
(ρ = 0.62, where the sensitivity (μ − λ)/λ is 0.6) one search of six came out at 0.85×, so the test
does not use it. The seeds are fixed (the server's 42, cachemark's 1), so each run replays nearly
the same sample path: 0.99× and 1.02×. (Seed 21's path gives 0.91× at 9 ms: its arrivals at
1,437/s were burstier than Poisson as the server saw them — coefficient of variation 1.11 — and its
queue's p99 40 % over the formula; within 10 %, but near the edge.)
A bigger S would leave too few samples per second for a one-minute test, a smaller one makes the
loopback's ~0.1–0.2 ms a visible part of the budget. Each search takes ~23 s (a closed-loop second,
then 4–6 steps of 3–5 s).

The search runs under SCHED_FIFO below the server when allowed, as in test_mm1.py. After every step
the step's p99 is held to the server's own record of the same requests (arrival stamp → reply
sent); a machine so busy that the client's figure is more than 15 % off that record gives no truth,
and the test skips saying so.
"""

from __future__ import annotations

import json
import math
import threading

import numpy as np
import pytest

from cachemark.analysis.capacity import CapacityProgress, CapacityResult, find_capacity
from cachemark.spec import Workload
from mm1_server import MM1Process, fine_timer_slack, realtime

S = 0.0005
MU = 1 / S
BUDGETS_MS = (9.0, 12.5)
TOLERANCE = 0.10
SERVER_FIDELITY = 0.05  # the server's replies against its own schedule, at p99
FIDELITY = 0.15  # a step's p99 against the server's record of the same requests (1–8 % on a quiet machine)
CLIENT_PRIORITY = 10  # SCHED_FIFO for the search when allowed; the server runs at 20


def _search(server: MM1Process, budget_s: float) -> tuple[CapacityResult, list[tuple[float, ...]]]:
    """``find_capacity`` against the server from a thread under SCHED_FIFO (the engine's threads inherit
    it), as ``decide`` calls it; the server's record is read after every step, so each step's p99 can be
    held to what the server itself did to the same requests: (offered rate, client p99, the server's p99 as
    it replied, and as its schedule says)."""
    paired: list[tuple[float, ...]] = []

    def progress(p: CapacityProgress) -> None:
        if p.point is None:
            server.reset()  # the step's requests (its warm-up too) are the next record
        elif p.point.p99_s["get"] is not None:
            stats = server.stats("GET")
            served, scheduled = np.percentile([stats.measured_ns, stats.virtual_ns], 99, axis=1) / 1e9
            paired.append((p.point.rate, p.point.p99_s["get"], served, scheduled))

    found: dict[str, CapacityResult] = {}

    def search() -> None:
        realtime(CLIENT_PRIORITY)
        fine_timer_slack()
        found["result"] = find_capacity(f"redis://127.0.0.1:{server.port}?client=engine", {"get": budget_s},
                                        Workload(mix={"get": 100}, keys=100, prefill=False), progress=progress)

    thread = threading.Thread(target=search)  # its own thread: SCHED_FIFO must not stay on pytest's
    thread.start()
    thread.join()
    return found["result"], paired


@pytest.mark.alone
@pytest.mark.timeout(150)
def test_capacity_finds_mm1_rate_within_budget():
    found = []
    with MM1Process(S, seed=42) as server:
        for budget_ms in BUDGETS_MS:
            result, paired = _search(server, budget_ms / 1000)
            late = [(rate, served / scheduled - 1) for rate, _, served, scheduled in paired
                    if served > scheduled * (1 + SERVER_FIDELITY)]
            if late:
                pytest.skip(f"machine too busy for a latency ground truth: at {late[0][0]:,.0f}/s the M/M/1 server's "
                            f"p99 replies were {late[0][1]:+.0%} off its own schedule")
            off = [(rate, client / served - 1) for rate, client, served, _ in paired
                   if client > served * (1 + FIDELITY)]
            if off:
                pytest.skip(f"machine too busy for a latency ground truth: at {off[0][0]:,.0f}/s the client's p99 was "
                            f"{off[0][1]:+.0%} off the server's record of the same requests")
            expected = MU - math.log(100) / (budget_ms / 1000)
            found.append((budget_ms, expected, result))
            assert result.trusted_path == "engine" and result.tail_trusted
            assert len(result.points) >= 3 and result.low is not None and result.high is not None
            assert result.low < result.high and result.capacity_ops_per_s is not None
    lines = "\n".join(f"budget {b:g} ms: λ* = {e:,.0f}/s, found {r.capacity_ops_per_s:,.0f}/s "
                      f"({r.capacity_ops_per_s / e:.3f}×), bracket {r.low:,.0f}–{r.high:,.0f}, points "
                      f"{[(round(p.rate), round(p.p99_s['get'] * 1e3, 2)) for p in r.points]}"
                      for b, e, r in found)
    print("\n" + lines)
    for budget_ms, expected, result in found:
        assert abs(result.capacity_ops_per_s / expected - 1) <= TOLERANCE, (
            f"budget {budget_ms:g} ms: found {result.capacity_ops_per_s:,.0f}/s, M/M/1 says μ − ln 100 ÷ B = "
            f"{expected:,.0f}/s\n" + lines)
    # a looser budget allows more load: the two searches agree with each other too
    assert found[1][2].capacity_ops_per_s > found[0][2].capacity_ops_per_s, lines


def test_capacity_through_the_cli(cachemark, tmp_path):
    """The command as a user runs it: progress with the time left, the table, the load path it trusts, the JSON."""
    out = tmp_path / "cap.json"
    result = cachemark("capacity", "-t", "spawn:redis?client=engine", "--p99", "get=50ms", "--keys", "100",
                       "--max-steps", "2", "--min-samples", "200", "-o", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "left" in result.stderr and "Capacity within budget: redis(engine)" in result.stdout
    assert "load path: engine (trusted)" in result.stdout
    document = json.loads(out.read_text())
    target = document["targets"][0]
    assert list(document["capacity_ops_per_s"]) == ["redis(engine)"]
    assert target["tail_trusted"] is True and len(target["points"]) == 2
    assert all(p["p99_ms"]["get"] > 0 and p["samples"]["get"] > 0 for p in target["points"])


def test_capacity_refuses_bad_budgets(cachemark, tmp_path):
    for args, expected in ((["--p99", "get=fast"], "duration"), (["--p99", "teleport=1ms"], "unknown op"),
                           (["--p99", "set=1ms", "--mix", "get=100"], "never runs set")):
        result = cachemark("capacity", "-t", "memory://", *args, cwd=tmp_path)
        assert result.returncode == 2, result.stdout + result.stderr
        assert expected in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_python_path_says_its_tail_is_not_trusted(cachemark, tmp_path):
    """Any load path runs the search (here the Python workers, the default client); its figure is
    a lower bound and the output says so."""
    redis = pytest.importorskip("redis")
    del redis
    out = tmp_path / "cap.json"
    result = cachemark("capacity", "-t", "spawn:redis", "--p99", "get=50ms", "--keys", "100", "--max-steps", "2",
                       "--min-samples", "200", "-o", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    target = json.loads(out.read_text())["targets"][0]
    assert target["load_path"] == "python" and target["tail_trusted"] is False
    assert "lower bound" in target["load_path_note"] and "NOT trusted for tails" in result.stdout
    assert len(target["points"]) == 2 and target["closed_loop_ops_per_s"] > 0


def test_p99_falling_as_the_rate_rises_is_noise_only_across_rates_apart() -> None:
    """The warning that puts a caution under decide's answer: p99 1.5× lower at a rate ≥ 10 % higher.
    Next to the knee, steps a few % apart differ more than that by themselves (the bracket is then the
    answer): no warning."""
    from cachemark.analysis.capacity import CapacityPoint

    def result(*steps: tuple[float, float]) -> CapacityResult:
        points = [CapacityPoint(rate, rate, {"get": p99}, {"get": p99}, {"get": 5000}, p99 <= 0.002, "", 1.0,
                                p99 / 0.002) for rate, p99 in steps]
        return CapacityResult("memcached", "spawn:memcached", {"get": 0.002}, 120_000.0, 110_000.0, 122_813.0,
                              150_000.0, points, "engine", True, "", 10.0)

    knee = result((110_000, 0.0015), (122_813, 0.0082), (126_534, 0.00203))
    assert knee.warnings == []
    stalled = result((7_983, 0.00864), (63_866, 0.0043), (127_732, 0.0156))
    (line,) = stalled.warnings
    assert line.startswith("p99 fell as the rate rose (get p99 8.64 ms at 7,983 ops/s, get p99 4.3 ms at 63,866)")
