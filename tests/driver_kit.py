"""What the driver tests share (docs/drivers.md): the skip when a driver cannot start here, its URL,
the workload they start from, a plain Python client on the same server (to plant foreign keys and to
watch the load), and a run during which the server is killed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pymemcache.client.base
import pytest
import redis

from cachemark.errors import BackendMissing
from cachemark.measure.summary import OpRecord
from cachemark.run.driver import DRIVERS, DriverFailed, DriverProcess
from cachemark.run.runner import run_target
from cachemark.spec import Workload

_CANNOT_START: dict[str, str] = {}  # driver name -> why it cannot run here ("" when it can)


def needs_driver(name: str) -> str:
    """The driver's name, or a skip saying (in one line) what to install: its runtime or build is
    missing, or it starts but says a library is (its hello is an error of kind ``missing``). Asked
    once per driver and session."""
    if name not in _CANNOT_START:
        try:
            d = DriverProcess(DRIVERS[name], 0)
        except (BackendMissing, DriverFailed) as exc:
            _CANNOT_START[name] = str(exc).splitlines()[0]
        else:
            try:
                hello, _ = d.recv(120)
                missing = hello.get("type") == "error" and hello.get("kind") == "missing"
                _CANNOT_START[name] = str(hello.get("message", "")).splitlines()[0] if missing else ""
            except DriverFailed as exc:
                _CANNOT_START[name] = str(exc).splitlines()[0]
            finally:
                d.close()
    if _CANNOT_START[name]:
        pytest.skip(_CANNOT_START[name])
    return name


def with_client(server_url: str, client: str, **params: Any) -> str:
    extra = "&".join(f"{k}={v}" for k, v in {"client": client, **params}.items())
    return f"{server_url}{'&' if '?' in server_url else '?'}{extra}"


def workload(**fields: Any) -> Workload:
    base = {"keys": 200, "key_dist": "uniform", "value_size": "100-2000", "workers": 2, "warmup": 0,
            "verify_reads": 1.0}
    return Workload(**(base | fields))


def op(outcome: Any, name: str) -> OpRecord:
    return outcome.phases[0].ops[name]


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


def handshake(name: str, target_url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A driver's hello and its ready to a setup for ``target_url`` (then bye): what it says it built."""
    import uuid

    from cachemark.run.driver import setup_message
    from cachemark.target import parse_target

    needs_driver(name)
    d = DriverProcess(DRIVERS[name], 0)
    try:
        hello, _ = d.recv(120)
        ready, _ = d.request(setup_message(parse_target(target_url), workload(keys=10), f"cm:{uuid.uuid4().hex[:8]}:",
                                           0), expect="ready")
    finally:
        d.close()
    return hello, ready
