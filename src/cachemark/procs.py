"""Other processes as Linux's /proc shows them (the agent's process group, the owners of
a temp directory)."""

from __future__ import annotations


def stat_fields(pid: int) -> list[bytes]:
    """The fields of ``/proc/<pid>/stat`` from the third on — state, ppid, pgrp, … (field 22,
    the start time, is index 19) — the command name before them cut off, as it may hold
    spaces and parentheses. OSError when the process is gone or there is no /proc."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()
