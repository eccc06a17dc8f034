"""The PHP driver (docs/drivers.md): Symfony Cache against real servers.

Every test runs real servers and the real driver program (drivers/php/cachemark_driver.php);
none mocks a client. They skip, with what to install, where php, phpredis, php-memcached
or symfony/cache is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pymemcache.client.base
import pytest
import redis

from cachemark.run.driver import DRIVERS, DriverProcess, setup_message
from cachemark.run.runner import run_target
from cachemark.target import parse_target
from cachemark.workload.ops import tags_for_key

sys.path.insert(0, str(Path(__file__).parent))
from driver_kit import assert_ops_then_errors, run_killing_the_server
from driver_kit import op as _op  # noqa: E402
from driver_kit import workload as _workload  # noqa: E402

CLIENT = "client=php-symfony"
SPEC = DRIVERS["php-symfony"]
INSTALL = "apt-get install php-cli php-redis php-memcached php-symfony-cache"


def _php_ready() -> str:
    """Empty when the driver says hello with both client extensions; else what is missing."""
    if shutil.which(os.environ.get("CACHEMARK_PHP", "php")) is None:
        return f"php is not installed: {INSTALL}"
    probe = subprocess.run(SPEC.command(), input="", capture_output=True, text=True, timeout=60)
    try:
        hello = json.loads(probe.stdout.splitlines()[0])
    except (IndexError, ValueError):
        return f"the PHP driver did not start ({probe.stderr.strip()[:200]}): {INSTALL}"
    libraries = hello.get("libraries") or {}
    if hello.get("type") != "hello" or not {"phpredis", "php-memcached"} <= set(libraries):
        return f"symfony/cache, phpredis or php-memcached missing ({hello.get('message', libraries)}): {INSTALL}"
    return ""


_MISSING = _php_ready()
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=_MISSING or "php ready")


def _url(server, *params: str) -> str:
    url = server.url()
    return url + ("&" if "?" in url else "?") + "&".join((CLIENT, *params))


def _foreign(server) -> callable:
    """Write keys outside the run's namespace; return a function reading them back."""
    if server.url().startswith("redis"):
        client = redis.Redis.from_url(server.url())
    else:
        host, port = server.url().split("//")[1].split("/")[0].split(":")
        client = pymemcache.client.base.Client((host, int(port)))
    client.set("foreign:keep", b"mine")
    client.set("cm:00000000:1", b"another run's")
    return lambda: (client.get("foreign:keep"), client.get("cm:00000000:1"))


@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_hits_and_misses_as_predicted_and_cleanup_keeps_foreign_keys(kind, request):
    server = request.getfixturevalue(f"{kind}_server")
    foreign = _foreign(server)
    url = _url(server)

    prefilled = run_target(url, _workload(mix={"get": 1}, ops=600))
    assert prefilled.status == "ok", prefilled.reason
    get = _op(prefilled, "get")
    assert (get["count"], get["hits"], get["misses"], get["errors"]) == (600, 600, 0, {})
    assert get["bytes_in"] > 600 * 100 and get["summary"]["p50_us"] > 0
    info = prefilled.backend["info"]
    adapter = {"redis": "RedisAdapter", "memcached": "MemcachedAdapter"}[kind]
    assert info["driver"] == "php-symfony" and info["runtime"].startswith("php 8.")
    assert info["store"] == f"Symfony\\Component\\Cache\\Adapter\\{adapter}"
    assert info["client_library"] == "symfony/cache"
    assert info["client_library_version"] == info["libraries"]["symfony/cache"] != "unknown"
    assert info["libraries"]["phpredis"] and info["libraries"]["php-memcached"]

    cold = run_target(url, _workload(mix={"get": 1, "exists+get": 1, "exists": 1, "get_many": 1}, ops=400,
                                     prefill=False))
    assert cold.status == "ok", cold.reason
    ops = cold.phases[0]["ops"]
    assert sum(op["count"] for op in ops.values()) == 400
    assert all(op["hits"] == 0 and op["misses"] == op["count"] and not op["errors"] for op in ops.values())

    # one worker: Symfony 5.4's MemcachedAdapter retries every delete of an existing key (it takes
    # php-memcached's `true` for a failure), and a retry racing another worker's write answers false
    mixed = run_target(url, _workload(mix={"get": 6, "set": 3, "delete": 1, "get_many": 1, "exists+get": 1},
                                      ops=800, workers=1, verify_writes=0.1))
    assert mixed.status == "ok", mixed.reason
    ops = mixed.phases[0]["ops"]
    assert sum(op["count"] for op in ops.values()) == 800
    assert all(not op["errors"] for op in ops.values()), {n: op["errors"] for n, op in ops.items()}
    assert ops["get"]["hits"] > 0 and ops["get_many"]["hits"] + ops["get_many"]["misses"] == ops["get_many"]["count"]
    for name in ("set", "delete"):  # ok, neither hit nor miss (deleteItem does not say whether the key existed)
        assert ops[name]["hits"] == ops[name]["misses"] == 0 and ops[name]["count"] > 0

    assert foreign() == (b"mine", b"another run's")  # cleanup removed only the runs' own keys
    if kind == "redis":
        client = redis.Redis.from_url(server.url())
        for run in (prefilled, cold, mixed):
            assert not list(client.scan_iter(match=run.backend["namespace"] + "*"))
    else:  # every key the driver wrote was namespace + i: cachemark's deletes found them all
        host, port = server.url().split("//")[1].split("/")[0].split(":")
        client = pymemcache.client.base.Client((host, int(port)))
        for run in (prefilled, mixed):
            ns = run.backend["namespace"]
            assert not client.get_many([f"{ns}{i}" for i in range(200)])


