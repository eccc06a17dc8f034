"""The temp directories cachemark makes for itself, and those a killed run left behind.

A spawned server's directory (a database's data can be 100 MB), an embedded backend's, a
trace replay's shares: a run removes its own when it ends, even on Ctrl-C. Killed outright
(``kill -9``, the OOM killer) it cannot, and the directories would pile up in the temp
directory. So each one carries a stamp naming the processes that work in it (the cachemark
process that made it, and a server it started there), each by pid and start time; the next
cachemark process to make one removes every ``cachemark-*`` directory whose stamp names no
live process. A directory without a stamp (an older cachemark's, anything else) is never
touched, nor is one whose stamp cannot be read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

from .procs import stat_fields

STAMP = ".cachemark-owners"
_swept = False


def make(prefix: str) -> str:
    """A new directory in the temp directory (``prefix`` starts with ``cachemark-``), stamped
    with this process; abandoned ones are removed first (once per process)."""
    global _swept
    if not _swept:
        _swept = True
        sweep()
    path = tempfile.mkdtemp(prefix=prefix)
    add_process(path, os.getpid())
    return path


@contextlib.contextmanager
def directory(prefix: str) -> Iterator[str]:
    """:func:`make`, removed again at the end of the block."""
    path = make(prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def add_process(path: str, pid: int) -> None:
    """Names process ``pid`` in ``path``'s stamp: while it lives, the directory is in use."""
    with open(os.path.join(path, STAMP), "a", encoding="ascii") as f:
        f.write(f"{pid} {_started(pid) or 0}\n")  # 0: its start time is unknown here


def sweep(where: str | None = None) -> list[str]:
    """Removes the ``cachemark-*`` directories in ``where`` (the temp directory) whose stamp names
    only processes that are gone; returns them."""
    where = where or tempfile.gettempdir()
    removed = []
    with contextlib.suppress(OSError), os.scandir(where) as entries:
        for entry in entries:
            if entry.name.startswith("cachemark-") and entry.is_dir(follow_symlinks=False) \
                    and _abandoned(entry.path):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed


def _abandoned(path: str) -> bool:
    try:
        with open(os.path.join(path, STAMP), encoding="ascii") as f:
            owners = [line.split() for line in f if line.strip()]
        named = [(int(pid), int(started)) for pid, started in owners]
    except (OSError, ValueError):
        return False  # no stamp, or one we cannot read: not known to be ours and free
    return bool(named) and not any(_alive(pid, started) for pid, started in named)


def _alive(pid: int, started: int) -> bool:
    """Whether the process a stamp names (``pid``, started at ``started``) still runs; when
    that cannot be told, it does."""
    now = _started(pid)
    return now is None or (now >= 0 and now == started)


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), so that a pid the system has
    given to another process since does not count as ours; -1 when it is gone (or a zombie),
    None when that cannot be told (no /proc: then only that it exists)."""
    if not os.path.exists("/proc/self/stat"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return -1
        except PermissionError:
            pass
        return None
    try:
        fields = stat_fields(pid)
        return -1 if fields[0] in (b"Z", b"X") else int(fields[19])  # field 22: starttime
    except (FileNotFoundError, ProcessLookupError):
        return -1
    except (OSError, IndexError, ValueError):
        return None
