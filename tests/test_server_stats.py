"""ServerSampler and PhaseMonitor against real servers: the counters they report agree with the
traffic we generated, short phases included, and start/stop never race.

The per-op byte figures are the servers' own counters over our traffic, not timings: within 0.4 % of the
wire's bytes beside a busy loop (0.0 % in ten of twelve checks) against the 10 % they are held to (25x).
Load cannot add bytes to a counter: only another client's traffic to the same server could."""

from __future__ import annotations

import json
import os
import threading
import time

import pymemcache.client.base
import pytest
import redis

from cachemark.measure.server_stats import NOT_SEEN, ServerSampler, read_proc, summarize
from cachemark.results import as_model
from cachemark.run.monitor import PhaseMonitor
from cachemark.run.runner import run_target
from cachemark.spec import Workload

# The samplers' intervals and the start/stop races are timed: those tests are marked serial, away from
# the parallel load (conftest.py). Runs whose figures are checked for shape only (kept, never negative)
# and the pure summaries run with the rest.

SIZE = 1000
N = 2000


def _resp_len(*parts: bytes) -> int:
    """Exact RESP bytes of one command, to compare the server's byte counter with."""
    total = len(b"*%d\r\n" % len(parts))
    for part in parts:
        total += len(b"$%d\r\n" % len(part)) + len(part) + 2
    return total


@pytest.mark.serial
def test_redis_bytes_per_op_match_the_wire(spawn):
    server = spawn("redis")
    client = redis.Redis.from_url(server.url())
    client.ping()  # connect (and redis-py's CLIENT SETINFO) before the baseline sample
    value = b"v" * SIZE
    sampler = ServerSampler(server.url(), server.pid(), interval=0.1).start()
    expected_in = 0
    for i in range(N):
        key = f"k:{i}".encode()
        client.set(key, value)
        expected_in += _resp_len(b"SET", key, value)
    time.sleep(0.25)  # at least one full interval after the traffic
    result = sampler.stop(total_ops=N)

    assert result["source"] == "redis" and not result["errors"]
    assert result["bytes_in"] >= N * SIZE
    assert abs(result["bytes_in_per_op"] - expected_in / N) <= 0.10 * expected_in / N
    assert abs(result["bytes_out_per_op"] - len(b"+OK\r\n")) <= 0.10 * len(b"+OK\r\n")
    assert result["cpu_us_per_op"] > 0
    assert result["clients"] == 1  # our client; the sampler's own connection is excluded
    assert result["rss_bytes"] > 0 and result["used_memory_bytes"] > N * SIZE
    assert result["evictions"] == 0
    rates = [s for s in result["samples"][1:] if "net_in_mbps" in s]
    assert len(rates) >= 2 and result["net_mbps_p90"] >= result["net_mbps_p70"] > 0
    assert result["net_mbps_p90"] <= max(s["net_in_mbps"] + s["net_out_mbps"] for s in rates) + 1e-9


@pytest.mark.serial
def test_redis_evictions_are_the_counter_delta(spawn):
    server = spawn("redis", maxmemory="4mb")
    client = redis.Redis.from_url(server.url())
    before = client.info("stats")["evicted_keys"]
    sampler = ServerSampler(server.url(), server.pid(), interval=0.1).start()
    pipe = client.pipeline(transaction=False)
    for i in range(8000):
        pipe.set(f"e:{i}", b"x" * SIZE)
    pipe.execute()
    result = sampler.stop(total_ops=8000)
    after = client.info("stats")["evicted_keys"]
    assert after - before > 0
    assert result["evictions"] == after - before


