"""The Node.js driver (docs/drivers.md): ioredis, node-redis and memjs against real servers.

Every test runs real servers and the real driver program; none mocks a client. Each test
skips with one line when node or the driver's node_modules (`make drivers`) are missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pymemcache.client.base
import pytest
import redis

from cachemark.errors import BackendMissing
from cachemark.run.driver import DRIVERS, DriverProcess, setup_message
from cachemark.run.runner import run_target
from cachemark.target import parse_target

sys.path.insert(0, str(Path(__file__).parent))
from driver_kit import assert_ops_then_errors, cli_get_run, run_killing_the_server
from driver_kit import workload as _workload  # noqa: E402

CLIENTS = {"node-ioredis": "redis", "node-redis": "redis", "node-memjs": "memcached"}
STORES = {"node-ioredis": "ioredis.Redis", "node-redis": "redis.RedisClient", "node-memjs": "memjs.Client"}


def _built(name: str) -> str:
    """The driver's name, or a skip (one line) when node or its node_modules are missing."""
    try:
        DRIVERS[name].command()
    except BackendMissing as exc:
        pytest.skip(str(exc))
    return name


@pytest.fixture(params=list(CLIENTS))
def client(request) -> str:
    return _built(request.param)


def _url(server, client: str) -> str:
    return f"{server.url()}{'&' if '?' in server.url() else '?'}client={client}"


def _plain(server):
    """A Python client on the same server (to write foreign keys, watch the load, clean up)."""
    if server.url().startswith("redis"):
        return redis.Redis.from_url(server.url())
    host, port = server.url().split("//")[1].split("/")[0].split("?")[0].split(":")
    return pymemcache.client.base.Client((host, int(port)))


def test_hits_and_misses_as_predicted_and_cleanup_keeps_foreign_keys(client, request):
    server = request.getfixturevalue(f"{CLIENTS[client]}_server")
    plain = _plain(server)
    plain.set("foreign:keep", b"mine")
    plain.set("cm:00000000:1", b"another run's")
    url = _url(server, client)

    prefilled = run_target(url, _workload(mix={"get": 1}, ops=600))
    assert prefilled.status == "ok", prefilled.reason
    get = prefilled.phases[0]["ops"]["get"]
    assert (get["count"], get["hits"], get["misses"], get["errors"]) == (600, 600, 0, {})
    assert get["bytes_in"] > 600 * 100 and get["summary"]["p50_us"] > 0
    info = prefilled.backend["info"]
    assert info["driver"] == client and info["runtime"].startswith("node ")
    assert info["store"] == STORES[client]
    assert info["client_library_version"] == info["libraries"][info["client_library"]]
    assert info["client_version"] == f"{info['client_library_version']} ({info['runtime']})"

    cold = run_target(url, _workload(mix={"get": 1, "exists+get": 1, "get_many": 1, "delete": 1}, ops=400,
                                     prefill=False))
    assert cold.status == "ok", cold.reason
    ops = cold.phases[0]["ops"]
    assert sum(op["count"] for op in ops.values()) == 400
    assert all(op["hits"] == 0 and op["misses"] == op["count"] and not op["errors"] for op in ops.values())

    mixed = run_target(url, _workload(mix={"get": 6, "set": 3, "delete": 1, "get_many": 1, "exists": 1},
                                      ops=800, ttl=60, verify_writes=0.25))
    assert mixed.status == "ok", mixed.reason
    ops = mixed.phases[0]["ops"]
    assert sum(op["count"] for op in ops.values()) == 800
    for name, op in ops.items():
        assert not op["errors"], (name, op["errors"])
        assert op["hits"] + op["misses"] == (0 if name == "set" else op["count"])
    assert ops["get"]["hits"] > ops["get"]["misses"] > 0  # prefilled, then some deleted
    assert ops["set"]["bytes_out"] > ops["set"]["count"] * 100

    assert (plain.get("foreign:keep"), plain.get("cm:00000000:1")) == (b"mine", b"another run's")
    if CLIENTS[client] == "redis":  # cleanup removed the runs' own keys, canaries included
        for run in (prefilled, cold, mixed):
            assert not list(plain.scan_iter(match=run.backend["namespace"] + "*"))


