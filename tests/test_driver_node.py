"""The Node.js driver (drivers/node, docs/drivers.md): what is Node's own. Everything every driver
must do — hits and misses, verification, framing split anywhere, dropped and refused writes, a dying
server, Ctrl-C and SIGINT, open loop, passwords, the protocol — is in tests/test_driver_conformance.py,
which runs node-ioredis, node-redis and node-memjs.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid

import numpy as np
import pytest

from cachemark.run.driver import DRIVERS, DriverProcess, setup_message
from cachemark.target import parse_target
from driver_kit import handshake, needs_driver, with_client  # noqa: E402
from driver_kit import workload as _workload  # noqa: E402


@pytest.mark.parametrize(("name", "kind", "client"), [
    ("node-ioredis", "redis", "ioredis.Redis"), ("node-redis", "redis", "redis.RedisClient"),
    ("node-memjs", "memcached", "memjs.Client")])
def test_the_clients_are_ioredis_node_redis_and_memjs(name, kind, client, request):
    hello, ready = handshake(name, with_client(request.getfixturevalue(f"{kind}_server").url(), name))
    assert hello["runtime"].startswith("node ") and ready["client"] == client
    assert ready["client_version"] == hello["libraries"][ready["client_library"]]


def _by_hand(name: str, target_url: str, n: int, **setup) -> DriverProcess:
    """A driver taken by hand through hello, setup (with ``setup`` overriding fields) and n gets of keys 0..9."""
    d = DriverProcess(DRIVERS[needs_driver(name)], 0)
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
        assert time.monotonic() - started < 5  # the 0.2-s op timeout, 25x over; a lost request never ends
    finally:
        d.close()
        listener.close()