def test_file_store_stays_in_the_runs_directory(tmp_path):
    (tmp_path / "foreign.txt").write_text("mine")
    file = run_target(f"file://{tmp_path}?{CLIENT}", _workload(mix={"get": 1, "exists": 1}, ops=400))
    assert file.status == "ok", file.reason
    assert file.backend["info"]["store"] == "Symfony\\Component\\Cache\\Adapter\\FilesystemAdapter"
    assert sum(op["hits"] for op in file.phases[0]["ops"].values()) == 400
    assert file.backend["cleanup_removed"] >= 200  # Symfony's files, in the run's own directory, removed
    assert [p.name for p in tmp_path.iterdir()] == ["foreign.txt"]


def test_a_value_of_the_wrong_shape_is_a_verify_error(redis_server):
    """The protocol by hand: prefill writes 50-byte values for a workload whose values are 100 bytes."""
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    target = parse_target(_url(redis_server))
    workload = _workload(keys=10, value_size=100)
    d = DriverProcess(SPEC, 0)
    try:
        hello, _ = d.recv(30)
        assert hello["type"] == "hello" and hello["protocol"] == 1 and hello["runtime"].startswith("php ")
        ready, _ = d.request(setup_message(target, workload, namespace, 0), expect="ready")
        assert ready["client"] == "Symfony\\Component\\Cache\\Adapter\\RedisAdapter"
        ids = np.arange(10, dtype="<u4")
        d.request({"type": "prefill", "count": 10}, ids.tobytes() + np.full(10, 50, dtype="<u4").tobytes(),
                  expect="prefilled")
        ops = np.zeros(10, dtype="u1").tobytes() + ids.tobytes() + np.full(10, 100, dtype="<u4").tobytes()
        d.request({"type": "ops", "entries": [["get"]], "count": 10, "schedule": False}, ops, expect="loaded")
        done, blob = d.request({"type": "go", "verify_reads": 1.0}, expect="done")
        assert done["count"] == 10 and len(blob) == 17 * 10
        kinds = done["error_kinds"]
        assert [kinds[c - 3] for c in blob[:10]] == ["verify"] * 10
        assert "unexpected value of 50 B" in done["error_samples"][0]
    finally:
        d.close()
        redis.Redis.from_url(redis_server.url()).delete(*[f"{namespace}{i}" for i in range(10)])


def test_refused_writes_are_errors(spawn):
    """Symfony answers a refused write with false (its failsafe); the driver counts it as a server error."""
    server = spawn("redis", maxmemory="1mb", maxmemory_policy="noeviction")
    outcome = run_target(_url(server), _workload(mix={"set": 1}, ops=200, keys=200, value_size=20_000,
                                                 prefill=False, workers=1, on_error="continue"))
    set_ = _op(outcome, "set")
    assert set_["count"] == 200
    assert set_["errors"].get("server", 0) > 100, set_["errors"]
    assert any("OOM" in s for s in outcome.phases[0]["error_samples"]), outcome.phases[0]["error_samples"]


