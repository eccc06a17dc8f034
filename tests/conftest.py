"""Shared fixtures: real local servers from the lab, and the command line as a user runs it.

Every lab server a test uses comes from :mod:`cachemark.lab` (as ``spawn:`` targets do) through
the fixtures here, one way for all of them:

- the session's shared servers, started once on first use: ``redis_server``, ``redis_server_auth``,
  ``redis_cluster_server``, ``memcached_server`` (and ``_2``), ``postgres_server``, ``mysql_server``,
  ``s3_server``. Tests share them, each under a namespace of its own, and leave them running;
- ``spawn(kind, **options)``: a private server for one test (``.proc``, ``.port``, ``.url()``), stopped
  after it: for a test that kills, pauses (SIGSTOP) or restarts its server, or counts what it served;
- ``spawn_for_file(kind, **options)``: the same, shared by one test file's tests, stopped after the file.

The fixture stops what it started, a SIGSTOPped server too (``LocalServer.stop`` wakes it): no
try/finally in the tests. A missing binary or library skips the tests that need it, with the
reason, instead of failing them. Servers started otherwise, each for the reason its docstring
gives: test_lab.py's (the lab itself under test), test_redis_cluster.py's joining node (a bare
cluster node, no ``spawn:`` kind), tests/mm1_server.py's (not a lab server: its latencies are
known in advance) and report_fixtures.py's (run as a script, not under pytest). Runs of
``spawn:`` targets start theirs, as for a user.
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

import cli_zygote
from cachemark.errors import BackendMissing
from cachemark.lab import LocalServer, server_class

# A shell starts a background job (`make test &`) with Ctrl-C ignored, and every process it
# starts inherits that: the tests that send SIGINT would then test nothing and hang. They test
# Ctrl-C as a terminal delivers it, so the suite hears it whatever started it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The Java drivers' JVMs compile with C1 alone here (unless the caller set JVM options): the tests hold
# what a driver does, not how fast its JIT makes it, and C2's compiler threads were about a third of each
# short JVM's CPU (the Java conformance cases: 36 → 24 CPU-s). Benchmarks and users get the JVM's defaults.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def pytest_configure(config: pytest.Config) -> None:
    # `make test` runs the other tests four at a time (pytest-xdist), then the serial ones four at a time,
    # then the timed ones alone. Four at a time keep both cores busy (each waits about half its time): a
    # failover, a kill or a signal raced there would move the timeouts and windows it asserts. The serial
    # ones mostly wait (on a node timeout, a stall, a signal's moment: a third of a core each on average),
    # so four of them side by side take about one and a third of the two. A test that times a latency, a rate
    # or a schedule against ground truth has nothing beside it.
    config.addinivalue_line("markers", "serial: races a signal, a kill or a failover; runs beside three others at most")
    config.addinivalue_line("markers", "alone: times a latency, a rate or a schedule; runs by itself, last")


# Seconds of one worker each file takes in its pass (`--junitxml` of `make test` here). xdist hands out
# whole files (`--dist loadfile --no-loadscope-reorder`, the Makefile) in collection order: a long file
# handed out last keeps one worker busy after the others have finished, so the longest go first.
LONGEST_FILES = {
    "test_driver_conformance.py": 186, "test_redis_cluster.py": 70, "test_server_size.py": 45,
    "test_faults.py": 61, "test_reliability.py": 62, "test_engine_faults.py": 28, "test_redis_sentinel.py": 45,
    "test_redis_cluster_failover.py": 37,
    "test_size.py": 35, "test_engine_robustness.py": 30, "test_stampede.py": 27, "test_headline.py": 25,
    "test_replay.py": 24, "test_engine_discard.py": 23, "test_fuzz_cli.py": 23, "test_wheel.py": 22,
    "test_verdict.py": 21, "test_end_to_end.py": 20, "test_decide.py": 19, "test_cli.py": 19,
    "test_readable.py": 17, "test_run_sequence.py": 17, "test_spine_rules.py": 17, "test_cache_aside.py": 17,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (a stable sort: each file's tests keep their order). And a test marked serial
    or alone only in a file that says so: `make test` collects those passes from the files that name their
    marker (each of four workers collecting every file took ~3.5 s of CPU), so one marked from elsewhere
    would never run."""
    items.sort(key=lambda item: -LONGEST_FILES.get(item.path.name, 0))
    said: dict[tuple[Path, str], bool] = {}
    for item in items:
        for marker in ("serial", "alone"):
            if item.get_closest_marker(marker) is None:
                continue
            if (item.path, marker) not in said:
                said[(item.path, marker)] = f"mark.{marker}" in item.path.read_text(encoding="utf-8")
            if not said[(item.path, marker)]:
                raise pytest.UsageError(f"{item.nodeid} is marked {marker}, but its file never says mark.{marker}: "
                                        f"make test's {marker} pass would not collect it")


