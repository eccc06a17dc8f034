"""Our own command line, as ``ps`` shows it to every local user, without its secrets.

``cachemark run -t 'redis://:pw@host'`` puts the password in /proc/<pid>/cmdline, which
any local user can read for as long as the run lasts. On Linux the kernel serves that
file from the process's own memory (``arg_start``..``arg_end`` in /proc/self/stat), so we
overwrite it there with the redacted arguments, once, at start-up. Python's ``sys.argv``
is a copy made earlier and is not affected. The window before this runs (interpreter
start-up) remains: the README (Targets) advises an experiment file for passwords.
"""

from __future__ import annotations

import ctypes
import sys

from .target import redact


def hide_secrets() -> bool:
    """Rewrite our visible command line with its targets redacted; True if it changed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        with open("/proc/self/cmdline", "rb") as f:
            current = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()  # fields[0] is field 3 of proc(5)
        start, end = int(fields[45]), int(fields[46])  # fields 48, 49: arg_start, arg_end
    except (OSError, ValueError, IndexError):
        return False
    if start <= 0 or end - start != len(current) or not current.endswith(b"\0"):
        return False  # not the layout we know (a sandbox, a retitled process): leave it
    args = current[:-1].split(b"\0")
    hidden = []
    for arg in args:
        text = arg.decode("utf-8", "surrogateescape")
        shown = redact(text) if ("://" in text or "spawn:" in text or "@" in text) else text
        new = shown.encode("utf-8", "surrogateescape")[: len(arg)] if shown != text else arg
        hidden.append(new.ljust(len(arg), b"\0"))
    replacement = b"\0".join(hidden) + b"\0"
    if replacement == current or len(replacement) != len(current):
        return False
    if ctypes.string_at(start, len(current)) != current:
        return False  # the memory is not what the kernel shows: do not write blind
    ctypes.memmove(start, replacement, len(replacement))
    return True
