"""Cache stampedes: one hot key with a TTL, read by many clients, and what happens at expiry.

When the hot key expires, every client that reads it before the first recomputation is
stored misses and goes to the origin: with reads arriving at λ per second and the origin
taking Δ seconds, about λ·Δ clients recompute the same value at once (the "thundering
herd"). The strategies that prevent it are measured on a real server:

- ``none``: get; on a miss, recompute and set.
- ``lock``: on a miss, take a lock (Redis ``SET NX PX``, memcached ``add``); the winner
  recomputes, the others wait for the value (their reads are the latency spike).
- ``xfetch``: probabilistic early recomputation (Vattani, Chierichetti and Lowenstein,
  VLDB 2015): the value carries its recompute time δ and expiry; a reader recomputes early
  when ``now - δ·β·ln(U) ≥ expiry``, so one reader refreshes before it expires. At λ·δ ≫ 1
  the readers during that refresh would pass the same test, so the chosen reader takes a
  lock first and the others keep serving the unexpired value.
- ``swr``: stale-while-revalidate: the value carries a soft expiry; past it, one reader
  (the lock's winner) recomputes in the background while everyone is served the stale value.
- ``meta``: memcached's meta protocol (``mg … N R``): the server itself hands one client
  the win flag (W) to recompute and serves the others the stale value (X/Z flags).

Each client is a thread with its own connection (the server's work releases the GIL);
reads follow a Poisson schedule of λ/N per client. The origin is a sleep of Δ, counted.
Reported: origin calls per expiry (calls grouped into the expiry they answer), read
latency percentiles (the spike) and errors.

:class:`Stampedes` is the load path (run/load_path.py) that runs the strategies inside the run
sequence, as every run does: the target provided, checked and probed first, the hot key and its
lock under the run's own namespace, removed however the run ends.
"""

from __future__ import annotations

import contextlib
import math
import random
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from ..measure.histogram import Histogram
from ..schemes import find_scheme, scheme, spawned_as
from ..spec import Workload
from ..target import Endpoint, Target, parse_target
from ..wire import LineReader
from .load_path import LoadPath, Run
from .outcome import LoadResult, RunOutcome

STRATEGIES = ("none", "lock", "xfetch", "swr", "meta")


@dataclass
class StampedeResult:
    strategy: str
    server: str
    duration_s: float
    reads: int
    origin_calls: int
    expiries: int
    calls_per_expiry: list[int]
    latency: Histogram
    errors: int
    stale_reads: int = 0
    notes: list[str] = field(default_factory=list)
    missed: int = 0  # reads that fell due but were never sent: the clients could not keep up with the rate
    scheduled: int = 0

    @property
    def mean_calls_per_expiry(self) -> float:
        return sum(self.calls_per_expiry) / len(self.calls_per_expiry) if self.calls_per_expiry else 0.0


