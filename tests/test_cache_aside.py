"""Cache-aside with an origin: the ``fetch`` op (get → origin on a miss → set), its origin
recorded apart as the pseudo-op ``origin``, a pool shared by every worker, and the origin specs.

Real runs only (worker processes, a real PostgreSQL for the SQL origin); the cache is
``memory://?max_entries=800`` over 1,000 uniform keys, an LRU that holds 80 % of them.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from cachemark.errors import SpecError, UnsupportedOp
from cachemark.measure.histogram import Histogram
from cachemark.measure.summary import OpRecord
from cachemark.results import as_model
from cachemark.run.engine_runner import engine_mix
from cachemark.run.runner import run_target
from cachemark.run.worker import Worker, WorkerTask
from cachemark.spec import Workload, build_experiment
from cachemark.target import parse_target

# The tests that assert a latency, a rate or a wait are marked serial: away from the parallel load (conftest.py).
# Counts, refusals and the pool's order (a lower bound on a wait) hold under any load.


def _mean(op: OpRecord, outcome: str) -> float:
    return Histogram.decode(op.histograms[outcome]).mean


@pytest.mark.serial
def test_fetch_mean_is_the_cache_aside_model_of_its_own_parts():
    workload = Workload(keys=1000, key_dist="uniform", value_size="100", mix="fetch=90,get=5,set=5",
                        origin="fixed:10ms", duration="3s", warmup="0.5s", workers=2)
    outcome = run_target("memory://?max_entries=800", workload, sample_server=False)
    assert outcome.status == "ok", outcome.reason
    ops = outcome.phases[0].ops
    fetch, origin, get, set_ = ops["fetch"], ops["origin"], ops["get"], ops["set"]
    assert not fetch.errors and not origin.errors
    hit_ratio = fetch.hits / (fetch.hits + fetch.misses)
    assert 0.75 <= hit_ratio <= 0.85  # an LRU of 800 entries over 1,000 uniform keys
    # every miss called the origin once; nothing else did
    assert origin.count == fetch.misses
    # a 10-ms sleep's median: 10.1-10.2 ms beside a busy loop at load 6, 11.9 ms at load 12 (it was held to
    # 11 ms: failed). A sleep wakes late, never early: the floor stays 9 ms, the ceiling 13 ms (2.5x the
    # overshoot at load 6, 1.6x at load 12); a wrong latency model is off by far more
    assert 9e6 <= Histogram.decode(origin.histograms["ok"]).percentile(50) <= 13e6
    predicted = hit_ratio * _mean(fetch, "hit") + (1 - hit_ratio) * (
        _mean(get, "miss") + _mean(origin, "ok") + _mean(set_, "ok"))
    measured = fetch.summary.mean_us * 1000
    # 0.3-0.6 % apart beside a busy loop at load 6 against 5 % (9x): a preemption lands in a part's time
    # and the fetch's alike, so load moves both sides
    assert abs(measured - predicted) / predicted < 0.05, (measured, predicted)
    # the origin's queries per second: its count over the phase's wall time
    assert origin.summary.ops_per_s == pytest.approx(origin.count / outcome.phases[0].wall_s)
    # the per-second series counts the load's ops only, not the origin's calls inside them
    series_ops = sum(s["ops"] for s in outcome.phases[0].timeseries)
    assert series_ops == fetch.count + get.count + set_.count


@pytest.mark.serial
def test_a_pool_of_one_caps_the_origin_for_all_workers_and_every_report_shows_it(cachemark, tmp_path: Path):
    result = cachemark(
        "run", "-t", "memory://?max_entries=1", "--keys", "100000", "--key-dist", "uniform", "--no-prefill",
        "--mix", "fetch=100", "--origin", "fixed:10ms?pool=1", "--workers", "4", "--duration", "2s",
        "--warmup", "0", "--no-calibrate", "-o", "report.md", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    table = result.stdout
    assert re.search(r"│ origin +│", table) and re.search(r"│ origin_wait +│", table)
    assert "| origin |" in (tmp_path / "report.md").read_text()
    saved = re.search(r"results: (\S+)", table).group(1)
    phase = json.loads((tmp_path / saved).read_text())["runs"][0]["phases"][0]
    origin, fetch = phase["ops"]["origin"], phase["ops"]["fetch"]
    assert origin["count"] == fetch["misses"] == phase["ops"]["origin_wait"]["count"]
    # 1 slot × 10 ms caps the origin at 100 calls/s, which load cannot raise (4 uncapped workers: ~400/s).
    # The hand-over between processes costs a little, more on a busy machine: 77-89/s beside a busy loop
    # at load 6 on 2 cores, so the floor is 40 (1.9x below; it was 60, 1.3x) — it only has to tell a
    # pool that hands its slot on from one that loses it (~0/s)
    assert 40 <= origin["count"] / phase["wall_s"] <= 105
    # 4 workers queue for the one slot, served in turn: each waits about 3 origin calls (with a bare
    # semaphore a worker that released the slot took it straight back on a busy machine: p50 4.6 µs).
    # A floor on a wait: 32-34 ms observed at load 6 against 15 ms (2.1x), and load only lengthens it
    assert Histogram.decode(phase["ops"]["origin_wait"]["histograms"]["ok"]).percentile(50) > 15e6
    assert not [name for name in os.listdir("/dev/shm") if "cm-pool-" in name]  # the queue and its semaphores


def _wait_until_queued(pool, waiters: int) -> None:
    """Until ``waiters`` processes wait in ``pool``'s shared queue (its head and tail): a fixed sleep
    was a guess a busy host could outlast."""
    deadline = time.monotonic() + 20
    while pool.state[2] - pool.state[1] < waiters:
        assert time.monotonic() < deadline, "the other worker never queued"
        time.sleep(0.005)


def _hold_once(key: str, hold_s: float, got) -> None:
    from cachemark.workload.origin import SharedPool

    pool = SharedPool(key, 1)
    pool.acquire()
    got.set()
    time.sleep(hold_s)
    pool.release()
    pool.unlink()


def test_a_released_slot_goes_to_the_waiter_not_back_to_the_releaser():
    """The pool serves waiters in turn: a worker that releases the slot and asks again at once queues
    behind the worker already waiting (a bare semaphore let it take the slot straight back)."""
    import multiprocessing

    from cachemark.workload.origin import SharedPool

    key = f"test-fifo-{os.getpid()}-{time.monotonic_ns()}"
    mine = SharedPool(key, 1)
    mine.acquire()
    ctx = multiprocessing.get_context("fork")
    got = ctx.Event()
    other = ctx.Process(target=_hold_once, args=(key, 0.2, got), daemon=True)
    other.start()
    try:
        _wait_until_queued(mine, 1)
        assert not got.is_set()
        # the clock starts before the release: the other worker's whole 0.2-s hold then lies inside the
        # wait, however late this process runs again (started after the release, a 50-ms preemption in
        # between could take 50 ms off it). Observed 0.200 s, beside a busy loop too; taking the slot
        # straight back (the bug) waits microseconds. Load only lengthens the wait.
        t0 = time.monotonic()
        mine.release()
        mine.acquire()  # behind the other worker's 0.2 s hold
        waited = time.monotonic() - t0
        mine.release()
        assert got.is_set() and waited >= 0.15, f"took the slot back after {waited * 1e3:.1f} ms"
    finally:
        other.join(10)
        mine.unlink()
    assert other.exitcode == 0
    assert not [name for name in os.listdir("/dev/shm") if "cm-pool-" in name]


@pytest.mark.serial
def test_a_worker_killed_while_waiting_loses_no_slot_and_leaves_no_name():
    """SIGKILLed in the queue: a release skips it (the slot is not handed to the dead), and what it could
    not remove itself, its wake semaphore, goes with the run's pool once the workers are gone."""
    import multiprocessing
    import signal

    from cachemark.workload.origin import SharedPool, remove_pool

    key = f"test-killed-{os.getpid()}-{time.monotonic_ns()}"
    mine = SharedPool(key, 1)
    mine.acquire()
    ctx = multiprocessing.get_context("fork")
    other = ctx.Process(target=_hold_once, args=(key, 0, ctx.Event()), daemon=True)
    other.start()
    try:
        _wait_until_queued(mine, 1)
        os.kill(other.pid, signal.SIGKILL)
        other.join(10)
        mine.release()  # to nobody: the only waiter is dead
        t0 = time.monotonic()
        mine.acquire()
        # a free slot is taken in microseconds; one handed to the dead waiter blocks this acquire for good
        # (the test's timeout), so the bound only stands between those two: 2 s, no preemption reaches it
        assert time.monotonic() - t0 < 2, "the slot went to the dead waiter"
        mine.release()
    finally:
        mine.unlink()
    left = [name for name in os.listdir("/dev/shm") if "cm-pool-" in name]
    assert left == [f"sem.{mine.names.stem}-w{other.pid}"], left  # only the dead worker's
    remove_pool(key)
    assert not [name for name in os.listdir("/dev/shm") if "cm-pool-" in name]