def test_a_hung_server_is_not_asked_again_for_the_end_reading(spawn):
    """A server that let a reading time out (SIGSTOPped: connected, silent) is not asked for the end
    reading too: that would hold the end of the run for another 5-s timeout and give no figure."""
    import signal

    server = spawn("redis")
    # every 4 s: the reading at 4 s times out at 9 s, the next is due at 12 s; stop() comes in between
    sampler = ServerSampler(server.url(), server.pid(), interval=4).start()
    os.kill(server.pid(), signal.SIGSTOP)
    deadline = time.monotonic() + 30
    while not any("Timeout" in e for e in sampler.errors) and time.monotonic() < deadline:
        time.sleep(0.05)
    asked = time.monotonic()
    result = sampler.stop(total_ops=0)
    # 0.012 s observed beside a busy loop against 2.5 s (200x): stop() wakes the sampler and reads /proc;
    # the bug waits out another 5-s timeout, which no load shortens
    assert time.monotonic() - asked < 2.5, result["errors"]
    assert any("no end reading" in e for e in result["errors"]), result["errors"]
    assert "rss_bytes" in sampler.samples[-1]  # the process's own figures are still read


def _until_alone(client) -> None:
    """Wait for memcached to retire the lab's readiness probe: it closes a moment after its socket."""
    deadline = time.monotonic() + 5.0
    while int(client.stats()[b"curr_connections"]) > 1 and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.serial
def test_memcached_counters(spawn):
    server = spawn("memcached")
    client = pymemcache.client.base.Client(("127.0.0.1", server.port), default_noreply=False)
    client.version()
    _until_alone(client)
    # memcached counts a reply's bytes just after sending it; the last stats reply (2 KB) could
    # land in the sampler's baseline or after it. A VERSION after it is handled only once that
    # is done, and its own ~15 bytes are noise.
    client.version()
    sampler = ServerSampler(server.url(), server.pid(), interval=0.1).start()
    for i in range(N):
        client.set(f"m:{i}", b"w" * SIZE)
    time.sleep(0.15)
    result = sampler.stop(total_ops=N)
    assert result["source"] == "memcached" and not result["errors"]
    assert result["bytes_in"] >= N * SIZE
    expected_in = len(f"set m:{N // 2} 0 0 {SIZE}\r\n") + SIZE + 2
    assert abs(result["bytes_in_per_op"] - expected_in) <= 0.10 * expected_in
    assert abs(result["bytes_out_per_op"] - len(b"STORED\r\n")) <= 0.10 * len(b"STORED\r\n")
    assert result["clients"] == 1
    assert result["server_commands"] == N
    assert result["rss_bytes"] > 0


@pytest.mark.serial
def test_process_only_sampling_reads_proc():
    # a backend without a stats protocol: only /proc of the pid (here: this process)
    sampler = ServerSampler("memory://", os.getpid(), interval=0.05).start()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    result = sampler.stop(total_ops=1000)
    assert result["source"] == "process"
    assert result["proc_cpu_s"] >= 0.2
    assert result["cpu_us_per_op"] >= 200  # 0.2 s over 1000 ops
    assert result["rss_bytes"] == result["samples"][-1]["rss_bytes"] > 0
    assert read_proc(os.getpid())["rss_bytes"] > 0


@pytest.mark.serial
def test_unreachable_server_does_not_raise():
    sampler = ServerSampler("redis://127.0.0.1:1/0", None, interval=0.05).start()
    result = sampler.stop(total_ops=10)
    assert result["errors"] and "connect" in result["errors"][0]
    assert result["cpu_us_per_op"] is None and result["bytes_in_per_op"] is None


def test_summarize_needs_two_samples():
    assert summarize([{"t": 0.0}], 5)["cpu_us_per_op"] is None


# --- short phases: the readings at the phase's edges --------------------------------------------

SHORT = 300  # a few hundred ops: well under a second, so no periodic reading falls inside


def _assert_never_negative(server: dict) -> None:
    for name in ("cpu_us_per_op", "bytes_in_per_op", "bytes_out_per_op", "net_mbps_p90", "net_mbps_p70",
                 "net_in_mbps_p90", "net_out_mbps_p90", "cpu_pct_p90", "evictions"):
        assert server[name] is None or server[name] >= 0, (name, server[name])
    for sample in server["samples"]:
        for name in ("net_in_mbps", "net_out_mbps", "cpu_pct", "ops_per_s"):
            assert sample.get(name) is None or sample[name] >= 0, (name, sample)


