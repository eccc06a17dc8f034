"""Private redis-server / memcached processes for the engine tests (free loopback ports,
no persistence), independent of the lab so the engine's tests stand on their own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import pytest

from cachemark.lab.base import free_port, wait_for_port


def start_redis(*extra: str) -> tuple[subprocess.Popen, int]:
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port("127.0.0.1", port, 10, proc)
    return proc, port


def start_memcached() -> tuple[subprocess.Popen, int]:
    if not shutil.which("memcached"):
        pytest.skip("memcached is not installed")
    port = free_port()
    argv = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "64"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port("127.0.0.1", port, 10, proc)
    return proc, port


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGCONT)
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()


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
