"""Shared fixtures: real local servers from the lab, started once per test session.

Servers come from :mod:`cachemark.lab` exactly as ``spawn:`` targets do; a missing
binary skips the tests that need it (with the reason) instead of failing them.
Fixtures for further servers (postgres, mysql, s3, ...) go below the marked section.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cachemark.errors import BackendMissing
from cachemark.lab import LocalServer, server_class

# A shell starts a background job (`make test &`) with Ctrl-C ignored, and every process it
# starts inherits that: the tests that send SIGINT would then test nothing and hang. They test
# Ctrl-C as a terminal delivers it, so the suite hears it whatever started it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    # `make test` runs the other tests two at a time (pytest-xdist), then these alone: a test beside
    # them would move the latencies, rates, timeouts and signal races they assert.
    config.addinivalue_line("markers", "serial: times something or races a signal; runs alone, after the rest")

# --- redis / memcached (lab servers) ----------------------------------------------


def start_server(kind: str, **options: object) -> LocalServer:
    """Start a lab server, or skip the requesting test when its binary is missing."""
    try:
        return server_class(kind)(**options).start()
    except BackendMissing as exc:
        pytest.skip(f"{kind} not available: {exc}")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[LocalServer]:
    server = start_server("redis")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def memcached_server() -> Iterator[LocalServer]:
    server = start_server("memcached")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def memcached_server_2() -> Iterator[LocalServer]:
    """A second memcached, for clients that hash keys over several servers."""
    server = start_server("memcached")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server_auth() -> Iterator[LocalServer]:
    """A redis that requires the password ``s3cret``."""
    server = start_server("redis", password="s3cret")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster_server() -> Iterator[LocalServer]:
    """A Redis Cluster of three primaries (``spawn:redis-cluster?nodes=3``)."""
    server = start_server("redis-cluster", nodes=3)
    yield server
    server.stop()


@pytest.fixture
def spawn() -> Iterator[Callable[..., LocalServer]]:
    """``spawn(kind, **options)``: a private server for one test, stopped after it."""
    servers: list[LocalServer] = []

    def start(kind: str, **options: object) -> LocalServer:
        servers.append(start_server(kind, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def namespace() -> str:
    """A fresh per-test key namespace, shaped like the runner's (``cm:<hex>:``)."""
    return f"cmt:{uuid.uuid4().hex[:10]}:"


@pytest.fixture
def scratch_dir(tmp_path: Path) -> Path:
    """A writable directory for file-based backends (removed by pytest)."""
    path = tmp_path / "cache"
    path.mkdir()
    return path


# --- further servers (postgres, mysql, s3, ...) go below -------------------------


# --- the command line, as a user runs it -----------------------------------------


def run_cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``cachemark ARGS`` in a subprocess with a wide, non-terminal output (as in CI logs)."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "cachemark", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def cachemark() -> Callable[..., subprocess.CompletedProcess]:
    return run_cli


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (needs root and mount rights; skipped with the reason otherwise)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {proc.stderr.strip() or proc.returncode}")
    try:
        yield mount
    finally:
        for _ in range(20):
            if subprocess.run(["umount", str(mount)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