def test_a_value_of_the_wrong_shape_is_a_verify_error(client, request):
    """The protocol by hand: prefill writes 50-byte values for a workload whose values are 100 bytes."""
    server = request.getfixturevalue(f"{CLIENTS[client]}_server")
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    target = parse_target(_url(server, client))
    d = DriverProcess(DRIVERS[client], 0)
    try:
        hello, _ = d.recv(30)
        assert hello["type"] == "hello" and hello["protocol"] == 1 and hello["driver"] == client
        ready, _ = d.request(setup_message(target, _workload(keys=10, value_size=100), namespace, 0), expect="ready")
        assert ready["client"] == STORES[client]
        ids = np.arange(10, dtype="<u4")
        prefilled, _ = d.request({"type": "prefill", "count": 10},
                                 ids.tobytes() + np.full(10, 50, dtype="<u4").tobytes(), expect="prefilled")
        assert (prefilled["written"], prefilled["refused"]) == (10, 0)
        # stdin is a stream: a line and its blob may come in pieces, split anywhere
        ops = np.zeros(10, dtype="u1").tobytes() + ids.tobytes() + np.full(10, 100, dtype="<u4").tobytes()
        framed = json.dumps({"type": "ops", "entries": [["get"]], "count": 10, "schedule": False,
                             "blob": len(ops)}).encode() + b"\n" + ops
        for piece in (framed[:7], framed[7:-50], framed[-50:-3], framed[-3:]):
            os.write(d.inp, piece)
            time.sleep(0.05)
        loaded, _ = d.recv(10)
        assert loaded == {"type": "loaded", "count": 10}
        done, blob = d.request({"type": "go", "verify_reads": 1.0}, expect="done")
        assert done["count"] == 10 and len(blob) == 17 * 10
        kinds = done["error_kinds"]
        assert [kinds[c - 3] for c in blob[:10]] == ["verify"] * 10
        assert "unexpected value of 50 B" in done["error_samples"][0]
        # every read unverified: the same values are hits
        done, blob = d.request({"type": "go", "verify_reads": 0.0}, expect="done")
        assert list(blob[:10]) == [1] * 10
    finally:
        d.close()
        plain = _plain(server)
        for i in range(10):
            plain.delete(f"{namespace}{i}")


def test_refused_writes_are_errors(spawn, client):
    kind = CLIENTS[client]
    options, said = ({"maxmemory": "1mb", "maxmemory_policy": "noeviction"}, "OOM") if kind == "redis" else (
        {"max_item_size": "1k"}, "Value too large")
    server = spawn(kind, **options)
    outcome = run_target(_url(server, client), _workload(mix={"set": 1}, ops=200, keys=200, value_size=20_000,
                                                         prefill=False, workers=1, on_error="continue"))
    assert outcome.status == "ok", outcome.reason
    set_ = outcome.phases[0]["ops"]["set"]
    assert set_["count"] == 200
    assert set_["errors"].get("server", 0) > 100, set_["errors"]
    assert any(said in s for s in outcome.phases[0]["error_samples"]), outcome.phases[0]["error_samples"]


@pytest.mark.serial
def test_errors_are_counted_when_the_server_dies_mid_run(spawn, client):
    server = spawn(CLIENTS[client])
    # short client timeouts: an op in flight when the server dies may wait for one (memjs can lose it)
    timeouts = "socket_timeout=0.5" if CLIENTS[client] == "redis" else "timeout=0.5&connect_timeout=0.5"
    outcome = run_killing_the_server(server, f"{_url(server, client)}&{timeouts}", _workload(
        mix={"get": 9, "set": 1}, duration=2, workers=1, prefill=False, on_error="continue"))
    assert_ops_then_errors(outcome)
    assert outcome.phases[0]["wall_s"] < 2 + 2  # the dead server held the loop no longer than a client timeout
    assert outcome.took_s < 20


