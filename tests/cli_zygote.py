"""``python -m cachemark ARGS`` for the tests, forked from a process that has imported the command once.

A command run in a fresh interpreter spends ~0.35 s of CPU before it does anything: Python's start and
cachemark's imports (typer, pydantic, numpy, rich, the reports), the same every time. The suite runs
~300 commands in its parallel pass, which is bound by the machine's CPU. So each pytest worker starts one
*zygote* on first use, which imports what a command imports and then waits. For each command it forks
a child that takes the caller's stdin and two fresh pipes for stdout and stderr (passed over a Unix
socket), the caller's working directory, environment and arguments, and runs ``cachemark`` as
``python -m`` does (``runpy``'s own path: ``sys.argv``, ``sys.path[0]``, ``__main__``), at the top level
of the interpreter: its exit status, atexit handlers, flushes and an uncaught signal are Python's own,
as in a fresh process. The caller reads both pipes to their end and decodes them as ``subprocess.run``
does with ``text=True``; the zygote waits for the child and sends its exit code.

What a child does not repeat is the interpreter's start and the imports: the tests of those (a Ctrl-C
while they run, the installed wheel) start fresh processes
(``run_cli(..., fresh=True)``, or ``subprocess`` themselves). ``CACHEMARK_TESTS_FRESH=1`` runs every
command of the suite in a fresh process.
"""

from __future__ import annotations

import contextlib
import json
import locale
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

# a zygote needs pidfds (Linux 5.3) and descriptors passed over a socket; without them, fresh processes
AVAILABLE = hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")
# what `cachemark run` and the report commands import on their way
PRELOAD = ("cachemark.entry", "cachemark.cli", "cachemark.cli.session", "cachemark.spec", "cachemark.results",
           "cachemark.report.formats", "cachemark.run.distributed", "cachemark.run.forkserver")


# --- the zygote: this file run as a script ------------------------------------------------------------------

def _serve(listener: socket.socket) -> dict:
    """Fork a child per request until stdin closes (the pytest worker has ended). Returns only in a
    child, with its request and its stdin, stdout and stderr in place."""
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, the request's connection)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "request")
    selector.register(sys.stdin, selectors.EVENT_READ, "parent")
    while True:
        for key, _ in selector.select():
            if key.data == "parent":  # end of input: the pytest worker is gone
                os._exit(0)
            if key.data == "request":
                conn, _ = listener.accept()
                message, fds = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    conn.close()
                    for pidfd, (_, other) in children.items():
                        os.close(pidfd)
                        other.close()
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                        os.close(fd)
                    return json.loads(message)
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, conn)
                selector.register(pidfd, selectors.EVENT_READ, "child")
            else:  # a child ended
                pid, conn = children.pop(key.fd)
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # the caller gave up on it (its timeout)
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()


def _receive(conn: socket.socket) -> tuple[bytes, list[int]]:
    """A request: its length (8 bytes), then its JSON; the three descriptors come with the first bytes."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < 8 or len(data) < 8 + int.from_bytes(data[:8], "big"):
        more = conn.recv(1 << 20)
        if not more:
            raise EOFError("the caller went away mid-request")
        data += more
    return data[8:], fds


def _zygote_main(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    for module in PRELOAD:
        __import__(module)
    print("ready", flush=True)
    request = _serve(listener)
    # a child: the command, as `python -m cachemark` runs it
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-m", *request["args"]]  # runpy puts the module's path in argv[0], as -m does
    sys.path[0] = os.getcwd()
    import runpy

    runpy._run_module_as_main("cachemark")  # the function behind `python -m`


# --- the caller: the pytest worker ---------------------------------------------------------------------------

class _Zygote:
    """This pytest worker's zygote, started on first use; it ends when the worker does (its stdin closes)."""

    lock = threading.Lock()
    proc: subprocess.Popen | None = None
    path = ""

    @classmethod
    def address(cls) -> str:
        with cls.lock:
            if cls.proc is None or cls.proc.poll() is not None:
                directory = tempfile.mkdtemp(prefix="cachemark-zygote-")
                cls.path = os.path.join(directory, "socket")
                cls.proc = subprocess.Popen([sys.executable, __file__, cls.path], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True)
                if cls.proc.stdout.readline() != "ready\n":
                    raise RuntimeError("the tests' command-line zygote did not start")
                import atexit

                atexit.register(shutil.rmtree, directory, ignore_errors=True)
            return cls.path


def _text(data: bytes) -> str:
    """As ``subprocess.run(text=True)`` decodes: the locale's encoding, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def _number(line: str, args: list[str]) -> int:
    if not line:
        raise RuntimeError(f"the tests' command-line zygote ended while it ran cachemark {' '.join(args)}")
    return int(line)


def run(args: list[str], *, cwd: str, env: dict[str, str], timeout: float,
        stdin: int | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run([python, -m, cachemark, *args], capture_output=True, text=True, ...)``, forked
    from the zygote: its stdin this process's, or with ``subprocess.DEVNULL``, /dev/null."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(_Zygote.address())
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    request = json.dumps({"args": list(args), "cwd": os.path.abspath(cwd), "env": env}).encode()
    framed = len(request).to_bytes(8, "big") + request
    given = os.open(os.devnull, os.O_RDONLY) if stdin == subprocess.DEVNULL else 0
    try:
        sent = socket.send_fds(conn, [framed], [given, out_w, err_w])
        conn.sendall(framed[sent:])
    finally:
        for fd in {given, out_w, err_w} - {0}:
            os.close(fd)
    reply = conn.makefile("r")
    pid = _number(reply.readline(), args)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            ready = selector.select(left) if left > 0 else []
            if not ready:  # as subprocess.run: the process killed, waited for, and TimeoutExpired
                os.kill(pid, signal.SIGKILL)
                reply.readline()
                conn.close()
                for fd in selector.get_map():
                    os.close(fd)
                raise subprocess.TimeoutExpired(["cachemark", *args], timeout)
            for key, _ in ready:
                data = os.read(key.fd, 1 << 16)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
    code = _number(reply.readline(), args)  # the exit code as subprocess reports it: -N for signal N
    conn.close()
    return subprocess.CompletedProcess(["cachemark", *args], code, _text(b"".join(chunks[out_r])),
                                       _text(b"".join(chunks[err_r])))


if __name__ == "__main__":
    _zygote_main(sys.argv[1])