@pytest.mark.serial
def test_short_redis_phase_bytes_per_op_match_the_wire(spawn):
    server = spawn("redis")
    client = redis.Redis.from_url(server.url())
    client.ping()
    value = b"v" * SIZE
    sampler = ServerSampler(server.url(), server.pid()).start()  # the default 1-s interval
    expected_in = 0
    for i in range(SHORT):
        key = f"s:{i}".encode()
        client.set(key, value)
        expected_in += _resp_len(b"SET", key, value)
    result = sampler.stop(total_ops=SHORT)

    assert not result["errors"] and result["baseline"] == "start"
    assert len(result["samples"]) == 2  # the start and the end reading only
    assert result["server_commands"] == SHORT  # the sampler's own INFOs are not counted
    assert abs(result["bytes_in_per_op"] - expected_in / SHORT) <= 0.10 * expected_in / SHORT
    assert abs(result["bytes_out_per_op"] - len(b"+OK\r\n")) <= 0.10 * len(b"+OK\r\n")
    assert result["low_samples"] is True and result["rate_intervals"] == 0
    assert result["net_mbps_p90"] > 0
    _assert_never_negative(result)


@pytest.mark.serial
def test_short_memcached_phase_bytes_per_op_match_the_wire(spawn):
    server = spawn("memcached")
    client = pymemcache.client.base.Client(("127.0.0.1", server.port), default_noreply=False)
    client.version()
    _until_alone(client)
    sampler = ServerSampler(server.url(), server.pid()).start()
    expected_in = 0
    for i in range(SHORT):
        key = f"s:{i}"
        client.set(key, b"w" * SIZE)
        expected_in += len(f"set {key} 0 0 {SIZE}\r\n") + SIZE + 2
    result = sampler.stop(total_ops=SHORT)

    assert not result["errors"]
    assert abs(result["bytes_in_per_op"] - expected_in / SHORT) <= 0.10 * expected_in / SHORT
    assert abs(result["bytes_out_per_op"] - len(b"STORED\r\n")) <= 0.10 * len(b"STORED\r\n")
    assert result["server_commands"] == SHORT
    assert result["low_samples"] is True
    _assert_never_negative(result)


@pytest.mark.serial
def test_the_samplers_own_traffic_is_subtracted_exactly(spawn):
    """Many readings of an idle server: whatever the sampler exchanged, the server moved 0 bytes."""
    for kind in ("redis", "memcached"):
        server = spawn(kind)
        if kind == "memcached":
            _until_alone(pymemcache.client.base.Client(("127.0.0.1", server.port)))
        sampler = ServerSampler(server.url(), server.pid(), interval=0.02).start()
        time.sleep(0.3)
        result = sampler.stop(total_ops=1)
        assert len(result["samples"]) >= 10 and not result["errors"]
        assert result["bytes_in"] == 0 and result["bytes_out"] == 0, kind
        assert result["server_commands"] == 0, kind
        readings = len(result["samples"]) - 1
        request = {"redis": len(b"*1\r\n$4\r\nINFO\r\n"), "memcached": len(b"stats\r\n")}[kind]
        assert result["sampler_bytes_in"] == readings * request
        assert result["sampler_bytes_out"] > readings * 1000  # INFO / stats replies are KBs each
        assert result["low_samples"] is False


def _short_workload(**overrides) -> Workload:
    phases = [{"name": "write", "mix": {"set": 1}, "ops": 1},
              {"name": "read", "mix": {"get": 1}, "ops": SHORT},
              {"name": "delete", "mix": {"delete": 1}, "ops": 1}]
    base = {"keys": 1, "value_size": SIZE, "workers": 1, "prefill": False, "warmup": 0, "phases": phases}
    return Workload(**{**base, **overrides})


