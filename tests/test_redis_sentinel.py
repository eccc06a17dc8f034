"""Redis Sentinel: ``spawn:redis-sentinel``, ``redis+sentinel://`` on the Python path and the engine,
and a failover in the middle of a run (the primary SIGKILLed; the run — Python workers or the
engine — rides through to the replica the Sentinels promote, and says how long writes failed).

Real servers only: a primary, its replica and three Sentinels from the lab; ground truth is what
the servers say (INFO replication, INFO commandstats) and exact hit counts against a direct run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from cachemark.engine import sentinel_config, target_config
from cachemark.errors import BackendUnavailable, SpecError
from cachemark.measure.outage import WriteOutages, merge_outages
from cachemark.results import as_model
from cachemark.results.schema import validate
from cachemark.run.runner import run_target
from cachemark.schemes import sentinel_parts
from cachemark.spec import Workload
from cachemark.target import check_params, parse_target

# The failovers race a kill and time the outage: marked serial, away from the parallel load (conftest.py). The tests on
# the shared lab below (discovery, refusals, a replica handed to the engine) hold under any load.


@pytest.fixture(scope="module")
def sentinel_lab(spawn_for_file):
    # shared by tests that run beside others: a stall of a busy host must not pass for a primary down
    # (the default 1 s would fail it over under them); the failover tests spawn labs of their own
    return spawn_for_file("redis-sentinel", down_after_ms=30_000)


def _info(port: int, section: str) -> dict:
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        return client.info(section)
    finally:
        client.close()


def test_lab_gives_agreed_sentinels_and_a_replicating_pair(sentinel_lab):
    described = sentinel_lab.describe()
    primary, replica = described["primary_port"], described["replica_port"]
    assert sentinel_lab.url() == ("redis+sentinel://" + ",".join(f"127.0.0.1:{p}" for p in described["sentinel_ports"])
                                  + "/mymaster/0")
    assert sentinel_lab.primary_port() == primary
    assert _info(primary, "replication")["role"] == "master"
    replication = _info(replica, "replication")
    assert replication["role"] == "slave" and replication["master_port"] == primary
    for port in described["sentinel_ports"]:
        client = redis.Redis(port=port, socket_timeout=5, decode_responses=True)
        flat = client.execute_command("SENTINEL", "MASTER", "mymaster")
        client.close()
        master = dict(zip(flat[::2], flat[1::2], strict=True))
        assert master["port"] == str(primary) and master["num-other-sentinels"] == "2" and master["num-slaves"] == "1"


def test_url_form_and_its_mistakes(spawn):
    sentinels, service, db = sentinel_parts(parse_target("redis+sentinel://h1,h2:26380/cache/3"))
    assert sentinels == [("h1", 26379), ("h2", 26380)] and service == "cache" and db == 3
    check_params(parse_target("redis+sentinel://h1:26379/mymaster?sentinel_password=x&socket_timeout=1"))
    with pytest.raises(SpecError, match="service name"):
        check_params(parse_target("redis+sentinel://h1:26379"))
    with pytest.raises(SpecError, match="must be a number"):
        check_params(parse_target("redis+sentinel://h1:26379/mymaster/x"))
    with pytest.raises(SpecError, match="unknown parameter 'db'"):
        check_params(parse_target("redis+sentinel://h1:26379/mymaster?db=1"))
    with pytest.raises(SpecError, match="down_after_ms"):
        spawn("redis-sentinel", down_after_ms="soon")
    shown = parse_target("redis+sentinel://:data-pw@h1,h2/mymaster/0?sentinel_password=sentinel-pw").redacted
    assert "data-pw" not in shown and "sentinel-pw" not in shown


def test_network_profile_is_refused_in_one_line(sentinel_lab):
    result = subprocess.run([sys.executable, "-m", "cachemark", "run", "-t", sentinel_lab.url(), "--ops", "10",
                             "--network", "lan", "--no-calibrate"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "in front of the Sentinels" in result.stderr and "Traceback" not in result.stderr


def test_sentinels_without_the_service_are_one_line_exit_2(sentinel_lab):
    url = sentinel_lab.url().replace("/mymaster/", "/nosuch/")
    result = subprocess.run([sys.executable, "-m", "cachemark", "run", "-t", url, "--ops", "10", "--no-calibrate"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "No master found for 'nosuch'" in result.stderr and "Traceback" not in result.stderr


def _same_run(url: str) -> dict:
    workload = Workload(keys=200, ops=3000, warmup=0, workers=1, mix={"get": 70, "set": 20, "delete": 10},
                        value_size="100")
    outcome = run_target(url, workload, sample_server=False)
    assert outcome.status == "ok", outcome.reason
    ops = outcome.phases[0].ops
    return {name: (op.count, op.hits or 0, op.misses or 0, op.errors) for name, op in ops.items()}


@pytest.mark.parametrize("client", ["", "?client=engine&threads=1&connections=1"])
def test_discovery_gives_the_primary_exactly(sentinel_lab, client):
    primary = sentinel_lab.primary_port()
    before = _info(primary, "commandstats").get("cmdstat_get", {}).get("calls", 0)
    through_sentinel = _same_run(sentinel_lab.url() + client)
    after = _info(primary, "commandstats")["cmdstat_get"]["calls"]
    direct = _same_run(f"redis://127.0.0.1:{primary}/0{client}")
    assert through_sentinel == direct
    assert through_sentinel["get"][1] > 0 and through_sentinel["get"][2] > 0  # hits and misses (deletes) both
    assert after - before >= through_sentinel["get"][0]  # the primary served the reads itself


def test_engine_is_handed_the_primary_and_the_sentinels(sentinel_lab):
    cfg = target_config(sentinel_lab.url() + "?client=engine&pipeline=4")
    assert cfg["servers"] == [f"127.0.0.1:{sentinel_lab.primary_port()}"]
    assert cfg["db"] == 0 and cfg["pipeline"] == 4
    assert cfg["sentinel"] == {"sentinels": [f"127.0.0.1:{p}" for p in sentinel_lab.describe()["sentinel_ports"]],
                               "service": "mymaster"}
    assert sentinel_config(parse_target("redis+sentinel://h1,[::1]:26380/cache/2?sentinel_password=pw")) == {
        "sentinels": ["h1:26379", "[::1]:26380"], "service": "cache", "password": "pw"}
    # the lab's Sentinels take no password: redis-py's refusal names its connections, never the password
    with pytest.raises(BackendUnavailable, match="no primary for 'mymaster'") as refused:
        target_config(sentinel_lab.url() + "?client=engine&sentinel_password=sentinel-pw")
    assert "sentinel-pw" not in str(refused.value)


@pytest.mark.parametrize("io", ["epoll", "uring"])
def test_engine_leaves_a_read_only_replica_for_the_primary_the_sentinels_name(sentinel_lab, io):
    """Handed a replica (a demoted primary, as after a failover), the engine's first write gets
    ``-READONLY``: that op is an error, the socket closes, the reconnect asks the Sentinels and
    the writes go on against the primary — one write outage, recovered there."""
    from cachemark.engine import run_load
    from io_backends import need_io

    need_io(io)
    primary, replica = sentinel_lab.primary_port(), sentinel_lab.describe()["replica_port"]
    cfg = target_config(sentinel_lab.url() + "?client=engine") | {
        "servers": [f"127.0.0.1:{replica}"], "threads": 1, "connections": 1, "prefill": False, "ops": 400,
        "keys": {"count": 50, "prefix": "cm:readonly:"}, "mix": [{"op": "set", "weight": 1}], "io": io}
    before = _info(primary, "commandstats").get("cmdstat_set", {}).get("calls", 0)
    started = time.perf_counter_ns()
    result = run_load(cfg)
    ended = time.perf_counter_ns()
    sets = result["ops"]["set"]
    assert sets["count"] == 400 and sets["errors"] == {"server": 1}, sets["errors"]
    assert any("READONLY" in m for m in result["errors_sample"]), result["errors_sample"]
    assert _info(primary, "commandstats")["cmdstat_set"]["calls"] - before >= 399
    (window,) = result["write_outages"]
    assert (window["failed_writes"], window["errors"]) == (1, 1)
    assert window["server"] == f"127.0.0.1:{primary}"
    # the engine's clock is Python's perf_counter_ns: its times fall inside this call
    assert started < result["start_ns"] <= window["first_ns"] <= window["last_ns"] < window["recovered_ns"] < ended
    client = redis.Redis(port=primary, socket_timeout=5)
    client.delete(*client.keys("cm:readonly:*"))
    client.close()


def test_outage_windows_merge_by_overlap():
    a, b = WriteOutages(lambda key: "127.0.0.1:2"), WriteOutages()
    a.failed(1_000, 1_100, write=True)
    a.failed(1_200, 1_300, write=False)  # a read inside the window counts as one of its errors
    a.failed(2_000, 2_100, write=True)
    a.succeeded(2_500)
    b.failed(1_900, 3_000, write=True)  # overlaps a's window, never recovers
    b.failed(9_000, 9_100, write=False)  # b's window is still open: one more of its errors
    merged = merge_outages([a.result(), b.result()], start_ns=0)
    assert merged == [{"start_s": 1e-06, "end_s": 3e-06, "duration_s": 2e-06, "failed_writes": 3, "errors": 5,
                       "recovered": False, "recovered_s": None, "server": None}]
    assert merge_outages([a.result()], 0)[0]["server"] == "127.0.0.1:2"
    reads_only = WriteOutages()
    reads_only.failed(1, 2, write=False)  # failed reads alone open no write outage
    assert reads_only.result() == []


def _fail_over_mid_run(lab, out: Path, target: str, duration: str, kill_after: float,
                       *extra: str) -> dict:
    """A run that rides through the primary being SIGKILLed ``kill_after`` s into its timed phase,
    checked for what both paths must show; returns its phase."""
    old_primary, replica = lab.primary_port(), lab.describe()["replica_port"]
    run = subprocess.Popen(
        [sys.executable, "-m", "cachemark", "run", "-t", target, "--duration", duration, "--warmup", "0",
         "--keys", "500", "--value-size", "200", "--mix", "get=50,set=50", "--no-calibrate", "--allow-errors",
         "-o", str(out), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # no warm-up: before the timed phase only the write probe reads
        deadline = time.monotonic() + 30
        while _info(old_primary, "commandstats").get("cmdstat_get", {}).get("calls", 0) < 100:
            assert time.monotonic() < deadline and run.poll() is None, "the timed phase never started"
            time.sleep(0.05)
        time.sleep(kill_after)
        killed_at = time.monotonic()
        assert lab.kill_primary() == old_primary
        output = run.communicate(timeout=60)[0]
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, output
    assert time.monotonic() - killed_at > 3  # the run went on after the kill (8-9 s; the deadline is a floor)

    # the Sentinels promoted the replica, and the run's ops after the failover went to it
    assert lab.primary_port() == replica
    assert _info(replica, "replication")["role"] == "master"
    assert _info(replica, "commandstats").get("cmdstat_get", {}).get("calls", 0) > 100  # a replica serves none

    document = json.loads(out.read_text())
    validate(document, str(out))
    phase = document["runs"][0]["phases"][0]
    assert document["runs"][0]["status"] == "ok" and not phase["stopped_on_errors"]
    errors = sum(sum(op["errors"].values()) for op in phase["ops"].values())
    assert errors > 0
    (outage,) = phase["write_outages"]
    assert outage["recovered"] and outage["server"] == f"127.0.0.1:{replica}"
    assert 0.5 < outage["duration_s"] < 15, outage  # down-after 1 s + the election and promotion
    assert 0 < outage["failed_writes"] <= outage["errors"] <= errors
    # beside a busy loop the outage ran from 2.2 to 4.5 s into the phase (Python) and from 1.5 to 3.9 s
    # (engine): 2.3 s each. Rarely all three Sentinels start an election at once and none wins; the lab's
    # failover-timeout (2 s) has one retried within about 5 s, so an outage of up to 7.5 s still ends a
    # second before the run (11 s Python, 10 s engine)
    assert 1 < outage["start_s"] < outage["end_s"] < phase["wall_s"] - 1

    line = f"failover: writes failed for {outage['duration_s']:.1f} s"
    assert line in output and f"then succeeded against 127.0.0.1:{replica}" in output
    from cachemark.report.formats import render

    assert line in render(as_model(document), "markdown") and line in render(as_model(document), "html")
    return phase


@pytest.mark.serial
def test_failover_mid_run_is_ridden_through_and_timed(spawn, tmp_path: Path):
    lab = spawn("redis-sentinel")
    started = time.monotonic()
    phase = _fail_over_mid_run(lab, tmp_path / "failover.json", lab.url(), "11s", 2.0, "--workers", "2")
    assert phase["ops"]["get"]["errors"].keys() <= {"connection", "timeout"}
    # the new primary's reads are the run's (its gets, and a get per write canary: 1 in 256 sets)
    gets_on_new_primary = _info(lab.primary_port(), "commandstats")["cmdstat_get"]["calls"]
    assert gets_on_new_primary <= phase["ops"]["get"]["count"] + phase["ops"]["set"]["count"] // 256 + 1
    tail = phase["timeseries"][-3:]
    assert all(second["ops"] > 0 and second["errors"] == 0 for second in tail[:-1]), tail
    assert time.monotonic() - started < 45  # 15 s beside a busy loop (3x)

    processes = [p.proc for p in [*lab.sentinels, *lab.nodes]]
    assert len(processes) == 5
    lab.stop()  # every process of the lab ends (the killed primary was already gone)
    assert all(p.poll() is not None for p in processes)


@pytest.mark.serial
def test_engine_follows_a_failover_mid_run_and_times_it(spawn, tmp_path: Path):
    """The engine twin of the test above: its reconnects ask the Sentinels, so the run goes on
    against the promoted replica and reports how long writes failed."""
    lab = spawn("redis-sentinel")
    started = time.monotonic()
    phase = _fail_over_mid_run(lab, tmp_path / "engine-failover.json",
                               lab.url() + "?client=engine&threads=1&connections=4", "10s", 1.5)
    for op in phase["ops"].values():
        assert op["errors"].keys() <= {"connection", "timeout"}, op["errors"]
    # the new primary's reads are the run's (its gets, and at most 100 canaries' reads)
    gets_on_new_primary = _info(lab.primary_port(), "commandstats")["cmdstat_get"]["calls"]
    assert gets_on_new_primary <= phase["ops"]["get"]["count"] + 100
    assert time.monotonic() - started < 35  # 11.7 s beside a busy loop (3x)


def test_on_error_policy_waits_out_a_failover():
    from cachemark.run.error_policy import error_grace

    sentinel, plain = parse_target("redis+sentinel://h:1/mymaster"), parse_target("redis://h:1")
    assert error_grace(Workload(), plain) == 2.0
    assert error_grace(Workload(), sentinel) == 60.0  # Sentinel's own down-after is 30 s, plus an election
    assert error_grace(Workload(error_grace="90s"), sentinel) == 90.0
    assert error_grace(Workload(on_error="continue"), sentinel) is None


@pytest.mark.parametrize("query, keys", [("", 60000), ("?client=engine&threads=1&connections=4", 300_000)],
                         ids=["python", "engine"])
@pytest.mark.serial
def test_failover_during_prefill_is_waited_out(spawn, tmp_path: Path, query: str, keys: int):
    """The prefill (untimed) waits for the new primary instead of failing the run (exit 2): the
    Python workers batch by batch, the engine by writing every key again once none is lost."""
    lab = spawn("redis-sentinel")
    old_primary, replica = lab.primary_port(), lab.describe()["replica_port"]
    out = tmp_path / "prefill.json"
    run = subprocess.Popen(
        [sys.executable, "-m", "cachemark", "run", "-t", lab.url() + query, "--duration", "1s", "--warmup", "0",
         "--keys", str(keys), "--value-size", "50", "--mix", "get=90,set=10", "--workers", "2", "--no-calibrate",
         "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        client = redis.Redis(port=old_primary, socket_timeout=5)
        deadline = time.monotonic() + 30
        while (written := client.dbsize()) < 5000:
            assert time.monotonic() < deadline and run.poll() is None, "the prefill never started"
            time.sleep(0.02)
        client.close()
        lab.kill_primary()
        assert written < keys  # killed in the middle of the prefill
        output = run.communicate(timeout=90)[0]
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, output  # no op of the timed phase failed: it ran on the new primary
    assert lab.primary_port() == replica
    get = json.loads(out.read_text())["runs"][0]["phases"][0]["ops"]["get"]
    assert get["count"] > 0 and not get["errors"]
    # keys the primary acknowledged but had not yet replicated are lost with it: a few misses at most
    assert get["hits"] / get["count"] > 0.9
