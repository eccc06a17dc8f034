"""`cachemark capture`: the recording proxy between an application and its Redis or memcached.

Ground truth is a cachemark run captured through the recorder: its own results file says how many
gets, sets and deletes it sent and how many gets hit; the trace must hold exactly those, and a
replay of the trace against another backend (captured again) must issue them again, with the same
per-key access counts and the recorded timing. Protocol details (memcached text and meta, RESP3,
pipelines) are checked request by request against real servers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pymemcache
import pytest
import redis

from cachemark.lab.proxy import TraceCapture
from cachemark.workload.traces import OPS, TraceWriter, key_hash, open_trace
from conftest import run_cli  # noqa: E402


def records(path: Path) -> np.ndarray:
    return np.concatenate([b.records for b in open_trace(path).batches()])


def with_keys(path: Path) -> list:
    return list(open_trace(path, keep_keys=True))


def run_counts(path: Path) -> dict[str, tuple[int, int]]:
    """(count, hits) per op of the measured phase of a results file."""
    ops = json.loads(path.read_text())["runs"][0]["phases"][-1]["ops"]
    return {op: (v["count"], v.get("hits", 0)) for op, v in ops.items()}


def busiest_client(recs: np.ndarray) -> np.ndarray:
    """The records of the worker's connection (the run's probe and namespace cleanup use another)."""
    ids, n = np.unique(recs["client"], return_counts=True)
    return recs[recs["client"] == ids[np.argmax(n)]]


def op_counts(recs: np.ndarray) -> dict[str, int]:
    return {OPS[op]: int(n) for op, n in enumerate(np.bincount(recs["op"], minlength=len(OPS))) if n}


@pytest.mark.alone
def test_a_captured_run_replays_on_another_backend_with_its_ops_keys_and_timing(tmp_path, redis_server,
                                                                                 memcached_server):
    # 1. A cachemark run (open loop, Poisson arrivals, cold cache) against Redis, through the recorder.
    app = tmp_path / "app.cmtrace"
    with TraceCapture((redis_server.host, redis_server.port), "resp", app) as cap:
        result = run_cli("run", "-t", f"redis://{cap.address}", "--no-prefill", "--warmup", "0", "--ops", "1000",
                         "--rate", "400", "--arrival", "poisson", "--seed", "3", "--mix", "get=70,set=25,delete=5",
                         "--keys", "200", "--workers", "1", "--no-calibrate", "-o", "run.json", cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    ran = run_counts(tmp_path / "run.json")
    worker = busiest_client(records(app))
    assert op_counts(worker) == {op: count for op, (count, _) in ran.items()}
    # a get's value size comes from the reply: non-zero exactly for the hits
    assert int(((worker["op"] == OPS.index("get")) & (worker["value_size"] > 0)).sum()) == ran["get"][1]

    # 2. Replay the worker's stream against memcached at speed 1, through a second recorder.
    only_worker = tmp_path / "worker.cmtrace"
    with TraceWriter(only_worker) as writer:
        writer.write_records(worker)
    replayed = tmp_path / "replay.cmtrace"
    with TraceCapture((memcached_server.host, memcached_server.port), "memcached", replayed) as cap:
        result = run_cli("run", "-t", f"memcached://{cap.address}", "--trace", str(only_worker), "--speed", "1",
                         "--workers", "1", "--no-calibrate", "-o", "replay.json", cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    # the same ops, and (cold cache, each key's order kept) the same hits
    assert run_counts(tmp_path / "replay.json") == ran
    again = busiest_client(records(replayed))
    assert op_counts(again) == op_counts(worker)
    # the same key-access histogram (the replay names keys its own way, so compare the count multisets)
    assert sorted(np.unique(again["key_hash"], return_counts=True)[1]) == \
        sorted(np.unique(worker["key_hash"], return_counts=True)[1])
    # the recorded inter-arrival times, reproduced within 5 % at speed 1: the span (1st to 99th percentile)
    # within 5 %, the deciles at their recorded offsets — typically within 5 % of the span, none off by 10 %
    # (a stall of a busy core is one moment, not the replay's timing)
    a = (worker["t_us"] - worker["t_us"][0]).astype(float)
    b = (again["t_us"] - again["t_us"][0]).astype(float)
    qa, qb = np.percentile(a, [1, *range(10, 100, 10), 99]), np.percentile(b, [1, *range(10, 100, 10), 99])
    span = qa[-1] - qa[0]
    # measured beside the suite's parallel pass: span off by 0.2-0.7 %, deciles by 0.3-0.7 % (median) and
    # 0.3-0.7 % (most) of the span: 5 % and 10 % are 7x and 13x that
    assert abs((qb[-1] - qb[0]) / span - 1) < 0.05, (qa, qb)
    off = np.abs((qb - qb[0]) - (qa - qa[0]))
    assert np.median(off) < 0.05 * span and np.max(off) < 0.10 * span, (qa, qb)


def test_memcached_text_and_meta_requests_become_records(tmp_path, memcached_server):
    path = tmp_path / "mc.cmtrace"
    with TraceCapture((memcached_server.host, memcached_server.port), "memcached", path, raw_keys=True) as cap:
        mc = pymemcache.Client((cap.host, cap.port))
        mc.set("cap:a", b"12345", expire=60)
        mc.set("cap:n", b"12", noreply=True)
        assert mc.get_many(["cap:a", "cap:none", "cap:n"]) == {"cap:a": b"12345", "cap:n": b"12"}
        mc.delete("cap:a")
        mc.incr("cap:n", 1)
        mc.touch("cap:n", 10)  # not a cache op cachemark replays: counted as other
        with socket.create_connection((cap.host, cap.port)) as sock:
            sock.sendall(b"ms cap:m 4 T30\r\nwxyz\r\nmg cap:m v\r\nmg cap:m\r\n"
                         b"mg cap:m v q\r\nmg cap:zz v q\r\nmn\r\nmd cap:m q\r\nma cap:c\r\n")
            got = b""
            while not got.endswith(b"MN\r\nNF\r\n"):
                got += sock.recv(4096)
        mc.close()
    want = [("set", b"cap:a", 5, 60), ("set", b"cap:n", 2, 0), ("get", b"cap:a", 5, 0), ("get", b"cap:none", 0, 0),
            ("get", b"cap:n", 2, 0), ("delete", b"cap:a", 0, 0), ("incr", b"cap:n", 0, 0),
            ("set", b"cap:m", 4, 30), ("get", b"cap:m", 4, 0), ("exists", b"cap:m", 0, 0), ("get", b"cap:m", 4, 0),
            ("get", b"cap:zz", 0, 0), ("delete", b"cap:m", 0, 0), ("incr", b"cap:c", 0, 0)]
    got_recs = with_keys(path)
    assert sorted((r.op, r.key, r.value_size, r.ttl_s) for r in got_recs) == sorted(want)
    assert [r.t_us for r in got_recs] == sorted(r.t_us for r in got_recs)
    assert cap.summary()["other"] >= 1  # touch (and version/stats a client may send)


def test_resp3_and_pipelines_size_reads_from_their_replies(tmp_path, redis_server):
    path = tmp_path / "r3.cmtrace"
    with TraceCapture((redis_server.host, redis_server.port), "resp", path, raw_keys=True) as cap:
        r3 = redis.Redis(host=cap.host, port=cap.port, protocol=3)  # HELLO 3 first
        r3.set("cap3:a", b"x" * 300, px=1500)
        r3.setex("cap3:b", 20, b"yy")
        assert r3.mget(["cap3:a", "cap3:zz", "cap3:b"]) == [b"x" * 300, None, b"yy"]
        pipe = r3.pipeline(transaction=False)
        for i in range(50):
            pipe.set(f"cap3:p{i}", b"v" * i)
        for i in range(50):
            pipe.get(f"cap3:p{i}")
        pipe.exists("cap3:a", "cap3:zz")
        pipe.execute()
        r3.close()
    recs = with_keys(path)
    by_key = {(r.op, r.key): r for r in recs}
    assert by_key[("set", b"cap3:a")].ttl_s == 2 and by_key[("set", b"cap3:b")].ttl_s == 20
    assert [r.value_size for r in recs if r.op == "get" and r.key in (b"cap3:a", b"cap3:zz", b"cap3:b")] == \
        [300, 0, 2]
    assert [by_key[("get", f"cap3:p{i}".encode())].value_size for i in range(50)] == list(range(50))
    assert sum(r.op == "exists" for r in recs) == 2


@pytest.mark.parametrize("kind,query", [("redis", "protocol=resp2"), ("redis", "protocol=resp3"),
                                        ("memcached", "protocol=text"), ("memcached", "protocol=meta")])
def test_the_engines_pipelines_are_captured_op_for_op(tmp_path, redis_server, memcached_server, kind, query):
    server = redis_server if kind == "redis" else memcached_server
    path = tmp_path / "engine.cmtrace"
    with TraceCapture((server.host, server.port), "resp" if kind == "redis" else "memcached", path) as cap:
        result = run_cli("run", "-t", f"{kind}://{cap.address}?client=engine&pipeline=8&{query}", "--no-prefill",
                         "--warmup", "0", "--ops", "20000", "--mix", "get=80,set=15,delete=5", "--keys", "500",
                         "--seed", "2", "--workers", "1", "--no-calibrate", "-o", "run.json", cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    ran = run_counts(tmp_path / "run.json")
    # the engine's connection carries exactly the run's ops (its canary, the probe and the
    # namespace cleanup travel on connections of their own), and its hits are the non-empty reads
    engine = busiest_client(records(path))
    assert op_counts(engine) == {op: count for op, (count, _) in ran.items()}
    assert int(((engine["op"] == OPS.index("get")) & (engine["value_size"] > 0)).sum()) == ran["get"][1]
    assert cap.summary()["dropped_segments"] == 0


def test_keys_are_hashed_by_default_and_values_never_stored(tmp_path, redis_server):
    marker = b"VALUE-MARKER-7f3a9c"
    hashed, raw = tmp_path / "hashed.cmtrace", tmp_path / "raw.cmtrace"
    for path, raw_keys in ((hashed, False), (raw, True)):
        with TraceCapture((redis_server.host, redis_server.port), "resp", path, raw_keys=raw_keys) as cap:
            client = redis.Redis(host=cap.host, port=cap.port)
            client.set("secret:user:42", marker * 3)
            assert client.get("secret:user:42") == marker * 3
            client.close()
    for path in (hashed, raw):
        assert marker not in path.read_bytes()
    assert b"secret:user:42" not in hashed.read_bytes()
    assert b"secret:user:42" in raw.read_bytes()
    for path in (hashed, raw):
        recs = with_keys(path)
        assert [(r.op, r.key_hash, r.key_size, r.value_size) for r in recs] == \
            [("set", key_hash(b"secret:user:42"), 14, 57), ("get", key_hash(b"secret:user:42"), 14, 57)]


@pytest.mark.serial
def test_a_recorder_that_falls_behind_drops_counts_and_says_so(tmp_path, redis_server):
    path = tmp_path / "small.cmtrace"
    with TraceCapture((redis_server.host, redis_server.port), "resp", path, tap_bytes=4096) as cap:
        client = redis.Redis(host=cap.host, port=cap.port)
        client.set("small:a", b"v")
        client.set("big", b"x" * 100_000)  # more than the tap holds between drains: dropped, never delayed
        assert client.get("big") == b"x" * 100_000
        client.close()
    summary = cap.summary()
    assert summary["dropped_segments"] > 0 and summary["dropped_bytes"] >= 100_000
    text = path.read_text()
    assert "\n# incomplete: " in text
    assert [r.op for r in open_trace(path)] == ["set"]  # what came before the drop is kept


def wait_for_line(proc: subprocess.Popen, text: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if text in line:
            return line
    raise AssertionError(f"no line with {text!r}")


@pytest.mark.serial
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_capture_leaves_a_valid_trace_and_exits_130(tmp_path, redis_server, sig):
    env = {**os.environ, "COLUMNS": "200"}
    # -X faulthandler: if it ever hangs, SIGABRT below makes it print every thread's stack
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "cachemark", "capture", "-u",
                             redis_server.url(), "-o", "app.cmtrace"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = wait_for_line(proc, "point the application at")
        address = line.split("point the application at ")[1].split()[0]
        host, port = address.rsplit(":", 1)
        client = redis.Redis(host=host, port=int(port))
        for i in range(200):
            client.set(f"cc:{i}", b"v" * 10)
            client.get(f"cc:{i}")
        time.sleep(0.3)  # mid-capture: the client is still connected
        proc.send_signal(sig)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            raise AssertionError(f"capture ignored Ctrl-C: {proc.communicate(timeout=10)[1][-4000:]}") from None
        client.close()
    finally:
        proc.kill()
    assert proc.returncode == 130, err  # interrupted, as every command; the trace written all the same
    assert "wrote 400 requests" in out and "get 200, set 200" in out, out
    recs = records(tmp_path / "app.cmtrace")
    assert len(recs) == 400 and op_counts(recs) == {"get": 200, "set": 200}
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.serial
def test_a_duration_ends_the_capture(tmp_path, memcached_server):
    result = run_cli("capture", "-u", f"memcached://{memcached_server.host}:{memcached_server.port}", "-o",
                     "m.cmtrace.zst", "--duration", "0.5s", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "wrote 0 requests" in result.stdout
    assert len(list(open_trace(tmp_path / "m.cmtrace.zst"))) == 0


def test_bad_input_is_one_line_and_exit_2(tmp_path, redis_server):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    taken = busy.getsockname()[1]
    cases = [
        (["-u", "postgresql://127.0.0.1/x", "-o", "a.cmtrace"], "redis:// (RESP) and memcached://"),
        (["-u", "rediss://127.0.0.1:6380", "-o", "a.cmtrace"], "TLS"),
        (["-u", "127.0.0.1:6379", "-o", "a.cmtrace"], "--protocol"),
        (["-u", redis_server.url(), "--protocol", "http", "-o", "a.cmtrace"], "--protocol"),
        (["-u", "redis://127.0.0.1:1", "-o", "a.cmtrace"], "cannot reach the upstream"),
        (["-u", redis_server.url(), "--listen", f"127.0.0.1:{taken}", "-o", "a.cmtrace"], "cannot listen"),
        (["-u", redis_server.url(), "-o", "no/such/dir/a.cmtrace"], "cannot write"),
        (["-u", redis_server.url(), "-o", "a.cmtrace", "--duration", "soon"], "--duration"),
    ]
    try:
        for args, text in cases:
            result = run_cli("capture", *args, cwd=tmp_path)
            assert result.returncode == 2, (args, result.stdout, result.stderr)
            assert text in result.stderr and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
            assert "Traceback" not in result.stderr
    finally:
        busy.close()
    assert not list(tmp_path.iterdir())  # no trace, no temporary file left behind