@pytest.mark.serial
def test_short_phases_through_the_runner(spawn):
    """Sub-second phases as a user runs them: per-op bytes near the wire's, nothing negative."""
    for kind in ("redis", "memcached"):
        server = spawn(kind)
        outcome = run_target(server.url(), _short_workload())
        assert outcome.status == "ok", outcome.reason
        key = outcome.backend.namespace + "0"
        if kind == "redis":
            wire_in = _resp_len(b"GET", key.encode())
            wire_out = len(b"$%d\r\n" % SIZE) + SIZE + 2
        else:
            wire_in = len(f"get {key}\r\n")
            wire_out = len(f"VALUE {key} 0 {SIZE}\r\n") + SIZE + 2 + len(b"END\r\n")
        for phase in outcome.to_json()["phases"]:
            server_figures = phase["server"]
            # a 1-op phase may end before the runner's start reading: withheld, never shown as 0
            assert set(server_figures["withheld"].values()) <= {NOT_SEEN} and not server_figures["errors"]
            if phase["wall_s"] < 0.5:  # no full 1-s interval fits in it
                assert server_figures["low_samples"] is True
            _assert_never_negative(server_figures)
        read = outcome.phases[1].server
        assert abs(read["bytes_in_per_op"] - wire_in) <= 0.10 * wire_in, (kind, read["bytes_in_per_op"], wire_in)
        assert abs(read["bytes_out_per_op"] - wire_out) <= 0.10 * wire_out, (kind, read["bytes_out_per_op"])


# --- start and stop in any order: what the runner's two threads may do ---------------------------


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cachemark-server-sampler"]


@pytest.mark.serial
def test_stop_before_start(redis_server):
    before = len(_sampler_threads())
    sampler = ServerSampler(redis_server.url(), redis_server.pid(), interval=0.05)
    result = sampler.stop(total_ops=20)
    assert any("before it started" in e for e in result["errors"])
    assert result["bytes_in_per_op"] is None and result["cpu_us_per_op"] is None and result["baseline"] is None
    assert sampler.start() is sampler  # a late start does nothing ...
    assert len(_sampler_threads()) == before  # ... and starts no thread
    assert sampler.stop(total_ops=20) is result  # a second stop returns the first summary


@pytest.mark.serial
def test_stop_after_connect_uses_the_connect_reading(redis_server):
    """The monitor connects before the barrier; if the phase ends before the start reading,
    the connect reading is the baseline, flagged."""
    client = redis.Redis.from_url(redis_server.url())
    client.ping()
    sampler = ServerSampler(redis_server.url(), redis_server.pid()).connect()
    for i in range(20):
        client.set(f"c:{i}", b"x" * 100)
    result = sampler.stop(total_ops=20)
    assert result["baseline"] == "connect"
    assert any("ended before its start reading" in e for e in result["errors"])
    expected = _resp_len(b"SET", b"c:10", b"x" * 100)
    assert abs(result["bytes_in_per_op"] - expected) <= 0.10 * expected


@pytest.mark.serial
def test_stop_after_a_failed_connect():
    sampler = ServerSampler("redis://127.0.0.1:1/0", None, interval=0.05).start()
    first = sampler.stop(total_ops=10)
    assert first["errors"] and first["errors"][0].startswith("connect:")
    assert first["bytes_in_per_op"] is None and first["net_mbps_p90"] is None
    assert sampler.stop(total_ops=10) is first


@pytest.mark.serial
def test_stop_after_the_thread_failed_to_start(redis_server, monkeypatch):
    """No thread to spare: the edge readings still give the per-op figures."""
    def refuse(self):
        raise RuntimeError("can't start new thread")

    client = redis.Redis.from_url(redis_server.url())
    client.ping()
    monkeypatch.setattr(threading.Thread, "start", refuse)
    sampler = ServerSampler(redis_server.url(), redis_server.pid(), interval=0.01).start()
    for i in range(50):
        client.set(f"t:{i}", b"y" * 100)
    result = sampler.stop(total_ops=50)
    monkeypatch.undo()
    assert any(e.startswith("thread:") for e in result["errors"])
    assert len(result["samples"]) == 2
    expected = _resp_len(b"SET", b"t:10", b"y" * 100)
    assert abs(result["bytes_in_per_op"] - expected) <= 0.10 * expected


