"""The latency proxy in front of a target: start it for a profile, steer it mid-run
(faults, a new config), and measure what it adds itself.

:func:`start_proxy` puts a :class:`~cachemark.lab.network.NetworkProfile` in front of any TCP
target through the native proxy (``cachemark._engine.Proxy``); :func:`measure_added_latency`
and :func:`measure_overhead` measure the round trip it really adds, so results can state it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError
from .base import free_port, wait_for_port
from .network import FAULT_KINDS, NetworkProfile
from .wakeups import fast_wakeups


@dataclass
class NetworkEndpoint:
    """Where a client should connect to reach the target through a profile."""

    host: str
    port: int
    profile: NetworkProfile
    upstream: tuple[str, int]
    _proxy: Any = field(default=None, repr=False)

    @property
    def proxied(self) -> bool:
        return self._proxy is not None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stats(self) -> dict[str, Any]:
        """The proxy's counters (connections, bytes each way, faults fired, delay error);
        empty when no proxy is in the path."""
        return dict(self._proxy.stats()) if self._proxy is not None else {}

    def set_fault(self, kind: str | None, *, after_ms: int = 0, stall_ms: int = 0, probability: float = 1.0) -> None:
        """Switch a fault on (``reset``, ``blackhole``, ``stall``) or off (``None``) mid-run."""
        if self._proxy is None:
            raise SpecError("faults need a proxy in the path; same-host has none")
        fault = None
        if kind is not None:
            if kind not in FAULT_KINDS:
                raise SpecError(f"unknown fault {kind!r}: use one of {', '.join(FAULT_KINDS)}")
            fault = {"kind": kind, "after_ms": after_ms, "stall_ms": stall_ms, "probability": probability}
        self._proxy.set_config(self.profile.to_json(fault))

    def set_config(self, config: dict[str, Any]) -> None:
        """Replace the proxy's whole config (the raw JSON schema of docs/network.md)."""
        if self._proxy is None:
            raise SpecError("same-host has no proxy to configure")
        self._proxy.set_config(json.dumps(config))

    def close(self) -> None:
        if self._proxy is not None:
            self._proxy.close()


@contextlib.contextmanager
def start_proxy(
    upstream_host: str,
    upstream_port: int,
    profile: NetworkProfile,
    *,
    fault: dict[str, Any] | None = None,
    threads: int = 1,
    force_proxy: bool = False,
) -> Iterator[NetworkEndpoint]:
    """Yield the endpoint to connect to for ``profile``; the proxy stops on exit.

    A profile that adds nothing (``same-host``) yields the upstream itself unless
    ``force_proxy`` is set. ``threads`` is the proxy runtime's worker threads (1 keeps
    each segment on one core, which is the most precise; 2 doubles throughput headroom).
    """
    if not profile.proxied and not force_proxy and not fault:
        yield NetworkEndpoint(upstream_host, upstream_port, profile, (upstream_host, upstream_port))
        return
    from .._engine import Proxy

    proxy = Proxy(f"{upstream_host}:{upstream_port}", profile.to_json(fault), "127.0.0.1:0", threads)
    try:
        yield NetworkEndpoint(proxy.host, proxy.port, profile, (upstream_host, upstream_port), proxy)
    finally:
        proxy.close()


# --- measuring what the proxy adds ------------------------------------------------------

_ECHO_SCRIPT = """
import socket, sys, threading
def serve(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            conn.sendall(data)
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1])))
srv.listen(64)
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


@contextlib.contextmanager
def echo_server() -> Iterator[tuple[str, int]]:
    """A TCP echo server in its own process on a free loopback port: the neutral upstream
    for calibration (its cost is the same with and without the proxy, so it cancels)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _ECHO_SCRIPT, str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port("127.0.0.1", port, 10, proc)
        yield ("127.0.0.1", port)
    finally:
        proc.kill()
        proc.wait(timeout=5)


