"""The Java driver (drivers/java, docs/drivers.md): Jedis, Lettuce and spymemcached against real servers.

Every test runs real servers and the real driver jar; none mocks a client. Each test skips,
with one line, where java or the built jar (drivers/java/build.sh) is missing. JVMs start
slowly, so runs are small and use one or two workers.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import numpy as np
import pymemcache.client.base
import pytest
import redis

from cachemark.errors import BackendMissing
from cachemark.run.driver import DRIVERS, DriverProcess, setup_message
from cachemark.run.runner import run_target
from cachemark.spec import Phase, Workload
from cachemark.target import parse_target

sys.path.insert(0, str(Path(__file__).parent))
from driver_kit import assert_ops_then_errors, cli_get_run, run_killing_the_server  # noqa: E402

SERVER = {"java-jedis": "redis", "java-lettuce": "redis", "java-spymemcached": "memcached"}
STORE = {"java-jedis": "redis.clients.jedis.Jedis", "java-lettuce": "io.lettuce.core.RedisClient",
         "java-spymemcached": "net.spy.memcached.MemcachedClient"}
clients = pytest.mark.parametrize("client", list(SERVER))


def _needs_driver(client: str) -> None:
    try:
        DRIVERS[client].command()
    except BackendMissing as exc:
        pytest.skip(str(exc).splitlines()[0])


def _url(server, client: str, **params: object) -> str:
    url = server.url()
    extra = "&".join(f"{k}={v}" for k, v in {"client": client, **params}.items())
    return f"{url}{'&' if '?' in url else '?'}{extra}"


def _workload(**fields) -> Workload:
    base = {"keys": 100, "key_dist": "uniform", "value_size": "100-2000", "workers": 1, "warmup": 0,
            "verify_reads": 1.0}
    return Workload(**(base | fields))


def _memcached(server) -> pymemcache.client.base.Client:
    host, port = server.url().split("//")[1].split("/")[0].split("?")[0].split(":")
    return pymemcache.client.base.Client((host, int(port)))


def _foreign(server) -> callable:
    """Write keys outside any run's namespace; return a function reading them back."""
    client = redis.Redis.from_url(server.url()) if server.url().startswith("redis") else _memcached(server)
    client.set("foreign:keep", b"mine")
    client.set("cm:00000000:1", b"another run's")
    return lambda: (client.get("foreign:keep"), client.get("cm:00000000:1"))


@clients
def test_hits_and_misses_as_predicted_and_cleanup_keeps_foreign_keys(client, request):
    _needs_driver(client)
    server = request.getfixturevalue(f"{SERVER[client]}_server")
    foreign = _foreign(server)
    url = _url(server, client)

    # prefilled: every get hits (after an untimed warm-up batch); then a mixed phase. Two drivers at
    # once where the JVM starts quickly (Lettuce takes ~2.5 s of CPU to build its client)
    workers = 1 if client == "java-lettuce" else 2
    prefilled = run_target(url, _workload(workers=workers, warmup_ops=100, phases=[
        Phase(name="read", mix={"get": 1}, ops=400),
        Phase(name="mixed", mix={"get": 6, "set": 3, "delete": 1, "get_many": 1}, ops=400, warmup_ops=0)]))
    assert prefilled.status == "ok", prefilled.reason
    get = prefilled.phases[0]["ops"]["get"]
    assert (get["count"], get["hits"], get["misses"], get["errors"]) == (400, 400, 0, {})
    assert get["bytes_in"] > 400 * 100 and get["summary"]["p50_us"] > 0
    mixed = prefilled.phases[1]["ops"]
    assert sum(op["count"] for op in mixed.values()) == 400
    assert all(not op["errors"] and op["hits"] + op["misses"] <= op["count"] for op in mixed.values())
    assert mixed["set"]["hits"] == mixed["set"]["misses"] == 0  # writes are ok, not hits
    assert mixed["get"]["hits"] > 0 and mixed["delete"]["count"] > 0
    info = prefilled.backend["info"]
    library = client.removeprefix("java-")
    assert info["driver"] == client and info["runtime"].startswith("java ") and info["store"] == STORE[client]
    assert info["client_library"] == library and info["libraries"][library] == info["client_library_version"]
    assert info["client_version"] == f"{info['client_library_version']} ({info['runtime']})"

    # one driver, nothing written: every read misses, and exists+get stops at exists
    cold = run_target(url, _workload(mix={"get": 1, "exists+get": 1}, ops=300, prefill=False))
    assert cold.status == "ok", cold.reason
    ops = cold.phases[0]["ops"]
    assert sum(op["count"] for op in ops.values()) == 300 and set(ops) == {"get", "exists+get"}
    assert all(op["hits"] == 0 and op["misses"] == op["count"] and not op["errors"] for op in ops.values())

    assert foreign() == (b"mine", b"another run's")  # cleanup removed only the runs' own keys
    for run in (prefilled, cold):
        namespace = run.backend["namespace"]
        if SERVER[client] == "redis":
            assert not list(redis.Redis.from_url(server.url()).scan_iter(match=namespace + "*"))
        else:
            assert _memcached(server).get_many([f"{namespace}{i}" for i in range(100)]) == {}


