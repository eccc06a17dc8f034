"""Large GET values the engine does not verify are discarded from the socket unread.

From 16 KiB of a value still to come, an unverified GET's value is consumed with
``recv(MSG_TRUNC)`` (TCP: the kernel drops the bytes without copying them out); only its
length is needed. These tests hold that path to the same counts as the copying one, against
a real redis-server and memcached (text, meta and binary protocols), on both I/O backends:
every GET a hit, the payload bytes exact, and ``wire_bytes_in`` equal to what the server
itself says it sent (``INFO stats total_net_output_bytes``, memcached ``stats
bytes_written``). With ``verify_fraction=1`` nothing is discarded and every value is checked
byte for byte; at 0.5 discarded and verified values alternate on the same sockets, among
pipelined replies and small values.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from cachemark.engine import run_load
from io_backends import need_io

pytestmark = pytest.mark.timeout(120)

BIG, SMALL = 100_000, 300


@pytest.fixture(scope="module")
def servers(spawn_for_file):
    return {"redis": spawn_for_file("redis").port, "memcached": spawn_for_file("memcached", memory_mb=64).port}


def ask(port: int, request: bytes, end: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        out = b""
        while not out.endswith(end):
            chunk = s.recv(65536)
            assert chunk, "the server closed"
            out += chunk
    return out


def redis_sent(port: int) -> tuple[int, int]:
    """Bytes the server has sent (not counting this reply), and this reply's length."""
    out = ask(port, b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n", b"\r\n\r\n")
    sent = next(ln for ln in out.decode().splitlines() if ln.startswith("total_net_output_bytes:"))
    return int(sent.split(":")[1]), len(out)


def memcached_sent(port: int) -> tuple[int, int]:
    out = ask(port, b"stats\r\n", b"END\r\n")
    sent = next(ln for ln in out.decode().splitlines() if ln.startswith("STAT bytes_written "))
    return int(sent.split()[2]), len(out)


def settled(sent, port: int) -> tuple[int, int]:
    """``sent(port)`` once the server writes nothing else between two asks: a reply to the previous run's
    last pipelined requests (never read: that run was over) may still be on its way on a busy host."""
    deadline = time.monotonic() + 5
    last = sent(port)
    while True:
        now = sent(port)
        if now[0] == last[0] + last[1] or time.monotonic() > deadline:
            return now
        last = now


@pytest.mark.parametrize("verify", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("protocol", ["resp2", "memcache_text", "memcache_meta", "memcache_binary"])
@pytest.mark.parametrize("io", ["uring", "epoll"])
def test_large_unverified_values_are_counted_like_copied_ones(servers, io, protocol, verify):
    need_io(io)
    port = servers["redis" if protocol == "resp2" else "memcached"]
    sent = redis_sent if protocol == "resp2" else memcached_sent
    cfg = {
        "protocol": protocol,
        "servers": [f"127.0.0.1:{port}"],
        "io": io,
        "connections": 3,
        "pipeline": 3,  # pipelined replies: a discarded value's tail shares reads with the next reply
        "duration_s": 0.2,
        "keys": {"count": 30, "prefix": f"cm:disc{os.getpid()}{io}{protocol}{verify}:"},
        "values": {"sizes": [[BIG, 3], [SMALL, 1]]},
        "mix": [{"op": "get"}],
        "verify_fraction": verify,
        "timeout_ms": 3000,
    }
    run_load({**cfg, "prefill": True, "ops": 1})  # writes every key (sizes drawn per key, stable); 1 GET after
    before, asking = settled(sent, port)
    res = run_load({**cfg, "prefill": False, "warmup_s": 0, "duration_s": 0.8})
    on_the_wire = sent(port)[0] - before - asking
    get = res["ops"]["get"]
    assert get["count"] > 30 and get["errors"] == {}
    assert get["hits"] == get["count"], "every key was written: every GET hits"
    # Payload: each GET counted its value's exact size, BIG or SMALL.
    bigs, rest = divmod(get["bytes_in"] - SMALL * get["count"], BIG - SMALL)
    assert rest == 0 and 0 < bigs <= get["count"], (get["bytes_in"], get["count"])
    # Every byte the server sent was taken off the socket and counted, discarded or read
    # (the margin: the connections' set-up replies, PONG or a version line each).
    assert abs(res["wire_bytes_in"] - on_the_wire) <= 256, (res["wire_bytes_in"], on_the_wire)
