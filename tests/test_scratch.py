"""cachemark's own temp directories: stamped with the processes working in them, and those a
killed run left behind removed by the next one — never a directory it cannot tell is its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from cachemark import scratch


def _stamped(where, name: str, *owners: tuple[int, int]) -> str:
    path = where / name
    path.mkdir()
    (path / "data").write_text("x")
    (path / scratch.STAMP).write_text("".join(f"{pid} {started}\n" for pid, started in owners))
    return str(path)


def _gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_directory_is_stamped_with_its_maker_and_removed_after_its_block() -> None:
    with scratch.directory("cachemark-test-") as path:
        assert os.path.basename(path).startswith("cachemark-test-")
        pid, started = Path(path, scratch.STAMP).read_text().split()
        assert int(pid) == os.getpid() and int(started) > 0
    assert not os.path.exists(path)


def test_only_directories_whose_processes_are_all_gone_are_swept(tmp_path) -> None:
    me = (os.getpid(), scratch._started(os.getpid()))
    dead = (_gone_pid(), 12345)
    abandoned = _stamped(tmp_path, "cachemark-redis-a", dead)
    reused = _stamped(tmp_path, "cachemark-redis-b", (os.getpid(), me[1] + 1))  # our pid, another start
    mine = _stamped(tmp_path, "cachemark-redis-c", me)
    server_alive = _stamped(tmp_path, "cachemark-postgresql-d", dead, me)  # its maker died, its server not
    not_ours = _stamped(tmp_path, "other-e", dead)
    unstamped = tmp_path / "cachemark-f"  # an older cachemark's, or anyone's
    unstamped.mkdir()
    garbled = _stamped(tmp_path, "cachemark-g")
    (tmp_path / "cachemark-g" / scratch.STAMP).write_text("not a pid\n")
    (tmp_path / "cachemark-link").symlink_to(abandoned)

    removed = scratch.sweep(str(tmp_path))

    assert sorted(removed) == sorted([abandoned, reused])
    for kept in (mine, server_alive, not_ours, garbled):
        assert Path(kept, "data").exists()
    assert unstamped.exists()
    assert os.path.islink(tmp_path / "cachemark-link")  # a link is never followed, nor removed


def test_a_process_dead_but_not_yet_reaped_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while scratch._started(child.pid) != -1 and time.monotonic() < deadline:  # until it is a zombie
        time.sleep(0.01)
    assert Path(f"/proc/{child.pid}").exists()  # not reaped: still in the process table
    assert scratch._started(child.pid) == -1
    child.wait()