# --- servers (the lab's) -----------------------------------------------------------


def _start(kind: str, **options: object) -> LocalServer:
    """Start a lab server, or skip the requesting test when its binary is missing."""
    try:
        return server_class(kind)(**options).start()
    except BackendMissing as exc:
        pytest.skip(f"{kind} not available: {exc}")


def _spawner() -> Iterator[Callable[..., LocalServer]]:
    """``start(kind, **options)`` for a fixture's scope; every server it started is stopped after."""
    servers: list[LocalServer] = []

    def start(kind: str, **options: object) -> LocalServer:
        servers.append(_start(kind, **options))
        return servers[-1]

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def spawn() -> Iterator[Callable[..., LocalServer]]:
    """``spawn(kind, **options)``: a private server for one test, stopped after it."""
    yield from _spawner()


@pytest.fixture(scope="module")
def spawn_for_file() -> Iterator[Callable[..., LocalServer]]:
    """``spawn_for_file(kind, **options)``: servers shared by one file's tests, stopped after the file."""
    yield from _spawner()


@pytest.fixture(scope="session")
def _spawn_for_session() -> Iterator[Callable[..., LocalServer]]:
    yield from _spawner()


@pytest.fixture(scope="session")
def redis_server(_spawn_for_session: Callable[..., LocalServer]) -> LocalServer:
    return _spawn_for_session("redis")


@pytest.fixture(scope="session")
def memcached_server(_spawn_for_session: Callable[..., LocalServer]) -> LocalServer:
    return _spawn_for_session("memcached")


@pytest.fixture(scope="session")
def memcached_server_2(_spawn_for_session: Callable[..., LocalServer]) -> LocalServer:
    """A second memcached, for clients that hash keys over several servers."""
    return _spawn_for_session("memcached")


@pytest.fixture(scope="session")
def redis_server_auth(_spawn_for_session: Callable[..., LocalServer]) -> LocalServer:
    """A redis that requires the password ``s3cret``."""
    return _spawn_for_session("redis", password="s3cret")


@pytest.fixture(scope="session")
def redis_cluster_server(_spawn_for_session: Callable[..., LocalServer]) -> LocalServer:
    """A Redis Cluster of three primaries (``spawn:redis-cluster?nodes=3``)."""
    return _spawn_for_session("redis-cluster", nodes=3)


@pytest.fixture(scope="session")
def postgres_server(_spawn_for_session: Callable[..., LocalServer]) -> LocalServer:
    # Tests check behaviour, not durability: skip the fsync per commit to keep them quick.
    return _spawn_for_session("postgresql", settings={"fsync": "off", "synchronous_commit": "off"})


@pytest.fixture(scope="session")
def mysql_server(_spawn_for_session: Callable[..., LocalServer]) -> LocalServer:
    # MariaDB likewise: no flush of the log per commit, no sync of the binlog.
    return _spawn_for_session("mysql", settings={"innodb-flush-log-at-trx-commit": 0, "sync-binlog": 0})


@pytest.fixture(scope="session")
def s3_server(_spawn_for_session: Callable[..., LocalServer]) -> LocalServer:
    """moto's S3 server."""
    return _spawn_for_session("s3")


# --- per-test keys and directories ----------------------------------------------


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


# --- the command line, as a user runs it -----------------------------------------


def run_cli(*args: str, cwd: Path | str, timeout: float = 300, env: dict[str, str] | None = None,
            stdin: int | None = None, fresh: bool = False) -> subprocess.CompletedProcess:
    """``cachemark ARGS`` in a process of its own, as ``subprocess.run(..., capture_output=True, text=True)``
    runs it, by default with a wide, non-terminal output (as in CI logs): forked from this worker's zygote,
    which has imported the command once (cli_zygote.py says what it keeps of a fresh process), or with
    ``fresh``, in a fresh interpreter (for a test of the start itself)."""
    env = {**os.environ, "COLUMNS": "200"} if env is None else env
    if not fresh and cli_zygote.AVAILABLE and not os.environ.get("CACHEMARK_TESTS_FRESH"):
        return cli_zygote.run(list(args), cwd=str(cwd), env=env, timeout=timeout, stdin=stdin)
    return subprocess.run([sys.executable, "-m", "cachemark", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=stdin)


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
