"""Drivers in other stacks (docs/drivers.md): the Ruby driver (Rails.cache) against real servers.

Every test runs real servers and the real driver program; none mocks a client. The Ruby
tests skip, with the reason, where ruby and its gems are not installed.
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

from cachemark.run import driver as driver_mod
from cachemark.run.driver import DRIVERS, DriverProcess, setup_message
from cachemark.run.runner import run_target
from cachemark.target import parse_target

sys.path.insert(0, str(Path(__file__).parent))
from driver_kit import assert_ops_then_errors, run_killing_the_server
from driver_kit import op as _op  # noqa: E402
from driver_kit import workload as _workload  # noqa: E402

CLIENT = "client=ruby-activesupport"


def _ruby_ready() -> str:
    if shutil.which("ruby") is None:
        return "ruby is not installed"
    probe = subprocess.run(["ruby", "-e", 'require "active_support"; require "dalli"; require "redis"'],
                           capture_output=True, text=True, timeout=60)
    return "" if probe.returncode == 0 else f"ruby gems missing: {probe.stderr.strip()[:200]}"


_MISSING = _ruby_ready()
needs_ruby = pytest.mark.skipif(bool(_MISSING), reason=_MISSING or "ruby ready")


def _foreign(server) -> tuple[str, callable]:
    """Write a key outside any run's namespace; return it and a function reading it back."""
    if server.url().startswith("redis"):
        client = redis.Redis.from_url(server.url())
        client.set("foreign:keep", b"mine")
        client.set("cm:00000000:1", b"another run's")
        return "redis", lambda: (client.get("foreign:keep"), client.get("cm:00000000:1"))
    host, port = server.url().split("//")[1].split("/")[0].split(":")
    client = pymemcache.client.base.Client((host, int(port)))
    client.set("foreign:keep", b"mine")
    client.set("cm:00000000:1", b"another run's")
    return "memcached", lambda: (client.get("foreign:keep"), client.get("cm:00000000:1"))


@needs_ruby
@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_hits_and_misses_as_predicted_and_cleanup_keeps_foreign_keys(kind, request):
    server = request.getfixturevalue(f"{kind}_server")
    _, foreign = _foreign(server)
    url = f"{server.url()}{'&' if '?' in server.url() else '?'}{CLIENT}"

    prefilled = run_target(url, _workload(mix={"get": 1}, ops=600))
    assert prefilled.status == "ok", prefilled.reason
    get = _op(prefilled, "get")
    assert (get["count"], get["hits"], get["misses"], get["errors"]) == (600, 600, 0, {})
    assert get["bytes_in"] > 600 * 100 and get["summary"]["p50_us"] > 0
    info = prefilled.backend["info"]
    assert info["driver"] == "ruby-activesupport" and info["runtime"].startswith("ruby ")
    store = {"redis": "RedisCacheStore", "memcached": "MemCacheStore"}[kind]
    assert info["store"] == f"ActiveSupport::Cache::{store}" and info["client_library_version"]

    cold = run_target(url, _workload(mix={"get": 1, "exists+get": 1}, ops=400, prefill=False))
    assert cold.status == "ok", cold.reason
    ops = cold.phases[0]["ops"]
    assert sum(op["count"] for op in ops.values()) == 400
    assert all(op["hits"] == 0 and op["misses"] == op["count"] and not op["errors"] for op in ops.values())

    mixed = run_target(url, _workload(mix={"get": 6, "set": 3, "delete": 1, "get_many": 1}, ops=800))
    assert mixed.status == "ok", mixed.reason
    ops = mixed.phases[0]["ops"]
    assert sum(op["count"] for op in ops.values()) == 800
    for op in ops.values():
        assert op["hits"] + op["misses"] + sum(op["errors"].values()) <= op["count"]
        assert not op["errors"]
    assert ops["set"]["hits"] == ops["set"]["misses"] == 0  # writes are ok, not hits

    assert foreign() == (b"mine", b"another run's")  # cleanup removed only the runs' own keys
    if kind == "redis":
        client = redis.Redis.from_url(server.url())
        for run in (prefilled, cold, mixed):
            assert not list(client.scan_iter(match=run.backend["namespace"] + "*"))


