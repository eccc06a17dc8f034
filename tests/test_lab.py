"""The lab's local servers: they answer, and they are gone after their context ends.

"Gone" means the process no longer exists, its port refuses connections and its
temp directory is removed — also when the body of the ``with`` raises, or the server was SIGSTOPped.
"""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from cachemark.errors import BackendMissing
from cachemark.lab import LocalServer, server_class
from cachemark.lab.base import find_binary

_BINARIES = {"redis": "redis-server", "memcached": "memcached"}


def make(kind: str, **options: object) -> LocalServer:
    """A server object (not started), or skip when its binary is not installed."""
    try:
        find_binary(_BINARIES[kind])
    except BackendMissing as exc:
        pytest.skip(str(exc))
    return server_class(kind)(**options)


def answers(kind: str, server: LocalServer) -> bool:
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as sock:
        if kind == "redis":
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
        sock.sendall(b"version\r\n")
        return sock.recv(64).startswith(b"VERSION ")


def assert_stopped(pid: int, port: int, tmpdir: str) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    assert not os.path.exists(tmpdir)


@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_server_answers_and_stops(kind: str) -> None:
    with make(kind) as server:
        pid, port, tmpdir = server.pid(), server.port, server.tmpdir
        assert pid and port and os.path.isdir(tmpdir)
        assert answers(kind, server)
        assert server.version and server.version[0].isdigit()
        assert server.url().endswith(f"127.0.0.1:{port}" + ("/0" if kind == "redis" else ""))
    assert_stopped(pid, port, tmpdir)
    server.stop()  # stopping twice is harmless


@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_a_server_is_in_a_process_group_of_its_own_but_not_a_session(kind: str) -> None:
    """Its own group keeps a terminal's Ctrl-C from reaching it straight; sharing our session
    keeps it in our scheduler autogroup, as a server started by hand from the same shell is. In a
    session of its own, a pipelined memcached load on a 2-core host did a fifth less work at twice
    the client CPU per op (docs/engine.md)."""
    with make(kind) as server:
        pid = server.pid()
        assert os.getpgid(pid) == pid
        assert os.getsid(pid) == os.getsid(0)


@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_server_stops_when_body_raises(kind: str) -> None:
    server = make(kind)
    with pytest.raises(RuntimeError, match="boom"), server:
        pid, port, tmpdir = server.pid(), server.port, server.tmpdir
        raise RuntimeError("boom")
    assert_stopped(pid, port, tmpdir)


def test_a_stopped_server_stops_without_waiting_for_the_kill() -> None:
    """A SIGSTOPped server (as fault tests leave one) holds stop()'s SIGTERM until woken: stop() wakes
    it, so it exits on the signal rather than at the SIGKILL 10 s later."""
    server = make("redis").start()
    pid, port, tmpdir = server.pid(), server.port, server.tmpdir
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    server.stop()
    took = time.monotonic() - started
    # 0.06 s beside a busy loop against 5 s (80x); the bug waits for the SIGKILL at 10 s
    assert took < 5, f"stop() took {took:.1f} s"
    assert_stopped(pid, port, tmpdir)


def test_redis_password_and_maxmemory() -> None:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    with make("redis", password="pa:ss/word", maxmemory="64mb") as server:
        assert "pa%3Ass%2Fword@" in server.url()
        port = server.port
        with pytest.raises(redis.AuthenticationError):  # asked once: redis-py 6 retries it ~6 s by default
            redis.Redis(port=port, retry=Retry(NoBackoff(), 0)).ping()
        client = redis.Redis(port=port, password="pa:ss/word")
        assert client.config_get("maxmemory")["maxmemory"] == str(64 * 1024 * 1024)
        assert client.config_get("save")["save"] == ""
        assert client.config_get("appendonly")["appendonly"] == "no"
        client.close()


def test_memcached_memory_option() -> None:
    with (
        make("memcached", memory_mb=32) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=2) as sock,
    ):
        sock.sendall(b"stats settings\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            data += sock.recv(65536)
        assert b"STAT maxbytes 33554432" in data
        assert b"STAT udpport 0" in data


def _taken_port_then_free(monkeypatch, sock: socket.socket) -> None:
    """free_port() hands out ``sock``'s port once — as if another process took it in the moment
    between the pick and the server's bind — then free ports again."""
    from cachemark.lab import base

    picks = iter([sock.getsockname()[1]])
    real = base.free_port
    monkeypatch.setattr(base, "free_port", lambda: next(picks, None) or real())


@pytest.mark.parametrize("kind", ["redis", "memcached"])
@pytest.mark.parametrize("listening", [True, False])
def test_a_port_taken_before_the_server_binds_it_is_given_up_for_another(monkeypatch, kind, listening) -> None:
    """Listening: something answers on the port at once, but it is not our server (a run against it
    would measure somebody else's). Bound only: the server fails to bind and exits. Either way the
    server starts again on another port, and the one answering there is ours."""
    from cachemark.lab import listeners

    server = make(kind)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        if listening:
            other.listen(8)
        _taken_port_then_free(monkeypatch, other)
        with server:
            assert server.port != other.getsockname()[1]
            assert listeners.listens(server.pid(), server.port) is True
            assert answers(kind, server)
        assert listeners.listens(os.getpid(), other.getsockname()[1]) is listening


def test_listeners_tell_whose_port_it_is() -> None:
    from cachemark.lab import listeners

    with socket.socket() as mine, socket.socket(socket.AF_INET6) as mine6:
        mine.bind(("127.0.0.1", 0))
        port = mine.getsockname()[1]
        assert listeners.listens(os.getpid(), port) is False  # bound, not listening
        assert listeners.taken(port)  # but no server could bind it
        mine.listen(1)
        assert listeners.listens(os.getpid(), port) is True
        assert listeners.listens(1, port) is False
        mine6.bind(("::1", 0))
        mine6.listen(1)
        assert listeners.listens(os.getpid(), mine6.getsockname()[1]) is True
    assert listeners.listens(os.getpid(), port) is False
    assert not listeners.taken(port)
    assert listeners.listens(2**22 + 12345, port) is False  # no such process
