"""Network what-if profiles and the latency proxy that plays them on one machine.

This module owns the ``--network`` vocabulary: the named profiles (``same-host``, ``lan``,
``same-zone``, ``cross-zone``, ``cross-region``; their numbers and sources are in
``docs/network.md``), the custom form ``LATENCY[,jitter=…,dist=…,bandwidth=…,connect=…,poll=…]``,
and the bridge to the native proxy (``cachemark._engine.Proxy``): :func:`start_proxy`
puts a profile in front of any TCP target, and :func:`measure_added_latency` /
:func:`measure_overhead` measure what the proxy really adds, so results can state it.

A profile's latency is the **round trip** it adds (what ``ping`` would show), split
evenly between the two directions; ``same-host`` adds nothing and uses no proxy at all.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..errors import SpecError
from .base import free_port, wait_for_port

JITTER_DISTS = ("uniform", "normal", "pareto")
FAULT_KINDS = ("reset", "blackhole", "stall")


@dataclass(frozen=True)
class NetworkProfile:
    """Where the cache lives, as the proxy should emulate it.

    ``rtt_us`` is the added round-trip time; ``jitter_us`` the spread added to each
    segment in each direction (standard deviation for ``normal``, half-width for
    ``uniform``, mean of the one-sided tail for ``pareto``); ``bandwidth_bps`` a cap in
    bits per second per direction (0 = none); ``connect_delay_us`` the extra time before a
    new connection carries data (``None``: one round trip, like a TCP handshake).
    ``busy_poll_us`` (opt-in, 0 = off) makes the proxy keep polling for that long after
    each I/O instead of sleeping: more accurate small delays on an idle machine, at the
    cost of one proxy core busy while traffic flows (see docs/network.md).
    """

    name: str
    rtt_us: float = 0.0
    jitter_us: float = 0.0
    jitter_dist: str = "normal"
    bandwidth_bps: int = 0
    connect_delay_us: float | None = None
    busy_poll_us: float = 0.0
    description: str = ""
    source: str = ""
    proxied: bool = True

    @property
    def delay_up_us(self) -> float:
        return self.rtt_us / 2

    @property
    def delay_down_us(self) -> float:
        return self.rtt_us / 2

    def to_config(self, fault: dict[str, Any] | None = None) -> dict[str, Any]:
        """The proxy's JSON config (schema in docs/network.md) for this profile."""
        config: dict[str, Any] = {
            "delay_up_us": self.delay_up_us,
            "delay_down_us": self.delay_down_us,
            "bandwidth_bps": self.bandwidth_bps,
            "connect_delay_us": self.rtt_us if self.connect_delay_us is None else self.connect_delay_us,
        }
        if self.busy_poll_us > 0:
            config["busy_poll_us"] = self.busy_poll_us
        if self.jitter_us > 0:
            config["jitter"] = {"dist": self.jitter_dist, "us": self.jitter_us}
        if fault:
            config["fault"] = fault
        return config

    def to_json(self, fault: dict[str, Any] | None = None) -> str:
        return json.dumps(self.to_config(fault))

    def describe(self) -> dict[str, Any]:
        """What a RunResult records about the network it ran behind."""
        return asdict(self)


# The numbers and their sources are explained in docs/network.md; keep the two in step.
PROFILES: dict[str, NetworkProfile] = {
    p.name: p
    for p in (
        NetworkProfile(
            "same-host",
            description="cache on the application's own host (loopback, no proxy)",
            source="baseline: nothing is added",
            proxied=False,
        ),
        NetworkProfile(
            "lan",
            rtt_us=150,
            jitter_us=15,
            bandwidth_bps=1_000_000_000,
            description="another machine on the same switched 1 GbE LAN",
            source="typical ping between Linux hosts on one switch (0.1-0.2 ms), see docs/network.md",
        ),
        NetworkProfile(
            "same-zone",
            rtt_us=300,
            jitter_us=30,
            bandwidth_bps=5_000_000_000,
            description="another VM in the same cloud availability zone",
            source="EC2 same-AZ ping 0.39-0.45 ms (2014); AWS 'usually <1 ms'; AWS single-flow cap 5 Gbit/s",
        ),
        NetworkProfile(
            "cross-zone",
            rtt_us=1_000,
            jitter_us=100,
            bandwidth_bps=5_000_000_000,
            description="a VM in another availability zone of the same region",
            source="GCP <1 ms p95 within a region; Azure <2 ms between zones; EC2 inter-AZ 0.25-3.4 ms",
        ),
        NetworkProfile(
            "cross-region",
            rtt_us=70_000,
            jitter_us=1_000,
            bandwidth_bps=5_000_000_000,
            description="a cache in another region on the same continent (US east <-> US west)",
            source="Azure published inter-region RTT East US <-> West US 2 ~ 70 ms",
        ),
    )
}

_TIME_UNITS = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}
_RATE_UNITS = {
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "bps": 1,
    "kbps": 1e3,
    "mbps": 1e6,
    "gbps": 1e9,
    "b/s": 8,
    "kb/s": 8e3,
    "mb/s": 8e6,
    "gb/s": 8e9,
}
_OPTIONS = ("jitter", "dist", "bandwidth", "connect", "poll")
MAX_POLL_US = 100_000.0  # the proxy refuses longer busy-poll windows
_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-zµ/]*)\s*$", re.IGNORECASE)


