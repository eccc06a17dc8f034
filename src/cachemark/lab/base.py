"""Local servers on free loopback ports: the shared plumbing of every ``spawn:`` kind.

A :class:`LocalServer` owns one child process and its temp directory. It is a context
manager, and it is also registered for ``atexit`` so a crash or Ctrl-C never leaves a
server running. Subclasses say how to start the binary and how to tell it is ready.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from typing import Any

from .. import procs, scratch
from ..errors import BackendMissing, BackendUnavailable, SpecError
from ..textfile import one_line
from . import listeners

_LIVE: set[LocalServer] = set()
_PORT_ATTEMPTS = 3  # a free port taken before the server binds it: rare, and twice in a row rarer still


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_binary(*names: str, extra_dirs: tuple[str, ...] = ()) -> str:
    """The first of ``names`` found on PATH or in ``extra_dirs``, or BackendMissing."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
        for directory in extra_dirs:
            candidate = os.path.join(directory, name)
            if os.access(candidate, os.X_OK):
                return candidate
    raise BackendMissing(f"{names[0]} is not installed (looked for {', '.join(names)} on PATH)")


class PortTaken(BackendUnavailable):
    """Another process took the free port picked for a server before the server could bind it."""


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Wait until something accepts TCP connections on host:port — ``proc`` itself, when given
    (:class:`PortTaken` if another process listens there, or ``proc`` exited while one did)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            if listeners.taken(port):
                raise PortTaken(f"port {port} was taken by another process before the server could listen on it")
            raise BackendUnavailable(f"server exited with code {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                pass
        except OSError:
            time.sleep(0.02)
            continue
        if proc is not None and listeners.listens(proc.pid, port) is False:
            raise PortTaken(f"port {port} is held by another process, not the server started on it")
        return
    raise BackendUnavailable(f"server did not listen on {host}:{port} within {timeout:.0f}s")


def unix_connection(path: str, timeout: float) -> socket.socket:
    """A stream connection to the Unix socket at ``path`` (``socket.create_connection``'s twin)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


def wait_for_socket(path: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Wait until something accepts connections on the Unix socket at ``path``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BackendUnavailable(f"server exited with code {proc.returncode} before listening on {path}")
        try:
            unix_connection(path, 0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise BackendUnavailable(f"server did not listen on {path} within {timeout:.0f}s")


def flag_option(kind: str, options: dict[str, Any], name: str) -> bool:
    """A yes/no server option from a ``spawn:`` URL (``unix=1``), or one line saying what it takes."""
    value = options.get(name)
    if value in (None, "", False, 0):
        return False
    if value is True or value == 1:
        return True
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SpecError(f"spawn:{kind}: {name}={one_line(repr(value), 40)} must be true or false (1 or 0)")


class LocalServer(ABC):
    """One private server process on 127.0.0.1 in its own temp directory."""

    kind: str = "server"
    ready_timeout: float = 20.0
    stop_signal: int = signal.SIGTERM  # what stop() sends first (SIGKILL after 10 s), then SIGCONT

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.port = 0
        self.host = "127.0.0.1"
        self.tmpdir = ""
        self.proc: subprocess.Popen | None = None
        self.version = ""

    @abstractmethod
    def command(self) -> list[str]:
        """The argv that starts the server on ``self.port`` in ``self.tmpdir``."""

    @abstractmethod
    def url(self) -> str:
        """The target URL a backend uses to reach this server."""

    def prepare(self) -> None:
        """Anything to do in ``self.tmpdir`` before the server starts (initdb, ...)."""

    def wait_ready(self) -> None:
        wait_for_port(self.host, self.port, self.ready_timeout, self.proc)

    def detect_version(self) -> str:
        return ""

    def env(self) -> dict[str, str] | None:
        return None

    def start(self) -> LocalServer:
        if self.proc is not None:
            raise RuntimeError(f"{self.kind} server already started on port {self.port}")
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.tmpdir = scratch.make(f"cachemark-{self.kind}-")
            self.port = free_port()
            try:
                self.prepare()
                self._launch()
                return self
            except BaseException as exc:
                log = self.log_tail()
                self.stop()
                if isinstance(exc, PortTaken) and attempt < _PORT_ATTEMPTS:
                    continue  # all over again (a fresh directory: prepare() may have written the port)
                if isinstance(exc, BackendUnavailable) and log:
                    raise BackendUnavailable(f"{self.kind}: {exc}; last log line: {log}") from None
                raise
        raise AssertionError("unreachable")

    def kill(self) -> None:
        """End the server outright (SIGKILL), as a crash would; its port and directory stay
        for :meth:`restart`. For fault tests: a run's server dying, or restarting, mid-run."""
        if self.proc is not None and self.proc.poll() is None:
            with _suppress():
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        """Start the server again on the same port and directory, after :meth:`kill`."""
        self.kill()
        self._launch()

    def _launch(self) -> None:
        if getattr(self, "_log", None):
            self._log.close()
        self._log = open(os.path.join(self.tmpdir, "server.log"), "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            procs.dying_with_us(self.command(), self.stop_signal),
            cwd=self.tmpdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env(),
            # a process group of its own, so Ctrl-C in the terminal goes to us, not straight to the server;
            # not a session of its own: Linux gives each session its own scheduler autogroup, which shares
            # the CPU between the groups, not between the threads, and on a host that client and server
            # share that halved a pipelined memcached load's throughput per client CPU (docs/engine.md)
            process_group=0,
        )
        _LIVE.add(self)
        scratch.add_process(self.tmpdir, self.proc.pid)  # its directory is in use while it runs
        self.wait_ready()
        self.version = self.detect_version()

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.tmpdir, "server.log"), "rb") as f:
                lines = f.read().decode(errors="replace").strip().splitlines()
            return lines[-1] if lines else ""
        except OSError:
            return ""

    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, self.stop_signal)
                # a SIGSTOPped server (a fault test's) holds the signal until woken: wake it, or it waits out
                # the timeout for SIGKILL; woken after the signal is sent, it resumes only to act on it
                os.killpg(proc.pid, signal.SIGCONT)
                proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with _suppress():
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=5)
        _LIVE.discard(self)
        if getattr(self, "_log", None):
            self._log.close()
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = ""

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "spawned": True, "version": self.version, "port": self.port}

    def __enter__(self) -> LocalServer:
        return self if self.proc is not None else self.start()  # spawn_server() already started it

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop()
