"""Ground truth for open-loop latency: cachemark against an M/M/1 server (docs/validation.md).

The server (tests/mm1_server.py) has one FIFO queue and exponential service times of mean S.
Fed Poisson arrivals at ρ = λS = 0.8, its response time is exponential with mean S/(1−ρ) = 5S:
p50 = 3.47·S, p99 = 23.0·S, p99.9 = 34.5·S. A coordinated-omission corrected open-loop
measurement must report that; a closed-loop one (no --rate) reports ~0.69·S at one connection.

Each run is held to three references, each with its own kind of error:

- **the server's record of the same requests** (arrival stamp → reply sent): no sampling
  noise at all, so this is where a client's fidelity is held to 10 % at p50, p99 and p99.9;
- **the M/M/1 formula** at the run's own ρ and S: one run is a finite sample of an
  autocorrelated process (relaxation time ≈ 90·S at ρ = 0.8), so a 10–20-s run estimates p99.9
  only to about ±20 %. The band a correct run stays in is simulated for the run's length
  (:func:`sampling_band`) and the run must fall inside it;
- **the arrivals the server saw**: a Poisson process at the requested rate (exponential
  gaps: coefficient of variation 1).

A machine so busy that the server missed its own schedule cannot give a ground truth: such
runs skip and say how late the server was. The server and the client under test run under
SCHED_FIFO when allowed (root), the server above the client, so other tenants of the machine
rarely get in the way.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from cachemark.engine import run_load, target_config
from cachemark.errors import SpecError
from mm1_server import MM1Process, ServerStats, fine_timer_slack, realtime, sleep_until

pytestmark = [pytest.mark.timeout(120), pytest.mark.alone]  # timed: runs alone (conftest.py)

RHO = 0.8
S = 0.003  # cachemark runs: the transport's ~0.1–0.3 ms stays a few % of p50 (3.47·S)
# The engine is held to the server's record of the same requests (no sampling noise: 10 s do as well
# as 20) and to the formula within the band simulated for its own length: ~2,700 GETs suffice.
ENGINE_DURATION = "10s"
# The Python workers' bounds (PYTHON_BOUNDS) were simulated for ~5,300 requests: their run stays 20 s.
PYTHON_DURATION = "20s"
CLOSED_DURATION = "1s"  # ~330 GETs: p50 ≈ 0.7·S ± 0.06·S against the 1.7·S the check allows
S_ALONE = 0.002  # the server alone, fed by the test's own client (8 s: ~3,200 requests)
ALONE_DURATION = 8.0
QUANTILES = (50.0, 99.0, 99.9)
NAMES = ("p50", "p99", "p99.9")
FIDELITY = 0.10  # a client against the server's record of the same requests
SERVER_FIDELITY = 0.05  # the server's replies against its own schedule; worse means the machine was too busy
COVERAGE = 0.995  # of the sampling band
CLIENT_PRIORITY = 10  # SCHED_FIFO for the client under test when allowed; the server runs at 20
PYTHON_WORKERS = 16
# Corrected ÷ formula for 16 blocking clients at ρ = 0.8 over ~5,300 requests: the central 99.5 % of
# 400 simulated runs (p50 0.79–1.27, p99 0.73–2.59, p99.9 0.65–2.79; docs/validation.md), widened
# for redis-py's own time per op and 16 processes' scheduling on a shared 2-core machine.
PYTHON_BOUNDS = {"p50": (0.75, 1.35), "p99": (0.65, 3.0), "p99.9": (0.6, 3.5)}
# redis-py's own time per op (~0.2·S at p50, more when the machine is busy) is in its figure; p99.9 of ~5,300
# ops is the 6th-slowest, so a few workers descheduled for a few ms (16 processes on 2 cores) move it: +19 %
# in one CI run whose p50 and p99 were +6 % and +3 %.
PYTHON_FIDELITY = np.array([0.15, 0.15, 0.35])


def analytic(service_s: float, rho: float) -> np.ndarray:
    """M/M/1 response-time quantiles: exponential with mean S/(1−ρ)."""
    return np.array([-math.log(1 - q / 100) for q in QUANTILES]) * service_s / (1 - rho)


def sampling_band(n: int, rho: float, coverage: float = COVERAGE, reps: int = 2000) -> np.ndarray:
    """[low, high] of (sample percentile ÷ the formula at the sample's own ρ and S) over
    simulated M/M/1 runs of ``n`` requests: where a correct run of this length falls."""
    rng = np.random.default_rng(0)
    ratios = np.empty((reps, len(QUANTILES)))
    for i in range(reps):
        arrival = np.cumsum(rng.exponential(1 / rho, n))
        service = rng.exponential(1.0, n)
        work = np.cumsum(service)
        done = work + np.maximum.accumulate(arrival - (work - service))  # Lindley, vectorised
        rho_seen = service.sum() / (done[-1] - arrival[0])
        ratios[i] = np.percentile(done - arrival, QUANTILES) / analytic(service.mean(), rho_seen)
    tail = (1 - coverage) / 2 * 100
    return np.percentile(ratios, [tail, 100 - tail], axis=0)


def percentiles(values_ns: np.ndarray) -> np.ndarray:
    return np.percentile(values_ns, QUANTILES) / 1e9


def table(unit_s: float, **rows: np.ndarray) -> str:
    """Rows of p50/p99/p99.9 in units of S, for assertion messages."""
    lines = [f"{'(× S)':<22}" + "".join(f"{n:>8}" for n in NAMES)]
    lines += [f"{k:<22}" + "".join(f"{v / unit_s:8.2f}" for v in vals) for k, vals in rows.items()]
    return "\n" + "\n".join(lines)


class Judge:
    """One run's references (see the module docstring) and the checks against them."""

    def __init__(self, stats: ServerStats, service_s: float, rate: float, who: str) -> None:
        self.stats, self.service_s, self.rate, self.who = stats, service_s, rate, who
        self.nominal = analytic(service_s, RHO)
        self.formula = analytic(stats.mean_service_s, stats.utilisation)  # at this run's own ρ and S
        self.virtual = percentiles(stats.virtual_ns)
        self.served = percentiles(stats.measured_ns)
        self.band = sampling_band(stats.served, RHO)
        self.rows: dict[str, np.ndarray] = {
            "M/M/1 at ρ=0.8": self.nominal, f"M/M/1 at ρ={stats.utilisation:.3f}": self.formula,
            "server: schedule": self.virtual, "server: replies sent": self.served}

    def message(self) -> str:
        return table(self.service_s, **self.rows) + (
            f"\n{self.stats.served:,} GETs, S = {self.service_s * 1e3:g} ms, sampling band "
            f"{' '.join(f'{lo:.2f}–{hi:.2f}' for lo, hi in self.band.T)} × formula")

    def require_faithful_server(self) -> None:
        """Skip when the server could not keep its own schedule: there is no truth to compare with."""
        drift = self.served / self.virtual - 1
        if np.any(drift > SERVER_FIDELITY):
            late = np.percentile(self.stats.late_ns, 99) / 1e6
            pytest.skip(f"machine too busy for a latency ground truth: the M/M/1 server's replies left up to "
                        f"{drift.max():+.0%} off its schedule (p99 {late:.1f} ms late; realtime="
                        f"{self.stats.realtime})")

    def check_rate(self) -> None:
        assert abs(self.stats.arrival_rate / self.rate - 1) < 0.05, (
            f"{self.who}: the server saw {self.stats.arrival_rate:.0f} GET/s, {self.rate:.0f}/s were asked for")

    def check_poisson_arrivals(self) -> None:
        self.check_rate()
        stats = self.stats
        assert 0.9 < stats.interarrival_cv < 1.15, (
            f"{self.who}: the gaps between arrivals at the server have a coefficient of variation of "
            f"{stats.interarrival_cv:.2f}; a Poisson process has 1 (0: evenly spaced, above 1: bursts)")

    def check_formula(self, measured: np.ndarray, label: str) -> None:
        """``measured`` p50/p99/p99.9 (s) within the sampling band around the formula."""
        self.rows[label] = measured
        ratio = measured / self.formula
        for i, name in enumerate(NAMES):
            low, high = self.band[:, i]
            assert low <= ratio[i] <= high, (
                f"{self.who}: {label} {name} is {ratio[i]:.2f}× the M/M/1 formula, outside the "
                f"{COVERAGE:.1%} band of a correct run this long ({low:.2f}–{high:.2f})" + self.message())

    def check_paired(self, client: np.ndarray, label: str, tolerance: float | np.ndarray = FIDELITY) -> None:
        """The client against the server's record of the same requests: no sampling noise.
        ``tolerance`` is one bound or one per percentile."""
        error = client / self.served - 1
        worst = int(np.argmax(np.abs(error) / tolerance))
        assert np.all(np.abs(error) <= tolerance), (
            f"{self.who}: {label} {NAMES[worst]} is {error[worst]:+.0%} off the server's record of the "
            f"same requests" + self.message())


@pytest.fixture
def mm1():
    server = MM1Process(S, seed=12).start()
    yield server
    server.stop()


# --- the server alone ------------------------------------------------------------------------

def poisson_client(port: int, rate: float, duration: float, connections: int = 8, seed: int = 3) -> np.ndarray:
    """A minimal open-loop client: one thread sends on a Poisson schedule over ``connections``
    and never waits for a reply (so it cannot fall behind the way a blocking client does).
    Replies (5 bytes each) stay unread in the socket buffers: no second thread means nothing to
    contend with for the GIL. Returns each send's lag behind its schedule (ns)."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    for sock in socks:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lag: list[int] = []

    def send() -> None:
        realtime(CLIENT_PRIORITY)
        fine_timer_slack()
        gaps = np.random.default_rng(seed).exponential(1e9 / rate, int(rate * duration * 1.2) + 100)
        request = b"*2\r\n$3\r\nGET\r\n$7\r\nmissing\r\n"
        intended = time.perf_counter_ns() + 10_000_000
        end = intended + int(duration * 1e9)
        for i, gap in enumerate(gaps.astype(np.int64).tolist()):
            if intended >= end:
                return
            sleep_until(intended)
            lag.append(time.perf_counter_ns() - intended)
            socks[i % connections].send(request)
            intended += gap

    sender = threading.Thread(target=send)  # its own thread: SCHED_FIFO must not stay on pytest's
    sender.start()
    sender.join()
    time.sleep(0.3)  # the queue drains
    for sock in socks:
        sock.close()
    return np.array(lag)


def test_server_alone_is_mm1():
    """The server's own record, fed by a client that cannot fall behind (it never waits for a
    reply), is M/M/1: replies on schedule, Poisson arrivals, ρ and quantiles as the formula says."""
    rate = RHO / S_ALONE
    with MM1Process(S_ALONE, seed=5) as server:
        lag = poisson_client(server.port, rate, duration=ALONE_DURATION)
        stats = server.stats("GET")
    judge = Judge(stats, S_ALONE, rate, "the server alone")
    judge.require_faithful_server()
    if np.percentile(lag, 99) > S_ALONE * 1e9:  # later than ~the mean gap, its arrivals are not Poisson
        pytest.skip(f"machine too busy: the test's Poisson sender ran {np.percentile(lag, 99) / 1e6:.1f} ms late")
    judge.check_poisson_arrivals()
    assert abs(stats.utilisation - RHO) < 0.03, f"server utilisation {stats.utilisation:.3f}, asked for {RHO}"
    judge.check_formula(judge.served, "server: replies sent")
    print(judge.message())  # pytest -s shows the numbers


# --- cachemark: the engine and the Python workers --------------------------------------------

def _client_priority() -> None:
    realtime(CLIENT_PRIORITY)  # in the child before exec: cachemark and its workers inherit it


def run_cachemark(tmp_path: Path, target: str, *extra: str, duration: str) -> dict[str, np.ndarray]:
    """``cachemark run`` as a user runs it — GET only and no prefill, so every GET the server sees
    is a timed one. Returns p50/p99/p99.9 (s) from the results file: ``corrected`` (from each
    op's intended start) and, in open loop, ``uncorrected`` (from its actual send)."""
    out = tmp_path / f"r{time.monotonic_ns()}.json"
    args = ["run", "-t", target, "--duration", duration, "--warmup", "0", "--no-calibrate",
            "--mix", "get=100", "--keys", "100", "--no-prefill", "-o", str(out), *extra]
    result = subprocess.run([sys.executable, "-m", "cachemark", *args], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
                            preexec_fn=_client_priority)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    op = json.loads(out.read_text())["runs"][0]["phases"][0]["ops"]["get"]
    return {name: np.array([summary["p50_us"], summary["p99_us"], summary["p999_us"]]) / 1e6
            for name, summary in (("corrected", op["summary"]), ("uncorrected", op.get("summary_uncorrected")))
            if summary}


def open_loop(mm1: MM1Process, tmp_path: Path, target: str, *extra: str, who: str,
              duration: str) -> tuple[dict, Judge]:
    """One open-loop cachemark run at ρ = 0.8 with Poisson arrivals, and its judge."""
    mm1.reset()
    rate = RHO / S
    client = run_cachemark(tmp_path, target, "--rate", f"{rate:g}", "--arrival", "poisson", *extra,
                           duration=duration)
    judge = Judge(mm1.stats("GET"), S, rate, who)
    judge.rows["cachemark, corrected"] = client["corrected"]
    judge.rows["cachemark, uncorrected"] = client["uncorrected"]
    judge.require_faithful_server()
    return client, judge


def check_closed_loop(mm1: MM1Process, tmp_path: Path, target: str, *extra: str, open_p: np.ndarray,
                      who: str) -> None:
    """Closed loop at one connection never queues behind anyone: p50 ≈ ln 2·S, far below M/M/1's."""
    mm1.reset()
    closed = run_cachemark(tmp_path, target, *extra, duration=CLOSED_DURATION)["corrected"]
    nominal = analytic(S, RHO)
    message = table(S, **{"M/M/1 at ρ=0.8": nominal, "open loop": open_p, "closed loop": closed})
    assert closed[0] < 0.5 * nominal[0], f"{who}: a closed loop must not look like M/M/1 at ρ=0.8" + message
    assert closed[0] < 0.5 * open_p[0], message
    print(message)


def engine_refuses_poisson(port: int) -> str | None:
    """Why the engine cannot run Poisson arrivals, or None when it can."""
    config = target_config(f"redis://127.0.0.1:{port}") | {
        "mode": "open", "rate": 100.0, "arrival": "poisson", "duration_s": 0.05, "prefill": False,
        "connections": 1, "keys": {"count": 1, "prefix": "cm:probe:"}}
    try:
        run_load(config)
    except SpecError as exc:
        if "arrival" in str(exc):
            return f"the engine does not take arrival=poisson yet: {str(exc)[:100]}"
        raise
    return None


def test_engine_open_loop_matches_mm1(mm1, tmp_path):
    """The engine at 8 connections × pipeline 64: no request ever waits for its connection, so
    the server sees the Poisson schedule itself and the corrected latency is the truth."""
    reason = engine_refuses_poisson(mm1.port)
    if reason:
        pytest.skip(reason)
    url = f"redis://127.0.0.1:{mm1.port}?client=engine"
    client, judge = open_loop(mm1, tmp_path, f"{url}&connections=8&pipeline=64", who="engine, open loop",
                              duration=ENGINE_DURATION)
    judge.check_poisson_arrivals()
    judge.check_paired(client["corrected"], "corrected")
    judge.check_paired(client["uncorrected"], "uncorrected")
    judge.check_formula(client["corrected"], "cachemark, corrected")
    print(judge.message())
    check_closed_loop(mm1, tmp_path, f"{url}&connections=1", open_p=client["corrected"], who="engine")


def test_python_open_loop_within_blocking_bounds(mm1, tmp_path):
    """The Python path (redis-py, 16 worker processes) cannot match M/M/1 within 10 %, and why.

    Each worker is a blocking client with one request in flight, so an op that falls due while its
    worker still waits for a reply is sent late. cachemark counts that wait (latency runs from the
    intended start), but the system is no longer open: the op queues at the client while other
    workers' ops overtake it at the server. Measured at S = 3 ms (docs/validation.md): each request
    is timed faithfully (the uncorrected figures match the server's record), yet the corrected p50,
    p99 and p99.9 are 1.16–1.32×, 1.7–3.0× and 1.9–4.8× the server's record, and 0.9–1.2×, 1.0–2.2×
    and 1.1–2.8× the M/M/1 formula. Asserted is what is true: requests are timed faithfully,
    nothing is under-reported, the wait for a worker is counted, and the corrected figures stay in
    the band that 16 blocking clients produce (simulated)."""
    client, judge = open_loop(mm1, tmp_path, f"redis://127.0.0.1:{mm1.port}",
                              "--workers", str(PYTHON_WORKERS), who="Python workers, open loop",
                              duration=PYTHON_DURATION)
    judge.check_rate()
    judge.check_paired(client["uncorrected"], "uncorrected", PYTHON_FIDELITY)
    corrected, uncorrected = client["corrected"], client["uncorrected"]
    assert np.all(corrected >= 0.97 * judge.served), (
        "Python workers: the corrected latency is below what the server itself recorded" + judge.message())
    # 16 blocking clients: the ops that waited for their worker make the corrected p99 1.4–3.1× the
    # uncorrected one (simulated). Equal figures would mean the wait is not counted — or that the
    # workers no longer block, and this test should then hold them to the engine's checks.
    assert corrected[1] >= 1.2 * uncorrected[1], (
        "Python workers: corrected p99 ≈ uncorrected p99 — the time ops waited for their worker is "
        "not counted (or the workers no longer block)" + judge.message())
    ratio = corrected / judge.formula
    for i, name in enumerate(NAMES):
        low, high = PYTHON_BOUNDS[name]
        assert low <= ratio[i] <= high, (
            f"Python workers: corrected {name} is {ratio[i]:.2f}× the M/M/1 formula, outside what "
            f"{PYTHON_WORKERS} blocking clients produce ({low}–{high}×)" + judge.message())
    print(judge.message())
    check_closed_loop(mm1, tmp_path, f"redis://127.0.0.1:{mm1.port}", "--workers", "1",
                      open_p=corrected, who="Python workers")
