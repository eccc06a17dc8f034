"""The one way out (cachemark.outfile): every command writes a regular file atomically and refuses,
in one line and before any work, to write over a directory, a device, a FIFO, a socket or a
symlink — leaving it exactly as it was (``os.replace`` over ``/dev/null`` would make it a file)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from cachemark import outfile
from cachemark.errors import UserError
from cachemark.workload.traces import TraceWriter
from conftest import run_cli

DATA = Path(__file__).parent / "data"


def _device(tmp_path: Path) -> Path:
    """A null device of our own (as root), so that a regression replaces it, not the machine's /dev/null."""
    path = tmp_path / "null"
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError:
        pytest.skip("cannot make a device node here (not root)")
    return path


def _things(tmp_path: Path) -> dict[str, Path]:
    """One of each thing cachemark must not write over, made in ``tmp_path``."""
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "target.txt").write_text("kept")
    (tmp_path / "link").symlink_to(tmp_path / "target.txt")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    sock.close()
    return {"a directory": tmp_path / "dir", "a FIFO": tmp_path / "fifo", "a symlink": tmp_path / "link",
            "a socket": tmp_path / "sock", "a device": _device(tmp_path)}


def _state(path: Path) -> tuple:
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), st.st_ino, st.st_rdev


def test_each_thing_that_is_not_a_regular_file_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    for kind, path in _things(tmp_path).items():
        before, listing = _state(path), sorted(os.listdir(path.parent))
        with pytest.raises(UserError, match=f"it is {kind}, which cachemark does not replace"):
            outfile.write_text(path, "x")
        with pytest.raises(UserError, match=f"it is {kind}"):
            TraceWriter(path)
        assert _state(path) == before, kind
        assert sorted(os.listdir(path.parent)) == listing, f"{kind}: something left behind"
    assert (tmp_path / "target.txt").read_text() == "kept"


def test_a_regular_file_is_replaced_whole_and_a_new_path_made(tmp_path: Path) -> None:
    old = tmp_path / "r.json"
    old.write_text("old")
    assert outfile.write_text(old, "new") == old and old.read_text() == "new"
    deep = tmp_path / "a" / "b" / "r.md"
    outfile.write_text(deep, "made")
    assert deep.read_text() == "made"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "r.json"]


def test_an_interrupt_while_writing_leaves_the_old_file_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(KeyboardInterrupt), outfile.AtomicFile(path) as f:
        f.write(b"half of the ")
        raise KeyboardInterrupt
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["r.json"]


def test_dash_is_standard_output(capsysbinary) -> None:
    outfile.write_text("-", "to stdout\n")
    assert capsysbinary.readouterr().out == b"to stdout\n"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=cwd, timeout=120, env=dict(os.environ), stdin=subprocess.DEVNULL)


def _refused(done: subprocess.CompletedProcess, kind: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"it is {kind}" in lines[0], done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_every_command_that_writes_refuses_them_before_its_work(tmp_path: Path) -> None:
    things = _things(tmp_path)
    trace = tmp_path / "t.cmtrace"
    with TraceWriter(trace) as w:
        w.write(0, "get", b"k")
    results = DATA / "results-closed-server.json"
    commands = {
        "a device": ("trace", "convert", str(trace), str(things["a device"])),
        "a FIFO": ("run", "-t", "memory://", "--duration", "5s", "-o", str(things["a FIFO"])),
        "a directory": ("run", "-t", "memory://", "--duration", "5s", "-o", str(things["a directory"])),
        "a symlink": ("report", str(results), "-o", str(things["a symlink"])),
        "a socket": ("thresholds", str(results), "-o", str(things["a socket"])),
    }
    for kind, argv in commands.items():
        before = {k: _state(p) for k, p in things.items()}
        _refused(_cli(*argv, cwd=tmp_path), kind)
        assert {k: _state(p) for k, p in things.items()} == before
    assert not (tmp_path / "results").exists()  # no run happened
    assert (tmp_path / "target.txt").read_text() == "kept"


def test_capture_refuses_a_directory_before_it_listens(tmp_path: Path) -> None:
    # the upstream is never reached: the output is checked first
    _refused(_cli("capture", "-u", "redis://127.0.0.1:1", "-o", str(tmp_path), "--duration", "1s",
                  cwd=tmp_path), "a directory")


def test_every_command_that_reads_a_file_refuses_a_fifo_or_a_device_at_once(tmp_path: Path) -> None:
    """Opening a FIFO waits for a writer (forever: `trace stats FIFO` hung), and a device may never end."""
    fifo = tmp_path / "in"
    os.mkfifo(fifo)
    for argv, what in ((("trace", "stats", str(fifo)), "the trace file"),
                       (("run", "-t", "memory://", "--trace", str(fifo), "--duration", "1s"), "the trace file"),
                       (("run", str(fifo)), "the experiment file"), (("show", str(fifo)), "the results file"),
                       (("trace", "stats", "/dev/zero"), "the trace file")):
        done = _cli(*argv, cwd=tmp_path)
        assert done.returncode == 2, (argv, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and f"; {what} must be a regular file" in done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