@pytest.mark.serial
def test_sql_origin_runs_a_real_query(postgres_server, cachemark, tmp_path: Path):
    origin = f"{postgres_server.url()}?query=SELECT pg_sleep(0.005)&pool=2"
    workload = Workload(keys=1000, key_dist="uniform", value_size="100", mix="fetch=100", origin=origin,
                        duration="1s", warmup="0", workers=2, prefill=False)
    outcome = run_target("memory://?max_entries=100", workload, sample_server=False)
    assert outcome.status == "ok", outcome.reason
    ops = outcome.phases[0].ops
    assert not ops["origin"].errors and ops["origin"].count == ops["fetch"].misses > 50
    # a 5-ms SQL sleep's median round trip: 5.3-6.0 ms beside a busy loop at load 6-7 (4 ms of overshoot
    # allowed, 4x); the floor is the sleep itself
    assert 5e6 <= Histogram.decode(ops["origin"].histograms["ok"]).percentile(50) <= 9e6


@pytest.mark.serial
def test_a_spawned_postgresql_origin_is_started_for_the_run_and_queried():
    """spawn:postgresql?query=… starts a private server, the workers query it, and it is gone afterwards."""
    import psutil

    def postgres_processes() -> set[int]:
        # the servers this process started (the run's, and the worker's shared one): each postmaster is our
        # child. Not every postgres process on the host: the other workers' servers, and the connections and
        # autovacuum workers each forks and ends, come and go beside this test
        return {p.pid for p in psutil.process_iter(["name", "ppid"])
                if p.info["ppid"] == os.getpid() and (p.info["name"] or "").startswith("postgres")}

    before = postgres_processes()
    workload = Workload(keys=1000, key_dist="uniform", value_size="100", mix="fetch=100", warmup="0", workers=2,
                        origin="spawn:postgresql?query=SELECT pg_sleep(0.003)&pool=2", ops=400, prefill=False)
    outcome = run_target("memory://?max_entries=100", workload, sample_server=False)
    assert outcome.status == "ok", outcome.reason
    ops = outcome.phases[0].ops
    assert not ops["origin"].errors and ops["origin"].count == ops["fetch"].misses > 50
    # pg_sleep(3 ms): 4.3-5.5 ms beside a busy loop at load 6-7 (1.6x below the 9-ms ceiling)
    assert 3e6 <= Histogram.decode(ops["origin"].histograms["ok"]).percentile(50) <= 9e6
    assert postgres_processes() == before


