"""A Redis-speaking test server whose latency is known in advance: an M/M/1 queue.

Why: a benchmark's open-loop (coordinated-omission corrected) latency needs a ground truth.
This server has ONE FIFO queue across all connections and exponentially distributed
service times with mean ``S`` (seeded). Fed Poisson arrivals at rate λ, its response times
are those of M/M/1 at ρ = λS: exponential with mean S/(1−ρ), so p50 = ln 2 · S/(1−ρ),
p99 = ln 100 · S/(1−ρ), p99.9 = ln 1000 · S/(1−ρ) (docs/validation.md).

How the timing is kept honest:

- Arrivals are timestamped by the kernel (``SO_TIMESTAMPNS``: when the request reached the
  socket), so reading it a little later does not make a request look late.
  ``time.perf_counter_ns`` after ``recvmsg`` is the fallback, and the gap is kept (``read_lag_ns``).
- The queue runs on *virtual* time: a request arriving at ``a`` starts service at
  ``max(a, previous completion)`` and completes ``Exp(S)`` later, whatever the previous reply
  really took — one late reply never delays the next.
- One thread does everything (epoll over the sockets and a ``timerfd``), so nothing waits for
  the GIL. It sleeps until ~200 µs before a completion (``timerfd``: nanosecond deadlines, where
  epoll and asyncio timeouts have 1-ms granularity) and spins for the rest; the thread runs
  under SCHED_FIFO when allowed, as other tenants of a shared machine otherwise hold it off.
- Data commands (GET, SET, MGET, EXISTS, DEL, INCR, INCRBY) take ``Exp(S)``; everything else
  (PING, INFO, CLIENT, SCAN, UNLINK, …) goes through the same queue, so replies on a
  connection stay in order, with zero service time.

Every queued request is recorded (command, arrival, virtual completion, service time, the
instant its reply was handed to the kernel), so a test can separate the server's fidelity
(sent vs virtual completion) from the client's (client latency vs the server's truth).

Use :class:`MM1Process` from tests: the server runs in a child process with its own GIL, and
``start()``/``stop()``/``port``/``reset()``/``stats()`` drive it. It is started there, not through
conftest's ``spawn``: it is no lab server (no ``spawn:`` kind), and its odd behaviour is the point.
Run by hand::

    python tests/mm1_server.py --service-ms 3 --seed 1     # prints the port; Ctrl-C stops
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import json
import os
import re
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SERVICE_COMMANDS = frozenset({b"GET", b"SET", b"MGET", b"EXISTS", b"DEL", b"INCR", b"INCRBY"})
SPIN_NS = 200_000  # spin the last 200 µs before a reply: timer wake-ups are ~50 µs late on these VMs
SERVER_PRIORITY = 20  # SCHED_FIFO when allowed; above any client's, so a busy client cannot starve the truth

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux value; absent from some Pythons
_CMSG_SPACE = socket.CMSG_SPACE(16)
_PR_SET_TIMERSLACK = 29


# --- RESP --------------------------------------------------------------------------------------

def parse_commands(buf: bytearray) -> list[list[bytes]]:
    """Take every complete command off the front of ``buf`` (RESP arrays or inline lines)."""
    commands = []
    pos = 0
    while pos < len(buf):
        if buf[pos] == ord("*"):
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            count = int(buf[pos + 1:end])
            cursor, args = end + 2, []
            for _ in range(count):
                end = buf.find(b"\r\n", cursor)
                if end < 0 or buf[cursor] != ord("$"):
                    break
                size = int(buf[cursor + 1:end])
                if end + 2 + size + 2 > len(buf):
                    break
                args.append(bytes(buf[end + 2:end + 2 + size]))
                cursor = end + 2 + size + 2
            if len(args) < count:
                break  # incomplete: wait for more bytes
            commands.append(args)
            pos = cursor
        else:
            end = buf.find(b"\n", pos)
            if end < 0:
                break
            line = bytes(buf[pos:end]).strip()
            pos = end + 1
            if line:
                commands.append(line.split())
    del buf[:pos]
    return commands


def bulk(value: bytes | None) -> bytes:
    return b"$-1\r\n" if value is None else b"$%d\r\n%s\r\n" % (len(value), value)


def integer(n: int) -> bytes:
    return b":%d\r\n" % n


def array(items: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(items) + b"".join(items)


def glob_regex(pattern: bytes) -> re.Pattern[bytes]:
    """Redis glob (``*``, ``?``, ``[…]``, backslash escapes) as a regex, for SCAN MATCH."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i:i + 1]
        if c == b"\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1:i + 2]))
            i += 1
        elif c == b"*":
            out.append(b".*")
        elif c == b"?":
            out.append(b".")
        elif c == b"[":
            end = pattern.find(b"]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                out.append(b"[" + pattern[i + 1:end].replace(b"\\", b"\\\\") + b"]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile(b"".join(out) + b"\\Z", re.S)


class Store:
    """Just enough of Redis for redis-py, the engine and cachemark's preflight and cleanup.
    Only the service thread calls :meth:`execute`, so no lock is needed."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.commands = 0
        self.bytes_in = self.bytes_out = 0
        self.clients = 0

    def execute(self, args: list[bytes]) -> bytes:
        self.commands += 1
        name = args[0].upper() if args else b""
        rest = args[1:]
        data = self.data
        if name == b"GET" and len(rest) == 1:
            return bulk(data.get(rest[0]))
        if name == b"SET" and len(rest) >= 2:
            data[rest[0]] = rest[1]  # options (EX, PX, NX, …) are accepted and ignored
            return b"+OK\r\n"
        if name == b"MGET":
            return array([bulk(data.get(k)) for k in rest])
        if name == b"EXISTS":
            return integer(sum(k in data for k in rest))
        if name in (b"DEL", b"UNLINK"):
            return integer(sum(data.pop(k, None) is not None for k in rest))
        if name in (b"INCR", b"INCRBY") and rest:
            try:
                value = int(data.get(rest[0], b"0")) + (int(rest[1]) if len(rest) > 1 else 1)
            except ValueError:
                return b"-ERR value is not an integer or out of range\r\n"
            data[rest[0]] = b"%d" % value
            return integer(value)
        if name == b"PING":
            return bulk(rest[0]) if rest else b"+PONG\r\n"
        if name == b"ECHO" and rest:
            return bulk(rest[0])
        if name == b"HELLO":
            return b"-NOPROTO this test server speaks RESP2 only\r\n"
        if name == b"INFO":
            return bulk(self.info())
        if name == b"DBSIZE":
            return integer(len(data))
        if name == b"SCAN":
            return self.scan(rest)
        if name in (b"CONFIG", b"COMMAND"):
            return b"*0\r\n"
        if name in (b"AUTH", b"SELECT", b"CLIENT", b"QUIT", b"RESET", b"READONLY"):
            return b"+OK\r\n"
        if name in (b"FLUSHDB", b"FLUSHALL"):
            data.clear()
            return b"+OK\r\n"
        return b"-ERR unknown command '%s'\r\n" % name[:40]

    def scan(self, rest: list[bytes]) -> bytes:
        """Every match in one reply, cursor 0: the key space of a test is small."""
        options = {rest[i].upper(): rest[i + 1] for i in range(1, len(rest) - 1, 2)}
        match = glob_regex(options[b"MATCH"]) if b"MATCH" in options else None
        keys = [k for k in self.data if match is None or match.match(k)]
        return array([bulk(b"0"), array([bulk(k) for k in keys])])

    def info(self) -> bytes:
        cpu = time.process_time()
        lines = [
            "# Server", "redis_version:7.0.0-mm1", f"process_id:{os.getpid()}",
            "# Clients", f"connected_clients:{self.clients}",
            "# Memory", f"used_memory:{sum(len(k) + len(v) for k, v in self.data.items())}",
            "# Stats", f"total_commands_processed:{self.commands}",
            f"total_net_input_bytes:{self.bytes_in}", f"total_net_output_bytes:{self.bytes_out}",
            "evicted_keys:0",
            "# CPU", f"used_cpu_user:{cpu:.6f}", "used_cpu_sys:0.000000",
            "# Keyspace", f"db0:keys={len(self.data)},expires=0,avg_ttl=0" if self.data else "",
        ]
        return "\r\n".join(line for line in lines if line).encode() + b"\r\n"


# --- timing ------------------------------------------------------------------------------------

def clock_offset_ns() -> int:
    """CLOCK_REALTIME − CLOCK_MONOTONIC (perf_counter), from the tightest of a few readings:
    kernel receive timestamps are in realtime, everything else here in perf_counter time."""
    best = None
    for _ in range(50):
        a = time.perf_counter_ns()
        r = time.time_ns()
        b = time.perf_counter_ns()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    assert best is not None
    return best[1]


def sleep_until(deadline_ns: int) -> None:
    """Sleep, then spin for the last SPIN_NS: exact to a microsecond unless the CPU is taken away."""
    remaining = deadline_ns - time.perf_counter_ns()
    if remaining > SPIN_NS:
        time.sleep((remaining - SPIN_NS) / 1e9)
    while time.perf_counter_ns() < deadline_ns:
        pass


def fine_timer_slack() -> None:
    """Linux rounds a sleeping thread's wake-up up by its timer slack (50 µs by default)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)


def realtime(priority: int) -> bool:
    """Put the calling thread under SCHED_FIFO when allowed (root, CAP_SYS_NICE): on a shared
    2-core VM, other tenants' bursts otherwise keep a woken thread off the CPU for milliseconds.
    Sleeps and spins are bounded, and the kernel keeps 5 % of each second for everyone else."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (OSError, AttributeError):
        return False
    return True


# --- the server --------------------------------------------------------------------------------

class _TimerFd:
    """A Linux timerfd on CLOCK_MONOTONIC (perf_counter's clock): epoll wakes at a nanosecond
    deadline, where epoll's own timeout only has milliseconds. (os.timerfd_* is Python 3.13+.)"""

    class _Timespec(ctypes.Structure):
        _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]

    class _Itimerspec(ctypes.Structure):
        _fields_ = [("interval", ctypes.c_long * 2), ("value", ctypes.c_long * 2)]

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.timerfd_create(time.CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create")

    def at(self, deadline_ns: int) -> None:
        """Fire once at ``deadline_ns`` (absolute); 0 disarms."""
        spec = self._Itimerspec()
        spec.value[0], spec.value[1] = divmod(max(deadline_ns, 0), 1_000_000_000)
        if deadline_ns > 0 and spec.value[0] == spec.value[1] == 0:
            spec.value[1] = 1
        if self.libc.timerfd_settime(self.fd, 1, ctypes.byref(spec), None) < 0:  # 1: TFD_TIMER_ABSTIME
            raise OSError(ctypes.get_errno(), "timerfd_settime")

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)

    def close(self) -> None:
        os.close(self.fd)


class MM1Server:
    """The queue, served by one thread (see :class:`MM1Process` for tests).

    One thread does everything — accept, read, reply — so nothing waits for the GIL: with a
    reader thread per connection and a service thread, contention for the GIL sent one reply in
    ten 0.4–1.7 ms late on a 2-core VM (0.1–0.2 ms with one thread). Reading late costs nothing,
    as arrivals carry the kernel's timestamp; only replies need the CPU on time, and go first.
    """

    def __init__(self, service_s: float = 0.001, seed: int = 1, host: str = "127.0.0.1", port: int = 0,
                 use_realtime: bool = True) -> None:
        self.use_realtime = use_realtime
        self.realtime = False  # whether the loop got SCHED_FIFO
        self.service_ns = service_s * 1e9
        self.rng = np.random.default_rng(seed)
        self.store = Store()
        self.listener = socket.create_server((host, port), backlog=512)
        self.listener.setblocking(False)
        self.port: int = self.listener.getsockname()[1]
        self.offset = clock_offset_ns()
        self.thread: threading.Thread | None = None
        self.wake_r, self.wake_w = os.pipe()  # stop() wakes the loop
        self.records: list[tuple[int, ...]] = []  # see stats_arrays()
        self.names: dict[bytes, int] = {}

    def start(self) -> MM1Server:
        self.thread = threading.Thread(target=self._loop, name="mm1", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        os.write(self.wake_w, b"x")
        if self.thread is not None:
            self.thread.join(timeout=5)
        self.listener.close()
        os.close(self.wake_r)
        os.close(self.wake_w)

    def reset(self) -> None:
        """Forget the records so far (e.g. after a warm-up); the queue itself carries on."""
        self.records = []

    def _loop(self) -> None:
        fine_timer_slack()
        if self.use_realtime:
            self.realtime = realtime(SERVER_PRIORITY)
        timer = _TimerFd()
        poller = select.epoll()
        poller.register(self.listener.fileno(), select.EPOLLIN)
        poller.register(timer.fd, select.EPOLLIN)
        poller.register(self.wake_r, select.EPOLLIN)
        conns: dict[int, tuple[socket.socket, bytearray]] = {}
        pending: collections.deque = collections.deque()  # (done, arrival, woke, conn, reply, code, service)
        done = 0  # virtual completion of the last request queued
        draws, next_draw = self.rng.exponential(self.service_ns, 65_536), 0
        try:
            while True:
                # Replies first: due (or within the spin window) ones go out now, on time.
                while pending and pending[0][0] - time.perf_counter_ns() <= SPIN_NS:
                    due, arrival, woke, conn, reply, code, service = pending.popleft()
                    while time.perf_counter_ns() < due:
                        pass
                    sent = time.perf_counter_ns()
                    with contextlib.suppress(OSError):  # a client that went away still occupied the server
                        conn.sendall(reply)
                    self.store.bytes_out += len(reply)
                    self.records.append((code, arrival, due, service, sent, woke, time.perf_counter_ns()))
                timer.at(pending[0][0] - SPIN_NS if pending else 0)
                arrivals = []
                for fd, _ in poller.poll():
                    if fd == self.wake_r:
                        return
                    if fd == timer.fd:
                        timer.clear()
                    elif fd == self.listener.fileno():
                        self._accept(poller, conns)
                    elif fd in conns:
                        arrivals += self._read(poller, conns, fd)
                arrivals.sort(key=lambda item: item[0])  # several sockets in one wake-up: by kernel stamp
                for arrival, woke, conn, args in arrivals:
                    name = args[0].upper() if args else b""
                    service = 0
                    if name in SERVICE_COMMANDS:
                        if next_draw == len(draws):
                            draws, next_draw = self.rng.exponential(self.service_ns, 65_536), 0
                        service = int(draws[next_draw])
                        next_draw += 1
                    done = max(arrival, done) + service
                    code = self.names.setdefault(name, len(self.names))
                    pending.append((done, arrival, woke, conn, self.store.execute(args), code, service))
        finally:
            for conn, _ in conns.values():
                conn.close()
            poller.close()
            timer.close()

    def _accept(self, poller: select.epoll, conns: dict) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            conns[conn.fileno()] = (conn, bytearray())
            poller.register(conn.fileno(), select.EPOLLIN)
            self.store.clients += 1

    def _read(self, poller: select.epoll, conns: dict, fd: int) -> list:
        """The complete commands now readable on one connection, each with its arrival: the
        kernel's receive stamp (``SO_TIMESTAMPNS``), else the moment we read it."""
        conn, buf = conns[fd]
        try:
            data, ancillary, _, _ = conn.recvmsg(262_144, _CMSG_SPACE)
        except OSError:
            data, ancillary = b"", []
        woke = time.perf_counter_ns()
        if not data:
            poller.unregister(fd)
            del conns[fd]
            conn.close()
            self.store.clients -= 1
            return []
        arrival = woke
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(payload) >= 16:
                sec, nsec = struct.unpack("qq", payload[:16])
                arrival = min(woke, sec * 1_000_000_000 + nsec - self.offset)
        self.store.bytes_in += len(data)
        buf += data
        return [(arrival, woke, conn, args) for args in parse_commands(buf)]

    def stats_arrays(self) -> dict[str, np.ndarray]:
        """Every record so far as arrays (ns, perf_counter clock); ``names`` maps code → command."""
        rec = np.array(self.records, dtype=np.int64).reshape(-1, 7)
        names = sorted(self.names, key=self.names.get)
        return {
            "code": rec[:, 0], "arrival_ns": rec[:, 1], "done_ns": rec[:, 2], "service_ns": rec[:, 3],
            "sent_ns": rec[:, 4], "woke_ns": rec[:, 5], "returned_ns": rec[:, 6],
            "names": np.array([n.decode(errors="replace") for n in names] or [""]),
            "realtime": np.array([self.realtime]),
        }


# --- the server in its own process, for tests --------------------------------------------------

@dataclass
class ServerStats:
    """What the server saw of one command over a run; arrays hold one value per request (ns)."""

    served: int  # requests of the command
    elapsed_s: float  # first arrival → last virtual completion
    utilisation: float  # ρ: service time of every data command in that window ÷ elapsed
    arrival_rate: float  # requests of the command per second
    mean_service_s: float  # mean of the service times actually drawn
    interarrival_cv: float  # 1 for a Poisson process, 0 for even spacing
    virtual_ns: np.ndarray  # virtual completion − arrival: the exact M/M/1 response of each request
    measured_ns: np.ndarray  # reply written − arrival: the response times the server really gave
    late_ns: np.ndarray  # reply sent − virtual completion: the server's timing error
    read_lag_ns: np.ndarray  # the loop read the request − the kernel received it
    realtime: bool  # the server ran under SCHED_FIFO

    def percentiles(self, which: str, qs=(50, 99, 99.9)) -> np.ndarray:
        return np.percentile(getattr(self, which), qs)


def summarize(arrays: dict[str, np.ndarray], command: str = "GET") -> ServerStats:
    """One command's records as :class:`ServerStats`, over the window from its first arrival to
    its last completion (ρ counts the service time of every command that arrived in it)."""
    names = list(arrays["names"])
    if command not in names:
        raise AssertionError(f"the server saw no {command} (it saw {names})")
    pick = arrays["code"] == names.index(command)
    first_two = np.sort(arrays["arrival_ns"][pick])[:2]
    if len(first_two) == 2 and first_two[1] - first_two[0] > 500_000_000:
        # cachemark's write probe reads its own key once, before prefill and warm-up: not the load
        pick &= arrays["arrival_ns"] != first_two[0]
    arrival, done = arrays["arrival_ns"][pick], arrays["done_ns"][pick]
    start, end = int(arrival.min()), int(done.max())
    in_window = (arrays["arrival_ns"] >= start) & (arrays["arrival_ns"] <= end)
    elapsed = max(end - start, 1)
    gaps = np.diff(np.sort(arrival))
    return ServerStats(
        served=int(pick.sum()),
        elapsed_s=elapsed / 1e9,
        utilisation=float(arrays["service_ns"][in_window].sum() / elapsed),
        arrival_rate=float(pick.sum() / elapsed * 1e9),
        mean_service_s=float(arrays["service_ns"][pick].mean() / 1e9),
        interarrival_cv=float(gaps.std() / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else 0.0,
        virtual_ns=done - arrival,
        measured_ns=arrays["sent_ns"][pick] - arrival,
        late_ns=arrays["sent_ns"][pick] - done,
        read_lag_ns=arrays["woke_ns"][pick] - arrival,
        realtime=bool(arrays["realtime"][0]),
    )


class MM1Process:
    """An :class:`MM1Server` in a child process: the test's own threads (and GIL) stay out
    of its timing. Control is a line protocol on the child's stdin/stdout."""

    def __init__(self, service_s: float = 0.001, seed: int = 1, use_realtime: bool = True) -> None:
        self.service_s, self.seed, self.use_realtime = service_s, seed, use_realtime
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self) -> MM1Process:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--service-ms", repr(self.service_s * 1000), "--seed", str(self.seed),
             "--control", *([] if self.use_realtime else ["--no-realtime"])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.port = int(json.loads(self._line())["port"])
        return self

    def _line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"mm1 server exited (code {self.proc.poll()})")
        return line

    def _ask(self, command: str) -> str:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._line()

    def reset(self) -> None:
        """Forget what the server recorded so far (its queue carries on)."""
        self._ask("reset")

    def arrays(self) -> dict[str, np.ndarray]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "records.npz"
            self._ask(f"save {path}")
            with np.load(path) as npz:
                return {k: npz[k] for k in npz.files}

    def stats(self, command: str = "GET") -> ServerStats:
        return summarize(self.arrays(), command)

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # EOF: the child stops
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> MM1Process:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="M/M/1 RESP test server")
    parser.add_argument("--service-ms", type=float, default=1.0, help="mean service time S")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--control", action="store_true", help="line protocol on stdin (MM1Process)")
    parser.add_argument("--no-realtime", action="store_true", help="never ask for SCHED_FIFO")
    args = parser.parse_args()
    server = MM1Server(args.service_ms / 1000, args.seed, port=args.port, use_realtime=not args.no_realtime).start()
    print(json.dumps({"port": server.port}), flush=True)
    try:
        if not args.control:
            while True:
                time.sleep(3600)
        for line in sys.stdin:
            command, _, rest = line.strip().partition(" ")
            if command == "reset":
                server.reset()
            elif command == "save":
                np.savez(rest, **server.stats_arrays())
            print("ok", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