def _allowed() -> str:
    return (
        f"named profiles {', '.join(PROFILES)}, or LATENCY[,jitter=…,dist={'|'.join(JITTER_DISTS)},"
        "bandwidth=…,connect=…,poll=…] such as 2ms,jitter=0.2ms,bandwidth=100mbit or same-zone,poll=200us"
    )


def parse_duration_us(text: str, what: str = "latency") -> float:
    """``"0.2ms"`` -> 200.0 (µs). Units: ns, us/µs, ms, s; a bare ``0`` is allowed."""
    m = _NUMBER_UNIT.match(text)
    if m is None or (m.group(2) == "" and float(m.group(1)) != 0):
        raise SpecError(f"bad {what} {text!r}: use a number with a unit (ns, us, ms, s), e.g. 0.5ms")
    unit = m.group(2)
    if unit and unit not in _TIME_UNITS:
        raise SpecError(f"bad {what} unit in {text!r}: use ns, us, ms or s")
    return float(m.group(1)) * _TIME_UNITS.get(unit, 1.0)


def parse_bandwidth_bps(text: str) -> int:
    """``"100mbit"`` -> 100_000_000 bits/s. Bits: bit, kbit, mbit, gbit; bytes: B/s, kB/s, MB/s, GB/s."""
    m = _NUMBER_UNIT.match(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _RATE_UNITS:
        raise SpecError(
            f"bad bandwidth {text!r}: use kbit, mbit, gbit (bits/s) or kB/s, MB/s, GB/s (bytes/s), e.g. 100mbit"
        )
    bps = int(float(m.group(1)) * _RATE_UNITS[unit])
    if bps <= 0:
        raise SpecError(f"bad bandwidth {text!r}: must be more than 0")
    return bps


def _custom(latency: str) -> NetworkProfile:
    rtt = parse_duration_us(latency)
    return NetworkProfile(name=latency, rtt_us=rtt, description=f"custom: {latency} added round trip")


def _apply(profile: NetworkProfile, key: str, value: str) -> NetworkProfile:
    if key == "jitter":
        return replace(profile, jitter_us=parse_duration_us(value, "jitter"))
    if key == "dist":
        if value not in JITTER_DISTS:
            raise SpecError(f"bad jitter distribution {value!r}: use one of {', '.join(JITTER_DISTS)}")
        return replace(profile, jitter_dist=value)
    if key == "bandwidth":
        return replace(profile, bandwidth_bps=parse_bandwidth_bps(value))
    if key == "connect":
        return replace(profile, connect_delay_us=parse_duration_us(value, "connect delay"))
    if key == "poll":
        poll = parse_duration_us(value, "busy-poll window")
        if poll > MAX_POLL_US:
            raise SpecError(f"bad busy-poll window {value!r}: at most 100ms (use 0 to switch it off)")
        return replace(profile, busy_poll_us=poll)
    raise SpecError(f"unknown network option {key!r}: use {', '.join(_OPTIONS)}")


def parse_network(spec: str) -> list[NetworkProfile]:
    """Parse a ``--network`` value into profiles, in the order given.

    Comma-separated; a token with ``=`` modifies the profile before it, any other token
    starts a new profile: ``same-host,2ms,jitter=0.2ms,cross-region`` is three profiles.
    Options also work on named profiles (``cross-zone,bandwidth=1gbit``), including the
    opt-in busy-poll window (``same-zone,poll=200us``).
    """
    tokens = [t.strip() for t in spec.split(",")]
    if not spec.strip() or any(not t for t in tokens):
        raise SpecError(f"empty network profile in {spec!r}; use {_allowed()}")
    profiles: list[NetworkProfile] = []
    for token in tokens:
        if "=" in token:
            key, _, value = token.partition("=")
            key, value = key.strip().lower(), value.strip()
            if not profiles:
                raise SpecError(f"network option {token!r} must follow a profile; use {_allowed()}")
            base = profiles[-1]
            new = _apply(base, key, value)
            suffix = f",{key}={value}"
            profiles[-1] = replace(new, name=base.name + suffix, proxied=True)
            continue
        name = token.lower()
        if name in PROFILES:
            profiles.append(PROFILES[name])
        elif name and (name[0].isdigit() or name[0] == "."):
            try:
                profiles.append(_custom(token))
            except SpecError as exc:
                raise SpecError(f"{exc}; network profiles are {_allowed()}") from None
        else:
            raise SpecError(f"unknown network profile {token!r}; use {_allowed()}")
    names = [p.name for p in profiles]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(f"network profile {dupes[0]!r} is given twice")
    return profiles


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
    (median of per-pair differences), the sample count, and the proxy's own stats.
    """
    if isinstance(config, NetworkProfile):
        config = config.to_config()
    config = dict(config or {})
    config.setdefault("connect_delay_us", 0)
    from .._engine import Proxy

    with contextlib.ExitStack() as stack:
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


__all__ = [
    "FAULT_KINDS",
    "JITTER_DISTS",
    "PROFILES",
    "NetworkEndpoint",
    "NetworkProfile",
    "echo_server",
    "measure_added_latency",
    "measure_overhead",
    "parse_bandwidth_bps",
    "parse_duration_us",
    "parse_network",
    "release_late_quantile",
    "start_proxy",
]
