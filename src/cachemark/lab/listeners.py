"""Which process listens on a loopback TCP port, read from Linux's ``/proc``.

A spawned server is given a port that was free a moment before it started (:func:`.base.free_port`);
in that moment another process may take it. Something then answers on the port, but not our
server: a run would measure somebody else's. Asking whether *our* process holds the listening
socket tells the two apart, which a connection to the port cannot.
"""

from __future__ import annotations

import errno
import os
import socket

_LISTEN = "0A"  # the state column of /proc/net/tcp


def listening_inodes(port: int) -> set[str] | None:
    """The socket inodes listening on ``port`` (any local address, IPv4 or IPv6), or None where
    ``/proc/net/tcp`` cannot be read."""
    inodes: set[str] = set()
    read_any = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)  # the header
                rows = [line.split() for line in f]
        except OSError:
            continue
        read_any = True
        for row in rows:
            if len(row) > 9 and row[3] == _LISTEN and int(row[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(row[9])
    return inodes if read_any else None


def listens(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds a socket listening on ``port``; None when that cannot be told
    (no ``/proc``, or its file descriptors are not ours to read)."""
    inodes = listening_inodes(port)
    if inodes is None:
        return None
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False  # it is gone
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def taken(port: int) -> bool:
    """Whether a server could not bind 127.0.0.1:``port`` now: another socket listens there, or is
    bound there without SO_REUSEADDR (as servers bind, so a connection lingering in TIME_WAIT does not count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False