@needs_ruby
def test_memory_store_is_per_process_and_file_store_stays_in_the_runs_directory(tmp_path):
    # MemoryStore: each of the 2 drivers has its own cache, so each prefills every key: all hits
    memory = run_target(f"memory://?{CLIENT}", _workload(mix={"get": 1}, ops=400))
    assert memory.status == "ok", memory.reason
    assert memory.backend["info"]["store"] == "ActiveSupport::Cache::MemoryStore"
    assert (_op(memory, "get")["hits"], _op(memory, "get")["misses"]) == (400, 0)

    (tmp_path / "foreign.txt").write_text("mine")
    file = run_target(f"file://{tmp_path}?{CLIENT}", _workload(mix={"get": 1, "exists": 1}, ops=400))
    assert file.status == "ok", file.reason
    assert file.backend["info"]["store"] == "ActiveSupport::Cache::FileStore"
    assert sum(op["hits"] for op in file.phases[0]["ops"].values()) == 400
    assert file.backend["cleanup_removed"] >= 200  # Rails' files, in the run's own directory, removed
    assert [p.name for p in tmp_path.iterdir()] == ["foreign.txt"]


def test_client_on_a_scheme_without_a_client_choice_must_name_a_driver():
    from cachemark.errors import SpecError
    from cachemark.schemes import check_params

    check_params(parse_target(f"memory://?{CLIENT}"))
    with pytest.raises(SpecError, match="only to name a driver: php-symfony, ruby-activesupport"):
        check_params(parse_target("file:///tmp/x?client=redis-py"))


@needs_ruby
@pytest.mark.parametrize(("kind", "options", "size", "said"), [
    ("redis", {"maxmemory": "1mb", "maxmemory_policy": "noeviction"}, 20_000, "OOM"),
    # Rails compresses values over 1 KiB: the filler shrinks ~80x, so 300 KB still exceeds 1 KiB
    ("memcached", {"max_item_size": "1k"}, 300_000, "Value too large"),
])
def test_refused_writes_are_errors(spawn, kind, options, size, said):
    """Rails answers a refused write with false (its failsafe); the driver counts it as an error."""
    server = spawn(kind, **options)
    outcome = run_target(f"{server.url()}?{CLIENT}",
                         _workload(mix={"set": 1}, ops=200, keys=200, value_size=size, prefill=False, workers=1,
                                   on_error="continue"))
    set_ = _op(outcome, "set")
    assert set_["count"] == 200
    assert set_["errors"].get("server", 0) > 100, set_["errors"]
    assert any(said in s for s in outcome.phases[0]["error_samples"])


@needs_ruby
def test_a_value_of_the_wrong_shape_is_a_verify_error(redis_server):
    """The protocol by hand: prefill writes 50-byte values for a workload whose values are 100 bytes."""
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    target = parse_target(f"{redis_server.url()}?{CLIENT}")
    workload = _workload(keys=10, value_size=100)
    d = DriverProcess(DRIVERS["ruby-activesupport"], 0)
    try:
        hello, _ = d.recv(30)
        assert hello["type"] == "hello" and hello["protocol"] == 1
        ready, _ = d.request(setup_message(target, workload, namespace, 0), expect="ready")
        assert ready["client"] == "ActiveSupport::Cache::RedisCacheStore"
        ids = np.arange(10, dtype="<u4")
        d.request({"type": "prefill", "count": 10}, ids.tobytes() + np.full(10, 50, dtype="<u4").tobytes(),
                  expect="prefilled")
        ops = np.zeros(10, dtype="u1").tobytes() + ids.tobytes() + np.full(10, 100, dtype="<u4").tobytes()
        d.request({"type": "ops", "entries": [["get"]], "count": 10, "schedule": False}, ops, expect="loaded")
        done, blob = d.request({"type": "go", "verify_reads": 1.0}, expect="done")
        assert done["count"] == 10 and len(blob) == 17 * 10
        kinds = done["error_kinds"]
        assert [kinds[c - 3] for c in blob[:10]] == ["verify"] * 10
    finally:
        d.close()
        redis.Redis.from_url(redis_server.url()).delete(*[f"{namespace}{i}" for i in range(10)])


@needs_ruby
@pytest.mark.serial
def test_errors_are_counted_when_the_server_dies_mid_run(spawn):
    server = spawn("redis")
    outcome = run_killing_the_server(server, f"{server.url()}?{CLIENT}", _workload(
        mix={"get": 9, "set": 1}, duration=3, workers=1, prefill=False, on_error="continue"))
    assert_ops_then_errors(outcome)
    assert "cleanup failed" in outcome.backend.get("cleanup_error", "")