@pytest.mark.serial
def test_a_failing_origin_fails_the_fetches_and_stops_the_run(postgres_server):
    origin = f"{postgres_server.url()}?query=SELECT * FROM no_such_table"
    workload = Workload(keys=100_000, key_dist="uniform", value_size="100", mix="fetch=100", origin=origin,
                        duration="20s", warmup="0", workers=2, prefill=False, error_grace="1s")
    outcome = run_target("memory://?max_entries=1", workload, sample_server=False)
    phase = outcome.phases[0].to_json()  # as saved
    fetch, origin_op = phase["ops"]["fetch"], phase["ops"]["origin"]
    # each failed origin call is one error on the origin and one on its fetch; the on-error policy still
    # sees only failures (origin records are not counted as the load's ops) and stops the run
    # stopped after the 1-s grace of failures, not at the 20-s deadline: ~1-2 s against 10 (5x)
    assert outcome.status == "failed" and phase["wall_s"] < 10
    assert sum(fetch["errors"].values()) == sum(origin_op["errors"].values()) == fetch["count"] > 0


@pytest.mark.serial
def test_mysql_origin_runs_a_real_query(mysql_server):
    origin = f"{mysql_server.url()}?query=SELECT SLEEP(0.005)"
    workload = Workload(keys=1000, key_dist="uniform", value_size="100", mix="fetch=100", origin=origin,
                        duration="1s", warmup="0", workers=2, prefill=False)
    outcome = run_target("memory://?max_entries=100", workload, sample_server=False)
    assert outcome.status == "ok", outcome.reason
    ops = outcome.phases[0].ops
    assert not ops["origin"].errors and ops["origin"].count == ops["fetch"].misses > 50
    # a 5-ms SQL sleep's median round trip: 5.3-6.0 ms beside a busy loop at load 6-7 (4 ms of overshoot
    # allowed, 4x); the floor is the sleep itself
    assert 5e6 <= Histogram.decode(ops["origin"].histograms["ok"]).percentile(50) <= 9e6