class _Origin:
    """The slow thing the cache protects: Δ seconds per call, every call time recorded."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.calls: list[float] = []
        self._lock = threading.Lock()

    def compute(self) -> bytes:
        start = time.monotonic()
        with self._lock:
            self.calls.append(start)
        time.sleep(self.delay_s)
        return b"v" * 100


def _pack(value: bytes, delta_s: float, soft_expiry: float) -> bytes:
    return struct.pack("<dd", delta_s, soft_expiry) + value


def _unpack(blob: bytes) -> tuple[bytes, float, float]:
    delta, expiry = struct.unpack("<dd", blob[:16])
    return blob[16:], delta, expiry


class _Redis:
    """Any single RESP server (the row's family), over TCP, TLS or a Unix socket, as its endpoint says."""

    def __init__(self, server: Endpoint) -> None:
        import redis

        where: dict[str, Any] = {"unix_socket_path": server.socket} if server.socket else {
            "host": server.host, "port": server.port}
        if server.tls:  # verified as the run's client verifies (the URL's ssl_* options)
            where.update(ssl=True, **server.tls_options)
        self.client = redis.Redis(**where, db=server.db_number(), username=server.username,
                                  password=server.password, socket_timeout=5)

    def get(self, key: str) -> bytes | None:
        return self.client.get(key)

    def set(self, key: str, value: bytes, ttl_s: float) -> None:
        self.client.set(key, value, px=max(1, int(ttl_s * 1000)))

    def add(self, key: str, value: bytes, ttl_s: float) -> bool:
        return bool(self.client.set(key, value, px=max(1, int(ttl_s * 1000)), nx=True))

    def delete(self, key: str) -> None:
        self.client.delete(key)

    def close(self) -> None:
        self.client.close()


class _Memcached:
    """Text protocol for get/set/add/delete, and the meta protocol's ``mg`` for strategy ``meta``."""

    def __init__(self, server: Endpoint) -> None:
        if server.socket is not None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(5)
            try:
                self.sock.connect(server.socket)
            except OSError:
                self.sock.close()
                raise
        else:
            self.sock = socket.create_connection((server.host, server.port), timeout=5)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if server.tls:
                from ..measure.server_stats import tls_context

                context = tls_context(server)
                self.sock = context.wrap_socket(self.sock, server_hostname=server.host)
        self.reader = LineReader(self.sock, "memcached closed the connection")

    def get(self, key: str) -> bytes | None:
        self.sock.sendall(f"get {key}\r\n".encode())
        line = self.reader.line()
        if line == b"END":
            return None
        size = int(line.split()[3])
        value = self.reader.exactly(size)
        self.reader.line()  # END
        return value

    def _store(self, verb: str, key: str, value: bytes, ttl_s: float) -> bool:
        ttl = max(1, math.ceil(ttl_s))
        self.sock.sendall(f"{verb} {key} 0 {ttl} {len(value)}\r\n".encode() + value + b"\r\n")
        return self.reader.line() == b"STORED"

    def set(self, key: str, value: bytes, ttl_s: float) -> None:
        self._store("set", key, value, ttl_s)

    def add(self, key: str, value: bytes, ttl_s: float) -> bool:
        return self._store("add", key, value, ttl_s)

    def delete(self, key: str) -> None:
        self.sock.sendall(f"delete {key}\r\n".encode())
        self.reader.line()

    def meta_get(self, key: str, vivify_s: int, recache_s: int) -> tuple[bytes | None, set[str]]:
        """``mg key v t N<vivify> R<recache>``: the value (or None) and the flags (W win, X stale, Z lost)."""
        self.sock.sendall(f"mg {key} v t N{vivify_s} R{recache_s}\r\n".encode())
        line = self.reader.line()
        parts = line.split()
        if parts[0] == b"VA":
            value = self.reader.exactly(int(parts[1]))
            flags = {p.decode()[0] for p in parts[2:]}
            return value, flags
        if parts[0] in (b"EN", b"HD"):
            return None, {p.decode()[0] for p in parts[1:]}
        raise ConnectionError(f"memcached meta get: {line!r}")

    def meta_set(self, key: str, value: bytes, ttl_s: float) -> None:
        ttl = max(1, math.ceil(ttl_s))
        self.sock.sendall(f"ms {key} {len(value)} T{ttl}\r\n".encode() + value + b"\r\n")
        self.reader.line()

    def close(self) -> None:
        self.sock.close()


def supported(target: Target) -> None:
    """One line unless stampedes are measured on ``target``'s scheme (its row's ``stampede``)."""
    row = find_scheme(target.scheme)
    if row is not None and row.spawner:
        row = spawned_as(target.path)
    if row is None or not row.stampede:
        raise UserError(f"{target.redacted}: stampedes are measured on redis:// or memcached:// targets")
    if row.family == "memcache" and (target.username is not None or target.password is not None):
        raise UserError(f"{target.redacted}: stampedes speak memcached's text and meta protocols, which SASL "
                        "(user:password) does not allow; use a memcached without SASL")


# the stampede client of each protocol family (the row's ``family``)
_CLIENTS = {"resp": _Redis, "memcache": _Memcached}


def _connect(url: str) -> Any:
    target = parse_target(url)
    supported(target)
    client, server = _CLIENTS[scheme(target.scheme).family or ""], target.endpoint()
    return lambda: client(server)


@dataclass(frozen=True)
class HotKey:
    """The hot key and its lock, under a namespace of their own: never a key that could be someone else's."""

    namespace: str

    @property
    def key(self) -> str:
        return self.namespace + "hot"

    @property
    def lock(self) -> str:
        return self.namespace + "lock"


class _Client:
    """One application server thread: reads the hot key on its schedule, by one strategy."""

    def __init__(self, connect: Any, strategy: str, origin: _Origin, ttl_s: float, beta: float, rng: random.Random,
                 lock_ttl_s: float, hot: HotKey) -> None:
        self.connect = connect  # a revalidation in the background needs a connection of its own
        self.conn, self.strategy, self.origin, self.ttl_s = connect(), strategy, origin, ttl_s
        self.beta, self.rng, self.lock_ttl_s = beta, rng, lock_ttl_s
        self.key, self.lock = hot.key, hot.lock
        self.stale = 0

    def read(self) -> None:
        getattr(self, f"_{self.strategy}")()

    def _none(self) -> None:
        if self.conn.get(self.key) is None:
            self.conn.set(self.key, self.origin.compute(), self.ttl_s)

    def _lock(self) -> None:
        while self.conn.get(self.key) is None:
            if self.conn.add(self.lock, b"1", self.lock_ttl_s):
                try:
                    if self.conn.get(self.key) is None:  # the last holder may have just stored it
                        self.conn.set(self.key, self.origin.compute(), self.ttl_s)
                finally:
                    self.conn.delete(self.lock)
                return
            time.sleep(0.002)  # someone else recomputes: wait for the value

    def _xfetch(self) -> None:
        blob = self.conn.get(self.key)
        now = time.time()
        if blob is not None:
            value, delta, expiry = _unpack(blob)
            if now - delta * self.beta * math.log(self.rng.random() or 1e-12) < expiry:
                return
            # the rule picked this reader; the λ·δ readers during its recomputation would be picked
            # too (the value still looks as old), so the first to ask takes a lock and the rest
            # go on serving the value, which has not expired yet
            if not self.conn.add(self.lock, b"1", self.lock_ttl_s):
                return
            try:
                self._xfetch_store()
            finally:
                self.conn.delete(self.lock)
            return
        self._xfetch_store()

    def _xfetch_store(self) -> None:
        start = time.monotonic()
        value = self.origin.compute()
        delta = time.monotonic() - start
        # the key outlives its logical expiry a little, so early refreshes find it
        self.conn.set(self.key, _pack(value, delta, time.time() + self.ttl_s), self.ttl_s + 10 * delta + 1)

    def _swr(self) -> None:
        blob = self.conn.get(self.key)
        now = time.time()
        if blob is not None:
            _, _, soft = _unpack(blob)
            if now < soft:
                return
            self.stale += 1
            if self.conn.add(self.lock, b"1", self.lock_ttl_s):  # one reader revalidates; all are served stale
                threading.Thread(target=self._revalidate, daemon=True).start()
            return
        self._revalidate(hold_lock=False)

    def _revalidate(self, hold_lock: bool = True) -> None:
        conn = self.connect() if hold_lock else self.conn
        try:
            blob = conn.get(self.key)
            if hold_lock and blob is not None and time.time() < _unpack(blob)[2]:
                conn.delete(self.lock)  # the last holder revalidated it just now
                return
            value = self.origin.compute()
            conn.set(self.key, _pack(value, self.origin.delay_s, time.time() + self.ttl_s), self.ttl_s * 3)
            if hold_lock:
                conn.delete(self.lock)
        finally:
            if hold_lock:
                conn.close()

    def _meta(self) -> None:
        value, flags = self.conn.meta_get(self.key, vivify_s=max(1, math.ceil(self.lock_ttl_s)),
                                          recache_s=max(1, math.floor(self.ttl_s / 4)))
        if "W" in flags:  # the server picked this client to recompute (a miss, or the TTL ran low)
            self.conn.meta_set(self.key, self.origin.compute(), self.ttl_s)
        elif "X" in flags or "Z" in flags or not value:
            self.stale += 1  # served the stale value (or nothing yet) while the winner recomputes


def _group_calls(calls: list[float], ttl_s: float) -> list[int]:
    """Origin calls grouped into the expiries they answer: a new group starts when a call
    comes more than half a TTL after the previous one."""
    groups: list[int] = []
    last = None
    for t in sorted(calls):
        if last is None or t - last > ttl_s / 2:
            groups.append(0)
        groups[-1] += 1
        last = t
    return groups


def run_stampede(url: str, strategy: str, rate: float, recompute_s: float, ttl_s: float, duration_s: float,
                 clients: int = 16, beta: float = 1.0, seed: int = 0, namespace: str | None = None) -> StampedeResult:
    """Measure one strategy: ``clients`` threads reading the hot key at ``rate`` reads/s in all (its key
    and lock under ``namespace``; by default one of its own)."""
    if strategy not in STRATEGIES:
        raise UserError(f"strategy {strategy!r}: choose from {', '.join(STRATEGIES)}")
    hot = HotKey(namespace or f"cm:{uuid.uuid4().hex[:8]}:stampede:")
    connect = _connect(url)
    origin = _Origin(recompute_s)
    first = connect()
    if strategy == "meta" and not isinstance(first, _Memcached):
        first.close()
        raise UserError("strategy meta is memcached's meta protocol: it needs a memcached:// target")
    # the hot key exists when the clients start: every origin call answers an expiry, not a cold start
    value = b"v" * 100
    if strategy == "meta":
        first.meta_set(hot.key, value, ttl_s)
    elif strategy in ("xfetch", "swr"):
        keep = ttl_s * 3 if strategy == "swr" else ttl_s + 10 * recompute_s + 1
        first.set(hot.key, _pack(value, recompute_s, time.time() + ttl_s), keep)
    else:
        first.set(hot.key, value, ttl_s)
    first.close()
    latencies: list[int] = []
    errors = [0]
    stale = [0]
    unsent = [0]
    guard = threading.Lock()
    start = time.monotonic() + 0.2
    deadline = start + duration_s

    def client_loop(index: int) -> None:
        rng = random.Random(seed * 1000 + index)  # the schedule: the same for every strategy
        client = _Client(connect, strategy, origin, ttl_s, beta, random.Random(seed * 1000 + index + 500),
                         lock_ttl_s=max(1.0, 10 * recompute_s), hot=hot)
        mine: list[int] = []
        failed = missed = 0
        due = start + rng.expovariate(rate / clients)
        try:
            while due < deadline:
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                elif time.monotonic() >= deadline:  # behind the schedule at its end: the rest is never sent
                    break
                t0 = time.perf_counter_ns()
                try:
                    client.read()
                    mine.append(time.perf_counter_ns() - t0)
                except Exception:  # noqa: BLE001 — a failed read is counted, the client goes on
                    failed += 1
                due += rng.expovariate(rate / clients)
            while due < deadline:
                missed += 1
                due += rng.expovariate(rate / clients)
        finally:
            client.conn.close()
            with guard:
                latencies.extend(mine)
                errors[0] += failed
                stale[0] += client.stale
                unsent[0] += missed

    threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=duration_s + 30)
    time.sleep(recompute_s * 2)  # a revalidation in the background finishes, then everything is removed
    cleanup = connect()
    try:
        cleanup.delete(hot.key)
        cleanup.delete(hot.lock)
    finally:
        cleanup.close()
    calls = [t for t in origin.calls if t < deadline]
    groups = _group_calls(calls, ttl_s)
    return StampedeResult(strategy, parse_target(url).redacted, duration_s, len(latencies), len(calls), len(groups),
                          groups, Histogram.of(latencies), errors[0], stale[0], missed=unsent[0],
                          scheduled=len(latencies) + errors[0] + unsent[0])