@pytest.mark.serial
def test_start_and_stop_racing_from_two_threads(redis_server):
    """The runner's clock thread starts a sampler while its main thread may already stop it."""
    for _ in range(40):
        sampler = ServerSampler(redis_server.url(), None, interval=0.001).connect()
        gate = threading.Barrier(2)
        failures: list[BaseException] = []

        def starter(sampler=sampler, gate=gate, failures=failures):
            gate.wait()
            try:
                sampler.start()
            except BaseException as exc:  # noqa: BLE001 — collected for the assertion below
                failures.append(exc)

        thread = threading.Thread(target=starter)
        thread.start()
        gate.wait()
        result = sampler.stop(total_ops=5)
        thread.join()
        assert not failures
        times = [s["t"] for s in result["samples"]]
        assert times == sorted(times)
        _assert_never_negative(result)
    time.sleep(0.05)
    assert not _sampler_threads()


# --- the monitor: phases announced, started and ended from two threads ----------------------------


@pytest.mark.serial
def test_monitor_phase_ended_before_started(redis_server):
    monitor = PhaseMonitor(redis_server.url(), redis_server.pid())
    monitor.phase_coming(0)
    monitor.phase_ended(0, 20)
    monitor.phase_started(0)  # the clock thread, late: nothing happens
    monitor.phase_ended(0, 20)  # twice: nothing happens
    monitor.phase_ended(7, 20)  # never announced: nothing happens
    assert monitor.results[0]["baseline"] == "connect"
    assert not monitor.samplers and 7 not in monitor.results
    monitor.stop_all()
    assert not _sampler_threads()


@pytest.mark.serial
def test_monitor_next_phase_waits_for_the_end_reading(redis_server):
    monitor = PhaseMonitor(redis_server.url(), None)
    monitor.phase_coming(0)
    monitor.phase_started(0)
    coming = threading.Thread(target=monitor.phase_coming, args=(1,))
    coming.start()
    coming.join(0.3)
    assert coming.is_alive()  # phase 1 may not start while phase 0 has no end reading
    monitor.phase_ended(0, 10)
    coming.join(5)
    assert not coming.is_alive() and 1 in monitor.samplers
    monitor.stop_all()
    assert monitor.results[1]["baseline"] == "connect"


@pytest.mark.serial
def test_monitor_stop_all_releases_a_waiting_phase(redis_server):
    monitor = PhaseMonitor(redis_server.url(), None)
    monitor.phase_coming(0)
    monitor.phase_started(0)
    coming = threading.Thread(target=monitor.phase_coming, args=(1,))
    coming.start()
    monitor.stop_all()  # a run cut short: phase 0 never ended on its own
    coming.join(5)
    assert not coming.is_alive()
    assert 0 in monitor.results and 1 not in monitor.samplers
    monitor.phase_started(1)  # after stop_all nothing starts
    assert not monitor.samplers and not _sampler_threads()
    monitor.stop_all()  # twice: fine


@pytest.mark.serial
def test_monitor_shares_one_connection_across_phases(redis_server):
    monitor = PhaseMonitor(redis_server.url(), None)
    for index in range(5):
        monitor.phase_coming(index)
        monitor.phase_started(index)
        monitor.phase_ended(index, 1)
    links = {s.get("link") for r in monitor.results.values() for s in r["samples"]}
    assert links == {1}
    assert all(r["bytes_in"] == 0 for r in monitor.results.values())  # nothing but the sampler ran
    monitor.stop_all()