def _origin_p50(origin: str) -> float:
    workload = Workload(keys=100_000, key_dist="uniform", value_size="100", mix="fetch=100", origin=origin,
                        prefill=False, workers=1)
    worker = Worker(WorkerTask(parse_target("memory://?max_entries=1"), "cmt:origin:", workload.model_dump(), 0, 1))
    worker.backend.open()
    result = worker.run_phase(workload.effective_phases()[0], 100, None).result()
    worker.origin.close()
    assert result["origin"].count == result["fetch"].misses == 100
    return Histogram.decode(result["origin"].histograms["ok"]).percentile(50)


@pytest.mark.alone
def test_latency_models_lognormal_and_a_replayed_histogram(tmp_path: Path):
    """The median of 100 simulated origin calls: each is a sleep, timed. A floor on a sleep holds under any
    load; its ceiling does not (a sleep wakes late on a busy host), so the test times a latency and runs
    alone: lognormal 4.1-4.2 ms and hist 2.1 ms quiet; beside the serial pass at load 7-9 they reached 6.5
    and 2.5 ms (the lognormal's ceiling was 5 ms: it failed). Ceilings 6 and 3 ms: 1.4x the quiet figures."""
    assert 3.5e6 <= _origin_p50("lognormal:4ms,0.3") <= 6e6
    hist = tmp_path / "latencies.txt"
    hist.write_text("# µs, one per line\n2000\n2000\n\n2000\n")
    assert 2e6 <= _origin_p50(f"hist:{hist}") <= 3e6


@pytest.mark.parametrize(("origin", "says"), [
    ("fixed:abc", "expected a latency like 10ms"),
    ("lognormal:10ms", "expected lognormal:MEDIAN,SIGMA"),
    ("gauss:1ms", "unknown kind 'gauss'"),
    ("fixed:10ms?pool=0", "pool='0' must be a whole number"),
    ("hist:/nonexistent/lat.txt", "cannot read it"),
    ("postgresql://u:secret@127.0.0.1/db?query=SELECT 1", "PGPASSWORD"),
    ("postgresql://127.0.0.1/db", "needs ?query="),
    ("spawn:redis?query=SELECT 1", "a spawned origin is one of spawn:postgresql"),
    ("spawn:postgresql", "needs ?query="),
])
def test_bad_origin_specs_are_one_line(origin: str, says: str):
    with pytest.raises(SpecError, match=re.escape(says)) as caught:
        build_experiment({"workload": {"mix": "fetch=100", "origin": origin}})
    assert "\n" not in str(caught.value) and "secret" not in str(caught.value)


@pytest.mark.parametrize("args", [
    ["--mix", "fetch=100", "--origin", "fixed:ten"],
    ["--mix", "fetch=100"],  # a fetch needs an origin
    ["--mix", "fetch=100", "--origin", "postgresql://cachemark@127.0.0.1:1/postgres?query=SELECT 1"],  # refused
])
def test_bad_origin_on_the_command_line_exits_2(cachemark, tmp_path: Path, args: list[str]):
    result = cachemark("run", "-t", "memory://", "--no-calibrate", *args, cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "origin" in lines[0] and "Traceback" not in result.stderr


def test_the_engine_refuses_fetch_in_one_line():
    workload = Workload(mix="fetch=100", origin="fixed:1ms")
    with pytest.raises(UnsupportedOp, match="does not run 'fetch'"):
        engine_mix(workload.effective_phases()[0], workload)


def test_origin_calls_are_not_counted_as_ops_of_the_load() -> None:
    from cachemark.report.data import phase_rows
    from cachemark.report.verdict import verdict_blocks

    def run(label: str) -> dict:
        summary = {"p50_us": 5.0, "p99_us": 9.0, "ops_per_s": 50.0}
        return {"label": label, "status": "ok", "backend": {"scheme": "redis"}, "phases": [{
            "name": "main", "wall_s": 2.0, "ops": {
                "fetch": {"count": 100, "hits": 80, "misses": 20, "summary": summary},
                "origin": {"count": 20, "summary": {**summary, "p50_us": 10_000.0}}}}]}

    document = {"experiment": {"workload": {}}, "runs": [run("a"), run("b")]}
    (row, _) = phase_rows(as_model(document))
    assert row.count == 100 and row.ops_per_s == 50.0  # fetches only: an origin call is part of one
    text = "\n".join(line for block in verdict_blocks(as_model(document)) for r in block.rows for line in r)
    assert "origin" not in text  # the origin is nobody's op to rank