# -- in the run sequence ----------------------------------------------------------------------


@dataclass
class StampedeOutcome(RunOutcome):
    stampedes: list[StampedeResult] = field(default_factory=list)


@dataclass(frozen=True)
class StampedeParams:
    strategies: list[str]
    rate: float
    delta_s: float
    ttl_s: float
    duration_s: float
    clients: int
    beta: float
    seed: int


class Stampedes(LoadPath):
    """Every strategy in turn against the sequence's target: the run's "phases"."""

    outcome_class = StampedeOutcome

    def __init__(self, params: StampedeParams, starting: Callable[[str], Any] | None = None) -> None:
        self.params, self.starting = params, starting  # starting(strategy): a context the CLI shows progress in

    def check(self, target: Target, workload: Workload, capabilities: dict[str, Any], network: Any) -> None:
        supported(target)
        if "meta" in self.params.strategies and scheme(target.scheme).family != "memcache":
            raise UserError("strategy meta is memcached's meta protocol: it needs a memcached:// target")

    def run_phases(self, run: Run) -> LoadResult:
        p = self.params
        stampedes = []
        for name in p.strategies:
            with self.starting(name) if self.starting else contextlib.nullcontext():
                stampedes.append(run_stampede(
                    run.target.url, name, p.rate, p.delta_s, p.ttl_s, p.duration_s, p.clients, p.beta, p.seed,
                    namespace=f"{run.namespace}stampede:{name}:"))
        return LoadResult(extra={"stampedes": stampedes})


#: What the sequence checks and probes before the strategies run: the reads and writes they make.
STAMPEDE_WORKLOAD = Workload(keys=1, mix={"get": 1, "set": 1}, prefill=False, workers=1, warmup=0)
