"""The Go driver (drivers/go, docs/drivers.md): go-redis and gomemcache against real servers.

Every test runs real servers and the real driver binary; none mocks a client. They skip, with
one line, where the binary is not built (`make setup` runs drivers/go/build.sh).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import numpy as np
import pymemcache.client.base
import pytest
import redis

from cachemark.errors import BackendMissing, UnsupportedOp
from cachemark.run.driver import DRIVERS, DriverProcess, setup_message
from cachemark.run.runner import run_target
from cachemark.target import parse_target

sys.path.insert(0, str(Path(__file__).parent))
from driver_kit import assert_ops_then_errors, cli_get_run, run_killing_the_server
from driver_kit import op as _op  # noqa: E402
from driver_kit import workload as _workload  # noqa: E402
from driver_kit import write_foreign as _foreign  # noqa: E402

SERVER = {"go-redis": "redis", "go-memcache": "memcached"}
CLIENTS = pytest.mark.parametrize("client", list(SERVER))


def _built(client: str) -> None:
    try:
        DRIVERS[client].command()
    except BackendMissing as exc:
        pytest.skip(str(exc))


def _url(server, client: str) -> str:
    _built(client)
    return f"{server.url()}{'&' if '?' in server.url() else '?'}client={client}"


def _memcached(server) -> pymemcache.client.base.Client:
    host, port = server.url().split("//")[1].split("/")[0].split("?")[0].split(":")
    return pymemcache.client.base.Client((host, int(port)))


@CLIENTS
def test_hits_and_misses_as_predicted_and_cleanup_keeps_foreign_keys(client, request):
    server = request.getfixturevalue(f"{SERVER[client]}_server")
    url = _url(server, client)
    foreign = _foreign(server)

    prefilled = run_target(url, _workload(mix={"get": 1}, ops=600))
    assert prefilled.status == "ok", prefilled.reason
    get = _op(prefilled, "get")
    assert (get["count"], get["hits"], get["misses"], get["errors"]) == (600, 600, 0, {})
    assert get["bytes_in"] > 600 * 100 and get["summary"]["p50_us"] > 0
    info = prefilled.backend["info"]
    assert info["driver"] == client and info["runtime"].startswith("go ")
    library = {"go-redis": "go-redis", "go-memcache": "gomemcache"}[client]
    assert info["client_library"] == library and info["client_library_version"] == info["libraries"][library]

    cold = run_target(url, _workload(mix={"get": 1, "exists+get": 1, "get_many": 1}, ops=450, prefill=False))
    assert cold.status == "ok", cold.reason
    ops = cold.phases[0]["ops"]
    assert sum(op["count"] for op in ops.values()) == 450
    assert all(op["hits"] == 0 and op["misses"] == op["count"] and not op["errors"] for op in ops.values())

    mixed = run_target(url, _workload(mix={"get": 6, "set": 3, "delete": 1, "get_many": 1, "exists+get": 1},
                                      ops=800, verify_writes=1.0))
    assert mixed.status == "ok", mixed.reason
    ops = mixed.phases[0]["ops"]
    assert sum(op["count"] for op in ops.values()) == 800
    for op in ops.values():
        assert op["hits"] + op["misses"] == op["count"] or op["misses"] == op["hits"] == 0
        assert not op["errors"], op["errors"]  # every read verified, every write read back
    assert ops["set"]["hits"] == ops["set"]["misses"] == 0  # writes are ok, not hits
    assert ops["get"]["hits"] > 0 and ops["delete"]["hits"] > 0 and ops["get_many"]["hits"] > 0

    assert foreign() == (b"mine", b"another run's")  # cleanup removed only the runs' own keys
    if client == "go-redis":
        r = redis.Redis.from_url(server.url())
        for run in (prefilled, cold, mixed):
            assert not list(r.scan_iter(match=run.backend["namespace"] + "*"))


@CLIENTS
def test_a_value_of_the_wrong_shape_is_a_verify_error(client, request):
    """The protocol by hand: prefill writes 50-byte values for a workload whose values are 100 bytes."""
    server = request.getfixturevalue(f"{SERVER[client]}_server")
    target = parse_target(_url(server, client))
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    workload = _workload(keys=10, value_size=100)
    d = DriverProcess(DRIVERS[client], 0)
    try:
        hello, _ = d.recv(30)
        assert (hello["type"], hello["protocol"], hello["driver"]) == ("hello", 1, client)
        ready, _ = d.request(setup_message(target, workload, namespace, 0), expect="ready")
        assert ready["client"] == {"go-redis": "redis.Client", "go-memcache": "memcache.Client"}[client]
        ids = np.arange(10, dtype="<u4")
        prefilled, _ = d.request({"type": "prefill", "count": 10},
                                 ids.tobytes() + np.full(10, 50, dtype="<u4").tobytes(), expect="prefilled")
        assert (prefilled["written"], prefilled["refused"], prefilled["error_sample"]) == (10, 0, None)
        ops = np.zeros(10, dtype="u1").tobytes() + ids.tobytes() + np.full(10, 100, dtype="<u4").tobytes()
        d.request({"type": "ops", "entries": [["get"]], "count": 10, "schedule": False}, ops, expect="loaded")
        done, blob = d.request({"type": "go", "verify_reads": 1.0}, expect="done")
        assert done["count"] == 10 and len(blob) == 17 * 10
        kinds = done["error_kinds"]
        assert [kinds[c - 3] for c in blob[:10]] == ["verify"] * 10
        assert "unexpected value of 50 B" in done["error_samples"][0]
        with pytest.raises(UnsupportedOp, match="does not run incr"):  # refused with the op's name
            d.request({"type": "ops", "entries": [["incr"]], "count": 1, "schedule": False}, bytes(9))
    finally:
        d.close()
        if client == "go-redis":
            redis.Redis.from_url(server.url()).delete(*[f"{namespace}{i}" for i in range(10)])
        else:
            _memcached(server).delete_many([f"{namespace}{i}" for i in range(10)])


@pytest.mark.parametrize("client", ["go-redis"])
def test_a_null_scheme_runs_the_loop_alone(client, memcached_server):
    """scheme null: no server, a do-nothing client (the driver's own loop cost); every read misses."""
    _built(client)
    target = parse_target(f"{memcached_server.url()}")
    workload = _workload(keys=100, value_size=100)
    d = DriverProcess(DRIVERS[client], 0)
    try:
        d.recv(30)
        setup = dict(setup_message(target, workload, "cm:00000000:", 0), scheme=None)
        assert d.request(setup, expect="ready")[0]["client"] == "null"
        n = 20_000
        ops = (np.zeros(n, dtype="u1").tobytes() + (np.arange(n, dtype="<u4") % 100).tobytes()
               + np.full(n, 100, dtype="<u4").tobytes())
        d.request({"type": "ops", "entries": [["get"]], "count": n, "schedule": False}, ops, expect="loaded")
        done, blob = d.request({"type": "go", "verify_reads": 0.0, "verify_writes": 0.0}, expect="done")
        assert done["count"] == n and set(blob[:n]) == {2}
        assert done["wall_ns"] / n < 20_000  # far below a network round trip (~1 µs when the VM is quiet)
    finally:
        d.close()


@CLIENTS
def test_refused_writes_are_errors(client, spawn):
    options = {"go-redis": {"maxmemory": "1mb", "maxmemory_policy": "noeviction"},
               "go-memcache": {"max_item_size": "1k"}}[client]
    server = spawn(SERVER[client], **options)
    outcome = run_target(_url(server, client), _workload(mix={"set": 1}, ops=200, value_size=20_000, prefill=False,
                                                         workers=1, on_error="continue"))
    set_ = _op(outcome, "set")
    assert set_["count"] == 200
    assert set_["errors"].get("server", 0) > 100, set_["errors"]
    said = {"go-redis": "OOM", "go-memcache": "SERVER_ERROR"}[client]
    assert any(said in s for s in outcome.phases[0]["error_samples"]), outcome.phases[0]["error_samples"]


@CLIENTS
@pytest.mark.serial
def test_errors_are_counted_when_the_server_dies_mid_run(client, spawn):
    server = spawn(SERVER[client])
    outcome = run_killing_the_server(server, _url(server, client), _workload(
        mix={"get": 9, "set": 1}, duration=2, workers=1, prefill=False, on_error="continue"))
    assert_ops_then_errors(outcome)
    assert outcome.took_s < 15  # a dead server does not hang the loop
    assert 0.5 < outcome.phases[0]["wall_s"] < 5


@CLIENTS
@pytest.mark.serial
def test_open_loop_follows_the_schedule_and_keeps_both_latencies(client, request):
    server = request.getfixturevalue(f"{SERVER[client]}_server")
    outcome = run_target(_url(server, client), _workload(mix={"get": 1}, rate=200, duration=1.0, workers=1, keys=50))
    assert outcome.status == "ok", outcome.reason
    phase = outcome.phases[0]
    get = phase["ops"]["get"]
    assert phase["mode"] == "open" and 150 <= get["count"] <= 201 and get["hits"] == get["count"]
    assert get["summary"]["p50_us"] >= get["summary_uncorrected"]["p50_us"] > 0  # from the intended start
    assert sum(s["ops"] for s in phase["timeseries"]) == get["count"]
    assert 0.9 < phase["wall_s"] < 2  # the schedule's 1 s and the last reply (wide: a busy CI host)


def test_cli_get_through_gomemcache(tmp_path):
    _built("go-memcache")
    result, run = cli_get_run(tmp_path, "spawn:memcached?client=go-memcache")
    info = run["backend"]["info"]
    assert info["runtime"].startswith("go ") and info["client_library"] == "gomemcache"
    assert info["client_version"] == f"{info['libraries']['gomemcache']} ({info['runtime']})"
    assert f"via go-memcache {info['client_version']}" in " ".join(result.stdout.split())
    op = run["phases"][0]["ops"]["get"]
    assert (op["count"], op["hits"]) == (500, 500)


def test_go_redis_authenticates_with_the_targets_password(redis_server_auth):
    outcome = run_target(_url(redis_server_auth, "go-redis"), _workload(mix={"get": 1}, ops=100, workers=1))
    assert outcome.status == "ok", outcome.reason
    assert (_op(outcome, "get")["hits"], _op(outcome, "get")["errors"]) == (100, {})
