"""Other processes: as Linux's /proc shows them (the agent's process group, the owners of a
temp directory), and the ones we start, which must not outlive us."""

from __future__ import annotations

import functools
import os
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


def running(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie waiting to be reaped does not."""
    try:
        return stat_fields(pid)[0] not in (b"Z", b"X")
    except OSError:
        return False


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
    pdeathsig = f"--pdeathsig={signal.Signals(sig).name}"
    still_ours = ["/bin/sh", "-c", _STILL_OURS, "sh", str(os.getpid())] if os.access("/bin/sh", os.X_OK) else []
    if os.path.basename(argv[0]) == "setpriv":
        # argv changes user (a server run as nobody): that clears a signal set before it, so it sets ours
        options, command = _split_at_command(argv[1:])
        return [argv[0], *options, pdeathsig, "--", *still_ours, *command]
    return [setpriv, pdeathsig, "--", *still_ours, *argv]


# We may die after the fork and before setpriv set the signal: then nobody sends it. Once it is
# set, a parent that is no longer us (the process was handed to init) says so; it must not run.
_STILL_OURS = 'test "$PPID" = "$1" || exit 125; shift; exec "$@"'


def _split_at_command(args: list[str]) -> tuple[list[str], list[str]]:
    """setpriv's options (``--name=value``) and the command after them."""
    for i, arg in enumerate(args):
        if arg == "--":
            return args[:i], args[i + 1:]
        if not arg.startswith("-"):
            return args[:i], args[i:]
    return args, []


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


def tasks_left() -> int | None:
    """How many more processes and threads this host lets us start — its pids cgroups' room
    (``pids.max`` − ``pids.current``, ours and each above it) and, for a user other than root,
    ``RLIMIT_NPROC``'s — or None where neither limits us. A run checks it before it forks its
    workers: past the limit, a fork fails inside multiprocessing's fork server, which dies."""
    rooms = [room for room in (_cgroup_room(), _nproc_room()) if room is not None]
    return min(rooms) if rooms else None


def _cgroup_room() -> int | None:
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "pids":
            mounts = ["/sys/fs/cgroup/pids"]  # v1
        elif controllers == "":
            mounts = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]  # v2
        else:
            continue
        for mount in mounts:
            at = path.rstrip("/")
            while True:  # a limit anywhere up the tree holds us too
                room = _room(os.path.join(mount + at, "pids.max"), os.path.join(mount + at, "pids.current"))
                if room is not None:
                    rooms.append(room)
                if not at:
                    break
                at = at.rsplit("/", 1)[0]
    return min(rooms) if rooms else None


def _room(limit_file: str, current_file: str) -> int | None:
    try:
        with open(limit_file, encoding="ascii") as f:
            limit = f.read().strip()
        with open(current_file, encoding="ascii") as f:
            current = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else int(limit) - current


def _nproc_room() -> int | None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if os.geteuid() == 0 or soft == resource.RLIM_INFINITY:
        return None  # root is not held to it
    uid, used = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", encoding="utf-8") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                used += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return soft - used
