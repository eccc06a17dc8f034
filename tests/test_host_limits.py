"""A host that refuses threads or processes: one line and exit 2 from run (Python workers and the
engine) and capture, never a traceback, a hang or a half-written trace.

The limit is a pids cgroup of the test's own (root is not held to RLIMIT_NPROC), made for the
child alone: skipped where cgroups cannot be written."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachemark.procs import tasks_left

CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))


@contextlib.contextmanager
def pids_limited(limit: int) -> Iterator[Path]:
    """A new pids cgroup holding at most ``limit`` tasks, removed afterwards."""
    for root in CGROUP_ROOTS:
        if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
            continue
        group = root / f"cachemark-test-{uuid.uuid4().hex[:8]}"
        try:
            group.mkdir()
        except OSError:
            continue
        try:
            if not (group / "pids.max").exists():  # v2 without the pids controller here
                continue
            (group / "pids.max").write_text(str(limit))
            yield group
            return
        finally:
            with contextlib.suppress(OSError):
                group.rmdir()
    pytest.skip("no writable pids cgroup here")


def run_limited(group: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``cachemark ARGS`` started inside ``group``."""
    def enter() -> None:
        (group / "cgroup.procs").write_text(str(os.getpid()))

    return subprocess.run([sys.executable, "-m", "cachemark", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, preexec_fn=enter, env={**os.environ, "COLUMNS": "200"})


def one_line(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(word in lines[0] for word in words), lines[0]


def test_the_room_left_is_the_cgroups(tmp_path):
    with pids_limited(40) as group:
        probe = "from cachemark.procs import tasks_left; print(tasks_left())"
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())))
        assert 30 <= int(out.stdout) < 40  # the probe itself holds a task or a few
    assert tasks_left() is None or tasks_left() > 40


def test_too_many_python_workers_are_refused_before_any_fork(redis_server, tmp_path):
    with pids_limited(30) as group:
        result = run_limited(group, "run", "-t", redis_server.url(), "--workers", "100", "--duration", "1s",
                             "--warmup", "0", "--no-calibrate", "-o", "out.json", cwd=tmp_path)
        one_line(result, "100 workers need about", "ask for at most")
        ok = run_limited(group, "run", "-t", redis_server.url(), "--workers", "2", "--duration", "1s",
                         "--warmup", "0", "--no-calibrate", "-o", "out.json", cwd=tmp_path)
        assert ok.returncode == 0, ok.stderr


def test_engine_threads_the_host_refuses_are_an_error(redis_server, tmp_path):
    url = redis_server.url() + "?client=engine&threads=200&connections=400"
    with pids_limited(30) as group:
        result = run_limited(group, "run", "-t", url, "--duration", "1s", "--warmup", "0", "--no-calibrate",
                             "-o", "out.json", cwd=tmp_path)
    one_line(result, "the host refused load thread", "of 200", "fewer threads")


def test_capture_refuses_a_thread_count_out_of_range_and_leaves_no_file(redis_server, tmp_path, cachemark):
    result = cachemark("capture", "-u", redis_server.url(), "-o", "t.cmtrace", "--threads", "100000",
                       "--duration", "1s", cwd=tmp_path)
    one_line(result, "proxy threads must be 1 to 64, not 100000")
    assert list(tmp_path.iterdir()) == []  # no trace, no .tmp