def test_many_tiny_phases_through_the_cli(tmp_path, spawn, cachemark):
    """Finding 10: 150 phases of 20 ops once crashed the run in the sampler; every phase is kept."""
    server = spawn("redis")
    lines = ['name = "many-phases"', f'targets = ["{server.url()}"]', "", "[workload]", "keys = 100",
             "value_size = 100", "workers = 2", "prefill = false", "warmup = 0", ""]
    for i in range(150):
        lines += ["[[workload.phases]]", f'name = "p{i}"', "mix = { get = 1 }", "ops = 20", ""]
    (tmp_path / "exp.toml").write_text("\n".join(lines))
    proc = cachemark("run", "exp.toml", "-o", "out.json", "--no-calibrate", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = json.loads((tmp_path / "out.json").read_text())["runs"][0]
    assert run["status"] == "ok" and len(run["phases"]) == 150
    assert [p["name"] for p in run["phases"]] == [f"p{i}" for i in range(150)]
    for phase in run["phases"]:
        assert phase["server"]["source"] == "redis" and not phase["server"]["errors"]
        assert set(phase["server"]["withheld"].values()) <= {NOT_SEEN}
        _assert_never_negative(phase["server"])


# --- figures that cannot be trusted are withheld, never negative ---------------------------------


def _reading(t, net_in, net_out, cpu, link=1, **extra):
    return {"t": t, "net_in_bytes": net_in, "net_out_bytes": net_out, "cpu_user_s": cpu, "cpu_sys_s": 0.0,
            "link": link, **extra}


def test_a_counter_going_backwards_is_withheld():
    # a server restarted mid-phase: its counters start again from zero
    result = summarize([_reading(0.0, 5_000_000, 9_000_000, 3.0, evictions=7), _reading(1.0, 1200, 300, 0.01,
                                                                                        evictions=0)], 100)
    assert result["bytes_in_per_op"] is None and result["bytes_out_per_op"] is None
    assert result["cpu_us_per_op"] is None and result["evictions"] is None
    assert "backwards" in result["withheld"]["bytes_in_per_op"]
    _assert_never_negative(result)


def test_a_reconnect_withholds_the_byte_figures():
    result = summarize([_reading(0.0, 100, 100, 1.0), _reading(1.0, 900, 900, 1.5, link=2)], 10)
    assert result["bytes_in_per_op"] is None and "reconnected" in result["withheld"]["bytes_in_per_op"]
    assert result["cpu_us_per_op"] == pytest.approx(0.5e6 / 10)
    assert result["net_mbps_p90"] is None


def test_ops_the_server_never_saw_are_not_figures_of_zero():
    # a 1-op phase that ended before its start reading: the server counted nothing between them
    none = summarize([_reading(0.0, 500, 500, 1.0, commands=40), _reading(0.01, 500, 500, 1.0002, commands=40)],
                     1, kind="redis")
    assert none["bytes_in_per_op"] is None and none["cpu_us_per_op"] is None
    assert none["withheld"]["bytes_out_per_op"] == NOT_SEEN and none["ops_unseen"] == 1
    assert none["net_mbps_p90"] is None  # not "0 Mbps"
    # 17 of 20 seen: the figures stay, and how many ops the readings missed is said
    some = summarize([_reading(0.0, 0, 0, 1.0, commands=0), _reading(0.01, 17 * 33, 17 * 5, 1.001, commands=17)],
                     20, kind="redis")
    assert some["bytes_in_per_op"] == pytest.approx(17 * 33 / 20) and some["ops_unseen"] == 3


def test_low_samples_means_fewer_than_two_full_intervals():
    one = summarize([_reading(0.0, 0, 0, 0.0), _reading(0.4, 1000, 1000, 0.1)], 10)
    assert one["low_samples"] is True and one["rate_intervals"] == 0
    assert one["net_mbps_p90"] == pytest.approx(2000 * 8 / 0.4 / 1e6)  # the phase's own mean rate
    two = summarize([_reading(0.0, 0, 0, 0.0), _reading(1.0, 1000, 0, 0.1), _reading(2.0, 3000, 0, 0.2),
                     _reading(2.1, 3100, 0, 0.2)], 10)
    assert two["low_samples"] is False and two["rate_intervals"] == 2


def test_reports_mark_low_sample_figures():
    from cachemark.report.data import phase_rows
    from cachemark.report.export import to_markdown
    from cachemark.report.html import _server_table

    server = summarize([_reading(0.0, 0, 0, 0.0), _reading(0.2, 2000, 1000, 0.01)], 10, kind="redis")
    doc = {"experiment": {"name": "x"}, "runs": [{"label": "redis", "status": "ok", "phases": [
        {"name": "main", "wall_s": 0.2, "ops": {}, "server": server}]}]}
    markdown = to_markdown(as_model(doc))
    assert "† " in markdown and "fewer than two" in markdown
    assert "†" in _server_table(phase_rows(as_model(doc)))
    server["low_samples"] = False
    assert "†" not in to_markdown(as_model(doc)) and "†" not in _server_table(phase_rows(as_model(doc)))