@pytest.mark.serial
def test_errors_are_counted_when_the_server_dies_mid_run(spawn):
    server = spawn("redis")
    outcome = run_killing_the_server(server, _url(server), _workload(
        mix={"get": 9, "set": 1}, duration=2, workers=1, prefill=False, on_error="continue"))
    assert_ops_then_errors(outcome)
    assert "cleanup failed" in outcome.backend.get("cleanup_error", "")


@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_clean_by_tag_invalidates_exactly_the_tagged_items(kind, request):
    """The protocol by hand: prefill 40 tagged keys, clean tag t3, then read every key: exactly the keys
    cachemark's tags_for_key gives t3 miss (so PHP computes the same tags), the others still hit."""
    server = request.getfixturevalue(f"{kind}_server")
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    workload = _workload(keys=40, value_size=100, workers=1, tags={"pool": 8, "min_per_key": 0, "max_per_key": 3})
    tagged = {k for k in range(40) if "t3" in tags_for_key(k, 8, 0, 3)}
    assert 0 < len(tagged) < 40
    d = DriverProcess(SPEC, 0)
    try:
        d.recv(30)
        ready, _ = d.request(setup_message(parse_target(_url(server)), workload, namespace, 0), expect="ready")
        assert ready["client"] == {"redis": "Symfony\\Component\\Cache\\Adapter\\RedisTagAwareAdapter",
                                   "memcached": "Symfony\\Component\\Cache\\Adapter\\TagAwareAdapter"
                                                "(MemcachedAdapter)"}[kind]
        ids = np.arange(40, dtype="<u4")
        prefilled, _ = d.request({"type": "prefill", "count": 40},
                                 ids.tobytes() + np.full(40, 100, dtype="<u4").tobytes(), expect="prefilled")
        assert (prefilled["written"], prefilled["refused"]) == (40, 0)
        # op 0: clean on key id 3 (tag "t3" = 3 % pool); ops 1..40: get every key
        entries = np.array([0] + [1] * 40, dtype="u1")
        keys = np.array([3, *range(40)], dtype="<u4")
        d.request({"type": "ops", "entries": [["clean"], ["get"]], "count": 41, "schedule": False},
                  entries.tobytes() + keys.tobytes() + np.full(41, 100, dtype="<u4").tobytes(), expect="loaded")
        done, blob = d.request({"type": "go", "verify_reads": 1.0}, expect="done")
        assert done["count"] == 41 and not done["error_samples"], done["error_samples"]
        assert blob[0] == 0  # the clean: ok
        assert {k for k in range(40) if blob[1 + k] == 2} == tagged  # misses: exactly the t3 keys
        assert all(blob[1 + k] == 1 for k in range(40) if k not in tagged)
        if kind == "redis":  # RedisTagAwareAdapter deletes the items of the tag
            client = redis.Redis.from_url(server.url())
            assert {k for k in range(40) if not client.exists(f"{namespace}{k}")} == tagged
    finally:
        d.close()
        if kind == "redis":
            client = redis.Redis.from_url(server.url())
            keys = list(client.scan_iter(match=namespace + "*"))
            assert keys, "the tag sets live under the namespace"
            client.delete(*keys)


@pytest.mark.parametrize("kind", ["redis", "memcached", "file"])
def test_tagged_mixed_run_with_clean(kind, request, tmp_path):
    url = f"file://{tmp_path}?{CLIENT}" if kind == "file" else _url(request.getfixturevalue(f"{kind}_server"))
    outcome = run_target(url, _workload(keys=300, mix={"get": 90, "set": 5, "clean": 5}, ops=1200,
                                        tags={"pool": 30, "min_per_key": 0, "max_per_key": 4}))
    assert outcome.status == "ok", outcome.reason
    ops = outcome.phases[0]["ops"]
    assert sum(op["count"] for op in ops.values()) == 1200
    clean_errors = sum(ops["clean"]["errors"].values()) if kind == "memcached" else 0
    if clean_errors:
        # Seen once in CI (2026-11-23, under load): Symfony's MemcachedAdapter said 'Failed to delete key
        # "t2 tags "' while two workers invalidated tags; the client's own failure, counted as it should be
        samples = outcome.phases[0]["error_samples"]
        assert clean_errors <= 0.05 * ops["clean"]["count"] and all("Failed to delete key" in m for m in samples)
    assert all(not op["errors"] for name, op in ops.items() if not (clean_errors and name == "clean")), \
        outcome.phases[0]["error_samples"]
    get = ops["get"]
    assert get["hits"] > 0 and get["misses"] > 0  # untagged keys still hit; cleaned ones miss
    assert ops["clean"]["count"] > 0 and ops["clean"]["hits"] == ops["clean"]["misses"] == 0
    ns = outcome.backend["namespace"]
    if kind == "redis":  # items and Symfony's tag sets, all under the namespace (the client's prefix)
        client = redis.Redis.from_url(request.getfixturevalue("redis_server").url())
        assert not list(client.scan_iter(match=ns + "*"))
    elif kind == "memcached":  # items, TagAwareAdapter's per-item tag versions and its tag keys ("\0" as "/")
        host, port = request.getfixturevalue("memcached_server").url().split("//")[1].split("/")[0].split(":")
        client = pymemcache.client.base.Client((host, int(port)))
        names = [f"{ns}{i}" for i in range(300)] + [f"{ns}/tags/{i}" for i in range(300)]
        assert not client.get_many(names + [f"{ns}t{j}/tags/" for j in range(30)])