def test_cli_get_through_ioredis(tmp_path):
    _built("node-ioredis")
    result, run = cli_get_run(tmp_path, "spawn:redis?client=node-ioredis")
    info = run["backend"]["info"]
    assert info["runtime"].startswith("node ") and info["client_library"] == "ioredis"
    assert f"via node-ioredis {info['client_version']}" in " ".join(result.stdout.split())
    op = run["phases"][0]["ops"]["get"]
    assert (op["count"], op["hits"]) == (500, 500)


@pytest.mark.serial
def test_open_loop_follows_the_schedule(redis_server):
    outcome = run_target(_url(redis_server, _built("node-redis")),
                         _workload(mix={"get": 1}, rate=200, duration=1.0, workers=1, keys=50))
    assert outcome.status == "ok", outcome.reason
    phase = outcome.phases[0]
    get = phase["ops"]["get"]
    assert phase["mode"] == "open" and 150 <= get["count"] <= 201 and get["hits"] == get["count"]
    assert get["summary"]["p50_us"] >= get["summary_uncorrected"]["p50_us"] > 0


def _by_hand(name: str, target_url: str, n: int, **setup) -> DriverProcess:
    """A driver taken by hand through hello, setup (with ``setup`` overriding fields) and n gets of keys 0..9."""
    d = DriverProcess(DRIVERS[_built(name)], 0)
    d.recv(30)
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    d.request(setup_message(parse_target(target_url), _workload(keys=10, value_size=100), namespace, 0) | setup,
              expect="ready")
    ops = (np.zeros(n, dtype="u1").tobytes() + (np.arange(n, dtype="<u4") % 10).tobytes()
           + np.full(n, 100, dtype="<u4").tobytes())
    d.request({"type": "ops", "entries": [["get"]], "count": n, "schedule": False}, ops, expect="loaded")
    return d


@pytest.mark.serial
def test_memjs_losing_a_request_is_a_timeout_not_a_hang():
    """A memcached that reads a request and closes the connection unanswered (as one killed mid-op):
    memjs never settles that call; the driver fails it as a timeout."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def read_then_close() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                conn.recv(4096)
                conn.close()

    threading.Thread(target=read_then_close, daemon=True).start()
    d = _by_hand("node-memjs", f"memcached://127.0.0.1:{port}?timeout=0.2&connect_timeout=0.2", 1)
    try:
        started = time.monotonic()
        done, blob = d.request({"type": "go", "verify_reads": 0.0}, timeout=15, expect="done")
        assert done["error_kinds"][blob[0] - 3] == "timeout" and "memjs lost the request" in done["error_samples"][0]
        assert time.monotonic() - started < 5
    finally:
        d.close()
        listener.close()


@pytest.mark.serial
def test_null_client_stops_on_sigint_and_exits_on_eof():
    """`scheme: null` (the driver's own loop, no server) cycles until SIGINT, then reports what ran."""
    d = _by_hand("node-ioredis", "redis://127.0.0.1:1", 1000, scheme=None)
    try:
        d.send({"type": "go", "duration_s": 30, "cycle": True, "verify_reads": 0.0})
        time.sleep(0.5)
        d.proc.send_signal(signal.SIGINT)
        done, blob = d.recv(10)
        assert done["interrupted"] and done["count"] > 1000 and 0.1 < done["wall_ns"] / 1e9 < 5
        assert set(blob[:done["count"]]) == {2}  # the null client misses every read
        d.proc.stdin.close()  # EOF: the driver leaves quietly
        assert d.proc.wait(5) == 0
    finally:
        d.close()