def test_a_missing_runtime_skips_the_run_with_one_line(monkeypatch, memcached_server):
    monkeypatch.setenv("CACHEMARK_RUBY", "/nonexistent/ruby")
    outcome = run_target(f"{memcached_server.url()}?{CLIENT}", _workload(mix={"get": 1}, ops=10))
    assert outcome.status == "skipped"
    assert "\n" not in outcome.reason and "apt-get install ruby" in outcome.reason


@pytest.mark.serial
def test_a_hung_or_dead_driver_fails_the_run_quickly(monkeypatch, tmp_path, memcached_server):
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    monkeypatch.setattr(driver_mod, "HELLO_TIMEOUT_S", 1.0)
    monkeypatch.setenv("CACHEMARK_RUBY", str(hang))
    started = time.monotonic()
    outcome = run_target(f"{memcached_server.url()}?{CLIENT}", _workload(mix={"get": 1}, ops=10))
    assert outcome.status == "failed" and "did not answer 'hello' within 1 s" in outcome.reason
    assert time.monotonic() - started < 15

    monkeypatch.setenv("CACHEMARK_RUBY", shutil.which("false") or "/bin/false")
    outcome = run_target(f"{memcached_server.url()}?{CLIENT}", _workload(mix={"get": 1}, ops=10))
    assert outcome.status == "failed" and "exited during 'hello'" in outcome.reason, outcome.reason

    plain = tmp_path / "cachemark-driver"  # a built driver that is not executable
    plain.write_text("not a program\n")
    monkeypatch.setenv("CACHEMARK_GO_DRIVER", str(plain))
    outcome = run_target(f"{memcached_server.url()}?client=go-memcache", _workload(mix={"get": 1}, ops=10))
    assert outcome.status == "failed" and f"cannot start {plain}: not executable" in outcome.reason, outcome.reason


@needs_ruby
def test_cli_exists_then_get_through_rails_cache(tmp_path):
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "cachemark", "run", "-t", f"spawn:memcached?{CLIENT}", "--mix", "exists+get=100",
         "--ops", "500", "--keys", "100", "--workers", "1", "--warmup", "0", "--no-calibrate", "-o", "out.json"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "exists+get" in result.stdout
    run = json.loads((tmp_path / "out.json").read_text())["runs"][0]
    assert run["status"] == "ok"
    info = run["backend"]["info"]
    assert info["runtime"].startswith("ruby ") and info["client_library"] == "dalli"
    assert info["libraries"]["dalli"] == info["client_library_version"]
    assert info["client_version"] == (f"{info['libraries']['activesupport']} (dalli {info['client_library_version']}, "
                                      f"{info['runtime']})")
    assert f"via ruby-activesupport {info['client_version']}" in " ".join(result.stdout.split())
    op = run["phases"][0]["ops"]["exists+get"]
    assert (op["count"], op["hits"]) == (500, 500)


@needs_ruby
@pytest.mark.serial
def test_ctrl_c_keeps_what_the_driver_measured(tmp_path):
    """Ctrl-C (to the process group, as a terminal sends it) stops the drivers' loops; what they
    ran is saved and the run marked interrupted."""
    argv = [sys.executable, "-m", "cachemark", "run", "-t", f"spawn:redis?{CLIENT}", "--duration", "60",
            "--warmup", "0", "--workers", "1", "--keys", "1000", "--no-calibrate", "-o", "out.json"]
    run = None
    for wait in (5, 10):  # a slow start-up may not have reached the timed phase yet
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


@needs_ruby
@pytest.mark.serial
def test_open_loop_follows_the_schedule_and_keeps_both_latencies(redis_server):
    outcome = run_target(f"{redis_server.url()}?{CLIENT}",
                         _workload(mix={"get": 1}, rate=200, duration=1.0, workers=1, keys=50))
    assert outcome.status == "ok", outcome.reason
    phase = outcome.phases[0]
    get = phase["ops"]["get"]
    assert phase["mode"] == "open" and 150 <= get["count"] <= 201 and get["hits"] == get["count"]
    assert get["summary"]["p50_us"] >= get["summary_uncorrected"]["p50_us"] > 0  # from the intended start
    assert sum(s["ops"] for s in phase["timeseries"]) == get["count"]