def _connect(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _round_trip(sock: socket.socket, payload: bytes) -> int:
    start = time.perf_counter_ns()
    sock.sendall(payload)
    got = 0
    while got < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("echo server closed the connection")
        got += len(chunk)
    return time.perf_counter_ns() - start


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure_added_latency(
    config: dict[str, Any] | NetworkProfile | None = None,
    *,
    samples: int = 2000,
    warmup: int = 200,
    payload: int = 16,
    threads: int = 1,
    upstream: tuple[str, int] | None = None,
    max_seconds: float = 30.0,
) -> dict[str, Any]:
    """Round trips direct vs through a proxy, interleaved, over one connection each.

    The upstream is a private echo server unless ``upstream`` (an echo-like TCP server)
    is given. Returns µs figures: ``direct_p50/p99``, ``proxied_p50/p99``, ``added_p50`` /
    ``added_p99`` (quantile of proxied minus the same quantile of direct), ``pair_p50``
    (median of per-pair differences), the sample count, the proxy's own stats, and
    ``fast_wakeups``: whether idle CPUs polled meanwhile (lab/wakeups.py), as in a run.
    """
    if isinstance(config, NetworkProfile):
        config = config.to_config()
    config = dict(config or {})
    config.setdefault("connect_delay_us", 0)
    from .._engine import Proxy

    with contextlib.ExitStack() as stack:
        polled = stack.enter_context(fast_wakeups())
        host, port = upstream if upstream else stack.enter_context(echo_server())
        proxy = stack.enter_context(Proxy(f"{host}:{port}", json.dumps(config), "127.0.0.1:0", threads))
        direct = stack.enter_context(_connect(host, port))
        proxied = stack.enter_context(_connect(proxy.host, proxy.port))
        data = b"x" * payload
        for _ in range(warmup):
            _round_trip(direct, data)
            _round_trip(proxied, data)
        d_ns: list[float] = []
        p_ns: list[float] = []
        deadline = time.monotonic() + max_seconds
        for i in range(samples):
            # Alternate which path goes first so neither always follows the other's wake-up.
            if i % 2:
                d_ns.append(_round_trip(direct, data))
                p_ns.append(_round_trip(proxied, data))
            else:
                p_ns.append(_round_trip(proxied, data))
                d_ns.append(_round_trip(direct, data))
            if time.monotonic() > deadline:
                break
        stats = dict(proxy.stats())
    us = [v / 1000 for v in d_ns]
    pu = [v / 1000 for v in p_ns]
    return {
        "samples": len(us),
        "payload_bytes": payload,
        "direct_p50": _quantile(us, 0.50),
        "direct_p99": _quantile(us, 0.99),
        "proxied_p50": _quantile(pu, 0.50),
        "proxied_p99": _quantile(pu, 0.99),
        "added_p50": _quantile(pu, 0.50) - _quantile(us, 0.50),
        "added_p99": _quantile(pu, 0.99) - _quantile(us, 0.99),
        "pair_p50": statistics.median(p - d for p, d in zip(pu, us, strict=True)),
        "proxy_stats": stats,
        "fast_wakeups": polled,
    }


def release_late_quantile(stats: dict[str, Any], q: float = 0.99) -> str:
    """From ``Proxy.stats()``: the lateness bucket (e.g. ``"<=30us"``) holding quantile
    ``q`` of delayed segments' release times; ``""`` when nothing was delayed. This is the
    proxy's own account of how punctually it applied the configured delay."""
    buckets: dict[str, int] = stats.get("release_late", {})
    total = sum(buckets.values())
    if total == 0:
        return ""
    seen = 0
    for label, count in buckets.items():
        seen += count
        if seen >= q * total:
            return label
    return label


def measure_overhead(samples: int = 2000, **kwargs: Any) -> dict[str, Any]:
    """The proxy's own added round-trip latency with nothing configured (the honesty figure
    a run reports next to its network profile): ``added_p50`` / ``added_p99`` in µs."""
    return measure_added_latency({}, samples=samples, **kwargs)


# --- capture: the proxy recording the op stream to a trace ------------------------------

CAPTURE_PROTOCOLS = ("resp", "memcached")


class TraceCapture:
    """A capturing proxy in front of ``upstream`` writing a cachemark trace to ``path``.

    The proxy's pumps only copy what they read; a thread here drains the records every
    ``interval`` seconds — parsed and formatted as trace lines natively, keys hashed unless
    ``raw_keys``; values never, only their sizes — and appends them to the trace. :meth:`stop`
    closes the proxy, writes what is left and renames the file into place; a trace whose tap
    dropped segments says so in a comment line and in :meth:`summary`. ``tap_bytes`` is what the
    tap may hold between drains before it drops segments (rather than slow the traffic).
    """

    def __init__(self, upstream: tuple[str, int], protocol: str, path: Any, *, raw_keys: bool = False,
                 listen: str = "127.0.0.1:0", threads: int = 1, interval: float = 0.1,
                 config: dict[str, Any] | None = None, tap_bytes: int = 64 << 20) -> None:
        import threading

        from ..workload.traces import OPS, TraceWriter

        if protocol not in CAPTURE_PROTOCOLS:
            raise SpecError(f"unknown protocol {protocol!r}: use one of {', '.join(CAPTURE_PROTOCOLS)}")
        self.ops = OPS
        self.op_counts = [0] * len(OPS)
        self.raw_keys = raw_keys
        self.interval = interval
        self.writer = TraceWriter(path, raw_keys=raw_keys)  # first: an unwritable path fails before we listen
        from .._engine import Proxy

        try:
            self.proxy = Proxy(f"{upstream[0]}:{upstream[1]}", json.dumps(config or {}), listen, threads, protocol,
                               tap_bytes)
        except OSError as exc:
            self.writer.close(ok=False)
            raise SpecError(str(exc)) from None
        self._lock = threading.Lock()  # the writer: the drain thread's, then stop()'s
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain_loop, name="cachemark-capture", daemon=True)
        self._thread.start()

    @property
    def host(self) -> str:
        return self.proxy.host

    @property
    def port(self) -> int:
        return self.proxy.port

    @property
    def address(self) -> str:
        return self.proxy.address

    @property
    def written(self) -> int:
        return sum(self.op_counts)

    def _drain(self, last: bool = False) -> None:
        lines, count, per_op = self.proxy.drain_capture(last, self.raw_keys)
        if not count:
            return
        with self._lock:
            self.writer.write_lines(lines, count)
            for op, n in enumerate(per_op):
                self.op_counts[op] += n

    def _drain_loop(self) -> None:
        import os
        import threading

        # The recorder only gets spare CPU: on a busy machine the proxy's pumps, the application
        # and the server come first; if it falls behind, the tap drops (and counts), never delays.
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        try:
            while not self._stopping.wait(self.interval):
                self._drain()
        except BaseException as exc:  # noqa: BLE001 — re-raised by stop(), in the caller's thread
            self._error = exc

    def stats(self) -> dict[str, Any]:
        """The recorder's counters (requests, records, other, connections, dropped_segments...)."""
        return dict(self.proxy.capture_stats())

    def summary(self) -> dict[str, Any]:
        """Requests written per op, and the recorder's counters."""
        per_op = {name: n for name, n in zip(self.ops, self.op_counts, strict=True) if n}
        return {"path": str(self.writer.path), "written": self.written, "per_op": per_op, **self.stats()}

    def stop(self, ok: bool = True) -> dict[str, Any]:
        """Close the proxy, write the rest, and put the trace in place (``ok=False``: discard it)."""
        self._stopping.set()
        self._thread.join()
        self.proxy.close()
        try:
            if self._error is not None:
                raise self._error
            if ok:
                self._drain(last=True)
                stats = self.stats()
                if stats["dropped_segments"] or stats["unparsed_connections"]:
                    self.writer.comment(
                        f"incomplete: {stats['dropped_segments']} segments ({stats['dropped_bytes']} bytes) dropped "
                        f"because the recorder fell behind; {stats['unparsed_connections']} connections not parsed")
        except BaseException:
            self.writer.close(ok=False)
            raise
        self.writer.close(ok=ok)
        return self.summary()

    def __enter__(self) -> TraceCapture:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if not self.proxy.closed or self._thread.is_alive():
            self.stop(ok=kind is None)
