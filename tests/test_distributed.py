"""Distributed runs on real Dask clusters: a LocalCluster of worker processes, and a
``dask scheduler`` with two ``dask worker`` processes started from the command line on
free loopback ports; a real redis from the lab. Loads are small: the machine is shared.

What must hold: the merged histograms are exactly the sum of the agents' (and the counters
add up), an open-loop rate split over agents is delivered, the engine runs under Dask too,
an agent killed mid-run is named with the others' data kept (no hang), and an unreachable
scheduler is one line and exit 2.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachemark.measure.histogram import Histogram
from cachemark.results import as_model
from cachemark.spec import Workload

distributed_mod = pytest.importorskip("distributed")

from cachemark.run import distributed as dist  # noqa: E402

# Tests that time a rate or count what a killed run left in /dev/shm are marked alone, the ones that
# kill or signal a process serial (conftest.py); the exact merges and the command line's refusals are
# correct under any load and run with the rest.

ROOT = Path(__file__).parent.parent
DASK = str(Path(sys.executable).with_name("dask"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[dist.Cluster]:
    cluster = dist.connect("local:2")
    yield cluster
    dist.close(cluster)


@pytest.fixture(scope="module")
def cli_cluster() -> Iterator[tuple[str, list[subprocess.Popen]]]:
    """A scheduler and two workers, each its own `dask` command, as on separate hosts."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                  "--no-dashboard"], **quiet)
    workers = [subprocess.Popen([DASK, "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                                 "--no-dashboard", "--name", f"w{i}"], **quiet) for i in range(2)]
    try:
        client = distributed_mod.Client(address, timeout="30s")
        client.wait_for_workers(2, timeout=60)
        client.close()
        yield address, workers
    finally:
        # the workers first, then the scheduler: a worker whose scheduler went first spends ~8 s
        # trying to reach it before it exits
        for group in (workers, [scheduler]):
            for proc in group:
                proc.send_signal(signal.SIGTERM)
            for proc in group:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _workload(**fields: object) -> Workload:
    base = {"keys": 500, "duration": 1.5, "warmup": 0.2, "workers": 2, "value_size": "100"}
    return Workload.model_validate({**base, **fields})


def _assert_exact_merge(phase: dict) -> None:
    """Every merged (op, outcome) histogram is the sum of the agents' own, bucket by bucket;
    ops, hits and misses add up."""
    agents = phase["agents"]
    assert len(agents) == phase["agents_reported"] >= 2
    for name, op in phase["ops"].items():
        parts = [a["op_results"][name] for a in agents if name in a["op_results"]]
        for field in ("count", "hits", "misses"):
            assert op[field] == sum(p[field] for p in parts), (name, field)
        for outcome, encoded in op["histograms"].items():
            total = Histogram()
            for p in parts:
                if outcome in p["histograms"]:
                    total.add(Histogram.decode(p["histograms"][outcome]))
            assert (Histogram.decode(encoded).counts == total.counts).all(), (name, outcome)
    assert sum(a["ops"] for a in agents) == sum(op["count"] for op in phase["ops"].values())


def test_python_agents_merge_exactly(local_cluster: dist.Cluster, spawn) -> None:
    server = spawn("redis")
    outcome = dist.run_distributed(local_cluster, server.url(), _workload())
    assert outcome.status == "ok", outcome.reason
    (phase,) = outcome.to_json()["phases"]
    _assert_exact_merge(phase)
    assert phase["ops"]["get"]["hits"] > 0  # prefilled once, by the coordinator
    for op in phase["ops"].values():
        assert sum(Histogram.decode(e).total for e in op["histograms"].values()) == op["count"]
    cluster = outcome.to_json()["dask"]
    assert [a["workers"] for a in cluster["agents"]] == [[0, 1], [1, 1]]  # disjoint slices of global workers
    assert all(a["state"] == "done" and a["cpu_s"] > 0 for a in cluster["agents"])
    assert all(abs(a["clock_offset_ms"]) <= a["clock_rtt_ms"] for a in cluster["agents"])
    # a second only the server was sampled in (the phase's last, on a busy host) has no client ops
    client_ops = sum(s.get("ops", 0) for s in phase["timeseries"])
    assert phase["timeseries"] and client_ops == sum(a["ops"] for a in phase["agents"])


@pytest.mark.alone
def test_open_loop_rate_is_split(local_cluster: dist.Cluster, spawn) -> None:
    server = spawn("redis")
    rate, seconds = 400.0, 3.0
    outcome = dist.run_distributed(local_cluster, server.url(), _workload(rate=rate, duration=seconds, workers=4))
    assert outcome.status == "ok", outcome.reason
    (phase,) = outcome.to_json()["phases"]
    done = sum(op["count"] for op in phase["ops"].values())
    # a fixed schedule: 1,200 due, 1,204 done in two runs beside the suite's parallel pass (602 per agent; the
    # 4 are ops due in the last tick); ±60 leaves 5 % of the schedule to a loaded host's missed ops
    assert abs(done - rate * seconds) <= 0.05 * rate * seconds, done
    assert [a["workers"] for a in phase["agents"]] == [[0, 2], [2, 2]]
    assert all(abs(a["ops"] - rate * seconds / 2) <= 0.05 * rate * seconds / 2 for a in phase["agents"])
    _assert_exact_merge(phase)


@pytest.mark.serial
def test_lost_dask_worker_is_named_and_its_agent_stops(local_cluster: dist.Cluster, spawn) -> None:
    """A Dask worker killed mid-phase: the coordinator names the agent after 5 s of silence, keeps
    the other's data, and the orphaned agent process stops itself (its stdin closed)."""
    import psutil

    server = spawn("redis")
    def agents() -> list[psutil.Process]:
        return _agents_under(os.getpid())

    before = {p.pid for p in agents()}
    victim: list[psutil.Process] = []

    def kill_worker() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not victim:
            victim.extend([p for p in agents() if p.pid not in before][:1])
            time.sleep(0.1)
        time.sleep(3.5)
        if victim:
            with _gone():
                psutil.Process(victim[0].ppid()).kill()  # the Dask worker process, not the agent

    killer = threading.Thread(target=kill_worker, daemon=True)
    killer.start()
    started = time.monotonic()
    outcome = dist.run_distributed(local_cluster, server.url(), _workload(duration=5.0))
    took = time.monotonic() - started
    killer.join(timeout=5)
    assert victim and took < 45, took  # 10.3 s beside a busy loop (4.4x): the kill at ~4 s and 5 s of silence
    assert outcome.status == "failed" and "its Dask worker is gone" in outcome.reason, outcome.reason
    if outcome.phases:
        (phase,) = outcome.to_json()["phases"]
        assert phase["agents_reported"] == 1 and len(phase["agents_missing"]) == 1
    gone, alive = psutil.wait_procs(victim, timeout=15)
    assert not alive, "the orphaned agent kept running"


def test_engine_agents_on_cli_cluster(cli_cluster, spawn) -> None:
    address, _ = cli_cluster
    server = spawn("redis")
    cluster = dist.connect(address)
    try:
        outcome = dist.run_distributed(cluster, server.url() + "?client=engine", _workload())
    finally:
        dist.close(cluster)
    assert outcome.status == "ok", outcome.reason
    (phase,) = outcome.to_json()["phases"]
    _assert_exact_merge(phase)
    assert outcome.backend.info["client"] == "cachemark-engine"
    assert len(outcome.to_json()["dask"]["agents"]) == 2


@pytest.mark.alone
def test_measuring_agent_is_reported_apart(cli_cluster, spawn) -> None:
    address, _ = cli_cluster
    server = spawn("redis")
    cluster = dist.connect(address + "?measure=50")  # one worker loads, the other measures at 50/s
    try:
        outcome = dist.run_distributed(cluster, server.url(), _workload(workers=1, duration=2.0))
    finally:
        dist.close(cluster)
    assert outcome.status == "ok", outcome.reason
    (phase,) = outcome.to_json()["phases"]
    measuring = phase["measuring_agent"]
    assert measuring["rate"] == 50
    count = sum(op["count"] for op in measuring["ops"].values())
    assert abs(count - 100) <= 5, count  # 50/s for 2 s: 101 in two runs beside the parallel pass
    assert [a["role"] for a in phase["agents"]] == ["load"]  # its ops are not in the load's merge
    assert sum(a["ops"] for a in phase["agents"]) == sum(op["count"] for op in phase["ops"].values())
    # the agents' table is in every report, not only on the terminal after the run
    from cachemark.report.agents import agent_blocks
    from cachemark.report.blocks import to_html
    from cachemark.report.export import to_block_markdown

    (block,) = agent_blocks(as_model({"runs": [outcome.to_json()]}))
    load, measure, total = block.rows
    assert load[3] == f"{phase['agents'][0]['ops']:,}" and measure[0].endswith("(measure)")
    assert total[0] == "all" and total[3] == load[3]
    assert any(note.startswith("Measuring agent") for note in block.notes)
    assert f"| {' | '.join(load)} |" in to_block_markdown(block) and "(measure)" in to_html(block)


@pytest.mark.alone
def test_killed_agent_is_named_not_waited_for(cli_cluster, spawn) -> None:
    import psutil

    address, workers = cli_cluster
    server = spawn("redis")
    cluster = dist.connect(address)
    found: list[psutil.Process] = []

    def agents() -> list[psutil.Process]:
        return [agent for worker in workers for agent in _agents_under(worker.pid)]

    before = {p.pid for p in agents()}  # an earlier test's agents may still be on their way out
    names_before = _semaphore_names()

    def kill_one() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not found:
            found.extend([p for p in agents() if p.pid not in before][:1])
            time.sleep(0.1)
        time.sleep(3.5)  # agent start-up and warm-up, then into the 6 s timed phase
        if found:
            found[0].send_signal(signal.SIGKILL)

    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    started = time.monotonic()
    try:
        outcome = dist.run_distributed(cluster, server.url(), _workload(duration=6.0))
    finally:
        dist.close(cluster)
    took = time.monotonic() - started
    killer.join(timeout=5)
    assert found, "no agent process was seen"
    assert took < 45, took  # 9.2-9.3 s beside the parallel pass (6 s phase, 5 s of silence named): 4.8x
    assert outcome.status == "failed"
    assert f"pid {found[0].pid}" in outcome.reason and "killed by SIGKILL" in outcome.reason
    lost = outcome.to_json()["dask"]["lost"]
    assert len(lost) == 1
    if outcome.phases:  # the other agent's data is kept, and the phase says who is missing
        (phase,) = outcome.to_json()["phases"]
        assert phase["agents_reported"] == 1 and phase["agents_missing"] == lost
        assert sum(op["count"] for op in phase["ops"].values()) > 0
    # the dead agent's queue and barrier semaphores are unlinked by its resource tracker, which
    # the agent's task no longer kills with the rest of its process group (7 names were left)
    deadline = time.monotonic() + 10
    while (left := _semaphore_names() - names_before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"left in /dev/shm: {sorted(left)}"


def _semaphore_names() -> set[str]:
    """multiprocessing's named semaphores in /dev/shm (the tests that look run alone)."""
    return {name for name in os.listdir("/dev/shm") if name.startswith("sem.mp-")}


class _gone:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, value, tb) -> bool:
        import psutil

        return kind is not None and issubclass(kind, psutil.Error)


def _agents_under(pid: int) -> list:
    """The live agent processes below ``pid``; one that exits while we look is not one."""
    import psutil

    found = []
    with _gone():
        children = psutil.Process(pid).children(recursive=True)
        for child in children:
            with _gone():
                if "cachemark.run.agent" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                    found.append(child)
    return found


def test_unreachable_cluster_is_one_line_and_exit_2() -> None:
    env = {**os.environ, "COLUMNS": "200"}
    started = time.monotonic()
    # connect_timeout=1 (default 5): nothing listens there, so the wait adds nothing to what is tested
    proc = subprocess.run([sys.executable, "-m", "cachemark", "run", "-t", "spawn:redis", "--no-calibrate",
                           "--cluster", "tcp://127.0.0.1:1?connect_timeout=1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in lines[0], proc.stderr
    assert time.monotonic() - started < 30  # 2.9 s beside a busy loop (10x): start-up and the 1-s connect timeout


@pytest.mark.serial
def test_ctrl_c_stops_agents_and_saves_what_ran(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the whole process group (the LocalCluster's workers too): the
    run ends as interrupted (exit 130) with its partial results, no worker tracebacks, no agent left."""
    import psutil

    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cachemark", "run", "-t", "spawn:redis", "--cluster", "local:2", "--workers", "2",
         "--duration", "30s", "--warmup", "0", "--no-calibrate", "-o", str(out)], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"},
        start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        seen: list[psutil.Process] = []
        while time.monotonic() < deadline and not seen:
            seen = _agents_under(proc.pid)
            time.sleep(0.2)
        assert seen, "no agent started"
        # into the timed phase: the coordinator's prefill (10,000 SETs) done, the agents' ops under way
        while time.monotonic() < deadline and _commands_of_spawned_redis(proc.pid) < 15_000:
            time.sleep(0.1)
        assert time.monotonic() < deadline, "the timed phase never started"
        seen = _agents_under(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            output, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            # Seen once in CI: the first Ctrl-C lost, likely in a Dask finalizer whose
            # redelivery was itself swallowed (fixed: test_faults' destructor test). A user presses again.
            os.killpg(proc.pid, signal.SIGINT)
            output, _ = proc.communicate(timeout=45)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, output[-2000:]
    assert "Traceback" not in output, output[-2000:]
    assert "interrupted: partial results saved" in output
    import json

    run = json.loads(out.read_text())["runs"][0]
    assert run["status"] == "interrupted"
    assert all(phase["ops"] for phase in run["phases"])  # the Ctrl-C came in the timed phase
    _, alive = psutil.wait_procs(seen, timeout=10)
    assert not alive


def _commands_of_spawned_redis(pid: int) -> int:
    """Commands served so far by the redis-server that process ``pid`` spawned (0 before it answers)."""
    import psutil
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    with _gone():
        for child in psutil.Process(pid).children():
            args = " ".join(child.cmdline()).split()  # redis-server shows "/usr/bin/redis-server 127.0.0.1:PORT"
            if len(args) == 2 and args[0].endswith("redis-server") and ":" in args[1]:
                port = int(args[1].rsplit(":", 1)[1])
                with redis.Redis(port=port, socket_timeout=2, retry=Retry(NoBackoff(), 0)) as client, \
                        contextlib.suppress(redis.RedisError):
                    return client.info("stats")["total_commands_processed"]
    return 0


def test_cluster_urls() -> None:
    spec = dist.parse_cluster("local:3?measure=100&agents=2")
    assert (spec.kind, spec.local_workers, spec.measure_rate, spec.agents) == ("local", 3, 100.0, 2)
    assert dist.parse_cluster("tcp://10.0.0.5:8786").address == "tcp://10.0.0.5:8786"
    for bad in ("local:0", "local:x", "10.0.0.5:8786", "local:2?bogus=1", "local:2?measure=-1"):
        with pytest.raises(dist.UserError):
            dist.parse_cluster(bad)
    assert dist.slices(5, 2) == [(0, 3), (3, 2)]
    assert dataclasses.is_dataclass(spec)


def test_agent_events_are_typed_on_the_wire() -> None:
    """Every event an agent sends reads back as itself; anything else is refused, not guessed at."""
    import json

    from cachemark.run import messages as m

    sent = [m.AgentHello(7, "h", 2), m.AgentReady(0), m.AgentStarted(1, 0.002), m.AgentEnded(1, 10),
            m.AgentPhase(0, {"name": "main"}), m.AgentProgress(5), m.AgentBeat(5), m.AgentStatus("failed", "x"),
            m.AgentError("crash", "boom", "tb"), m.AgentDone(0.5), m.AgentDied("gone", ["last line"])]
    for event in sent:
        wire = json.loads(json.dumps(m.agent_wire(event, agent=3)))
        assert wire["agent"] == 3 and m.agent_event(wire) == event
    for bad in ({"event": "noise"}, {"event": "ready"}, {"event": "beat", "done": 1, "extra": 2}, {}):
        with pytest.raises(ValueError):
            m.agent_event(bad)
