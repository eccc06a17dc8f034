"""Other processes: as Linux's /proc shows them (the agent's process group, the owners of a
temp directory), and the ones we start, which must not outlive us."""

from __future__ import annotations

import functools
import shutil
import signal
import subprocess
import threading


def stat_fields(pid: int) -> list[bytes]:
    """The fields of ``/proc/<pid>/stat`` from the third on — state, ppid, pgrp, … (field 22,
    the start time, is index 19) — the command name before them cut off, as it may hold
    spaces and parentheses. OSError when the process is gone or there is no /proc."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def dying_with_us(argv: list[str], sig: int, waited_for: bool = False) -> list[str]:
    """``argv`` started so that it gets ``sig`` when we die, even by ``kill -9`` or the OOM
    killer (a spawned server, a driver running ops against the user's server): a parent-death
    signal, set by util-linux's ``setpriv`` just before it executes ``argv`` (no code of ours
    runs between fork and exec, which is unsafe with threads). The signal comes when the
    *thread* that started the process ends, so it is set only from the main thread, or where
    the starting thread outlives the process (``waited_for``: it waits for it to end); and only
    where setpriv is. Otherwise ``argv`` is started as it is."""
    setpriv = _setpriv()
    if setpriv is None or not (waited_for or threading.current_thread() is threading.main_thread()):
        return argv
    return [setpriv, f"--pdeathsig={signal.Signals(sig).name}", "--", *argv]


@functools.cache
def _setpriv() -> str | None:
    """util-linux's setpriv, if it knows ``--pdeathsig`` (2.33 and later)."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        usage = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return path if "--pdeathsig" in usage else None
