"""What every driver's tests share (docs/drivers.md): the skip when a driver is not installed, its
URL, the workload they start from, a plain Python client on the same server (to plant foreign keys
and to watch the load), and a run during which the server is killed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pymemcache.client.base
import pytest
import redis

from cachemark.errors import BackendMissing
from cachemark.run.driver import DRIVERS
from cachemark.run.runner import run_target
from cachemark.spec import Workload


def needs_driver(name: str) -> str:
    """The driver's name, or a skip saying (in one line) what to install."""
    try:
        DRIVERS[name].command()
    except BackendMissing as exc:
        pytest.skip(str(exc).splitlines()[0])
    return name


def with_client(server_url: str, client: str, **params: Any) -> str:
    extra = "&".join(f"{k}={v}" for k, v in {"client": client, **params}.items())
    return f"{server_url}{'&' if '?' in server_url else '?'}{extra}"


def workload(**fields: Any) -> Workload:
    base = {"keys": 200, "key_dist": "uniform", "value_size": "100-2000", "workers": 2, "warmup": 0,
            "verify_reads": 1.0}
    return Workload(**(base | fields))


def op(outcome: Any, name: str) -> dict[str, Any]:
    return outcome.phases[0]["ops"][name]


def plain_client(server: Any) -> Any:
    """redis-py or pymemcache on the same server."""
    url = server.url()
    if url.startswith("redis"):
        return redis.Redis.from_url(url)
    host, port = url.split("//")[1].split("/")[0].split("?")[0].split(":")
    return pymemcache.client.base.Client((host, int(port)))


def write_foreign(server: Any) -> Callable[[], tuple[Any, Any]]:
    """Keys outside the run's namespace (one looks like another run's); a function reading them back."""
    client = plain_client(server)
    client.set("foreign:keep", b"mine")
    client.set("cm:00000000:1", b"another run's")
    return lambda: (client.get("foreign:keep"), client.get("cm:00000000:1"))


def load_ops(server: Any) -> int:
    """Gets and sets the server has executed: the load's, not the INFO calls that ask (each is a command)."""
    client = plain_client(server)
    if isinstance(client, redis.Redis):
        stats = client.info("commandstats")
        return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("get", "set"))
    stats = client.stats()
    return int(stats[b"cmd_get"]) + int(stats[b"cmd_set"])


def run_killing_the_server(server: Any, url: str, load: Workload, after: int = 300) -> Any:
    """Run ``load`` against ``url``; stop the server once it has served ``after`` gets and sets
    (no prefill, no warm-up: timed ops). The outcome, and how long the run took."""
    stop = threading.Event()

    def kill_once_the_load_runs() -> None:
        while not stop.is_set():
            if load_ops(server) > after:
                server.stop()
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_once_the_load_runs, daemon=True)
    started = time.monotonic()
    killer.start()
    try:
        outcome = run_target(url, load)
    finally:
        stop.set()
        killer.join(timeout=10)
    outcome.took_s = time.monotonic() - started
    return outcome


def assert_ops_then_errors(outcome: Any) -> None:
    """Ops succeeded, then failed as a dead server's do (connection or timeout), and the run ended well."""
    assert outcome.status == "ok", outcome.reason
    ops = outcome.phases[0]["ops"]
    errors = sum(sum(o["errors"].values()) for o in ops.values())
    assert 0 < errors < sum(o["count"] for o in ops.values())
    assert {k for o in ops.values() for k in o["errors"]} <= {"connection", "timeout"}, ops


def cli_get_run(tmp_path: Any, target: str) -> tuple[Any, dict[str, Any]]:
    """``cachemark run -t TARGET`` of 500 gets on 100 prefilled keys, as a user types it: the finished
    process (its stdout says which client) and the saved run."""
    import json
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "cachemark", "run", "-t", target, "--mix", "get=100", "--ops", "500", "--keys", "100",
         "--workers", "1", "--warmup", "0", "--no-calibrate", "-o", "out.json"],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}, timeout=120)
    assert result.returncode == 0, (result.stdout, result.stderr)
    run = json.loads((tmp_path / "out.json").read_text())["runs"][0]
    assert run["status"] == "ok", run.get("reason")
    return result, run