@clients
def test_refused_writes_are_errors(spawn, client):
    _needs_driver(client)
    if SERVER[client] == "redis":
        server = spawn("redis", maxmemory="1mb", maxmemory_policy="noeviction")
        url, size, ops, said, refusals = _url(server, client), 20_000, 200, "OOM", 100
    else:
        # spymemcached gzips values over 16 KiB: 4,000 bytes stay over the 1 KiB limit. It answers a
        # SERVER_ERROR by dropping the connection, so the ops after one time out until it reconnects.
        server = spawn("memcached", max_item_size="1k")
        url, size, ops, said, refusals = _url(server, client, timeout=0.2), 4_000, 20, "too large", 1
    outcome = run_target(url, _workload(mix={"set": 1}, ops=ops, keys=ops, value_size=size, prefill=False,
                                        on_error="continue"))
    assert outcome.status == "ok", outcome.reason
    set_ = outcome.phases[0]["ops"]["set"]
    errors = set_["errors"]
    assert set_["count"] == ops and sum(errors.values()) == ops, errors  # not one write stored
    assert errors.get("server", 0) >= refusals and set(errors) <= {"server", "timeout"}, errors
    assert any(said in s for s in outcome.phases[0]["error_samples"]), outcome.phases[0]["error_samples"]


@clients
def test_a_value_of_the_wrong_shape_is_a_verify_error(client, request):
    """The protocol by hand: prefill writes 50-byte values for a workload whose values are 100 bytes."""
    _needs_driver(client)
    server = request.getfixturevalue(f"{SERVER[client]}_server")
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    target = parse_target(_url(server, client))
    d = DriverProcess(DRIVERS[client], 0)
    try:
        hello, _ = d.recv(30)
        assert hello["type"] == "hello" and hello["protocol"] == 1 and hello["driver"] == client
        ready, _ = d.request(setup_message(target, _workload(keys=10, value_size=100), namespace, 0), expect="ready")
        assert ready["client"] == STORE[client]
        ids = np.arange(10, dtype="<u4")
        prefilled, _ = d.request({"type": "prefill", "count": 10},
                                 ids.tobytes() + np.full(10, 50, dtype="<u4").tobytes(), expect="prefilled")
        assert (prefilled["written"], prefilled["refused"], prefilled["interrupted"]) == (10, 0, False)
        # get, then exists+get and get_many (10 keys from each id) on the same keys
        entries = np.array([0] * 10 + [1] * 5 + [2] * 5, dtype="u1")
        keys = np.concatenate([ids, ids[:5], np.zeros(5, dtype="<u4")])
        ops = entries.tobytes() + keys.tobytes() + np.full(20, 100, dtype="<u4").tobytes()
        d.request({"type": "ops", "entries": [["get"], ["exists", "get"], ["get_many"]], "count": 20,
                   "schedule": False}, ops, expect="loaded")
        done, blob = d.request({"type": "go", "duration_s": None, "cycle": False, "verify_reads": 1.0,
                                "verify_writes": 0.0, "stop_after_failing_s": None}, expect="done")
        assert done["count"] == 20 and len(blob) == 17 * 20
        kinds = done["error_kinds"]
        assert [kinds[c - 3] if c >= 3 else c for c in blob[:20]] == ["verify"] * 20
        assert any("unexpected value of 50 B" in s for s in done["error_samples"])
        assert done["bytes_in"] == [10 * 50, 5 * 50, 5 * 10 * 50] and not done["interrupted"]
        latencies = np.frombuffer(blob[9 * 20:], dtype="<u8")
        assert (latencies > 0).all() and (latencies < 5e9).all()
    finally:
        d.close()
        if SERVER[client] == "redis":
            redis.Redis.from_url(server.url()).delete(*[f"{namespace}{i}" for i in range(10)])
        else:
            _memcached(server).delete_many([f"{namespace}{i}" for i in range(10)])


@clients
@pytest.mark.serial
def test_errors_are_counted_when_the_server_dies_mid_run(spawn, client):
    _needs_driver(client)
    server = spawn(SERVER[client])
    timeout = {"socket_timeout": 0.5} if SERVER[client] == "redis" else {"timeout": 0.5}
    outcome = run_killing_the_server(server, _url(server, client, **timeout), _workload(
        mix={"get": 9, "set": 1}, duration=2, workers=1, prefill=False, on_error="continue"))
    assert_ops_then_errors(outcome)
    assert outcome.took_s < 30  # a dead server does not hang the loop
    assert outcome.phases[0]["wall_s"] < 4


def test_cli_run_through_lettuce(tmp_path):
    _needs_driver("java-lettuce")
    result, run = cli_get_run(tmp_path, "spawn:redis?client=java-lettuce")
    info = run["backend"]["info"]
    assert info["client_library"] == "lettuce" and info["runtime"].startswith("java ")
    assert f"via java-lettuce {info['client_version']}" in " ".join(result.stdout.split())
    op = run["phases"][0]["ops"]["get"]
    assert (op["count"], op["hits"], op["errors"]) == (500, 500, {})