def test_cli_magento_style_clean_by_tag(tmp_path):
    """The magento-clean-by-tag preset's workload through Symfony's RedisTagAwareAdapter."""
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "cachemark", "run", "magento-clean-by-tag", "-t", f"spawn:redis?{CLIENT}",
         "--mix", "get=90,set=5,clean=5", "--ops", "2000", "--keys", "500", "--workers", "2",
         "--no-calibrate", "-o", "out.json"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, (result.stdout, result.stderr)
    run = json.loads((tmp_path / "out.json").read_text())["runs"][0]
    assert run["status"] == "ok", run["reason"]
    info = run["backend"]["info"]
    assert info["store"] == "Symfony\\Component\\Cache\\Adapter\\RedisTagAwareAdapter"
    assert info["client_version"] == f"{info['libraries']['symfony/cache']} ({info['runtime']})"
    assert f"via php-symfony {info['client_version']}" in " ".join(result.stdout.split())
    ops = run["phases"][0]["ops"]
    assert sum(op["count"] for op in ops.values()) == 2000 and ops["clean"]["count"] > 0
    assert all(not op["errors"] for op in ops.values())


def test_a_missing_runtime_skips_the_run_with_one_line(monkeypatch, memcached_server):
    monkeypatch.setenv("CACHEMARK_PHP", "/nonexistent/php")
    outcome = run_target(_url(memcached_server), _workload(mix={"get": 1}, ops=10))
    assert outcome.status == "skipped"
    assert "\n" not in outcome.reason and "apt-get install php-cli" in outcome.reason


@pytest.mark.serial
def test_ctrl_c_keeps_what_the_driver_measured(tmp_path):
    """Ctrl-C (to the process group, as a terminal sends it) stops the driver's loop; what it ran is
    saved and the run marked interrupted."""
    argv = [sys.executable, "-m", "cachemark", "run", "-t", f"spawn:redis?{CLIENT}", "--duration", "60",
            "--warmup", "0", "--workers", "1", "--keys", "1000", "--no-calibrate", "-o", "out.json"]
    run = None
    for wait in (4, 8):  # a slow start-up may not have reached the timed phase yet
        (tmp_path / "out.json").unlink(missing_ok=True)
        proc = subprocess.Popen(argv, cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(wait)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "Traceback" not in stderr, stderr
        if (tmp_path / "out.json").exists():
            run = json.loads((tmp_path / "out.json").read_text())["runs"][0]
            if run["phases"]:
                break
    assert run and run["status"] == "interrupted" and run["phases"], run
    assert run["phases"][0]["ops"]["get"]["count"] > 0 and 0 < run["phases"][0]["wall_s"] < 60


@pytest.mark.serial
def test_open_loop_follows_the_schedule_and_keeps_both_latencies(redis_server):
    outcome = run_target(_url(redis_server), _workload(mix={"get": 1}, rate=200, duration=1.0, workers=1, keys=50))
    assert outcome.status == "ok", outcome.reason
    phase = outcome.phases[0]
    get = phase["ops"]["get"]
    assert phase["mode"] == "open" and 150 <= get["count"] <= 201 and get["hits"] == get["count"]
    assert get["summary"]["p50_us"] >= get["summary_uncorrected"]["p50_us"] > 0  # from the intended start
    assert sum(s["ops"] for s in phase["timeseries"]) == get["count"]
