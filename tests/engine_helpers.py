"""Servers for the engine tests: the lab's (one way to start a server in the whole suite),
handed out as (process, port) because these tests signal the process itself (SIGSTOP,
SIGKILL) and talk to the port."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

import pytest

from cachemark.errors import BackendMissing
from cachemark.lab import LocalServer, server_class

_STARTED: dict[int, LocalServer] = {}


def _start(kind: str, **options: object) -> tuple[subprocess.Popen, int]:
    try:
        server = server_class(kind)(**options).start()
    except BackendMissing as exc:
        pytest.skip(f"{kind} not available: {exc}")
    assert server.proc is not None
    _STARTED[server.proc.pid] = server
    return server.proc, server.port


def start_redis(password: str | None = None) -> tuple[subprocess.Popen, int]:
    return _start("redis", **({"password": password} if password else {}))


def start_memcached() -> tuple[subprocess.Popen, int]:
    return _start("memcached", memory_mb=64)


def stop(proc: subprocess.Popen) -> None:
    """Stop a server started here (a SIGSTOPped one too) and remove its directory."""
    server = _STARTED.pop(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)
    server.stop()


def need_io(io: str) -> None:
    """Skips a test of the io_uring backend where the kernel or a sandbox forbids it."""
    if io != "uring":
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        params = ctypes.create_string_buffer(120)
        fd = libc.syscall(425, 4, params)  # io_uring_setup
        if fd < 0:
            pytest.skip("io_uring is not available here")
        os.close(fd)
    except OSError:
        pytest.skip("io_uring is not available here")
