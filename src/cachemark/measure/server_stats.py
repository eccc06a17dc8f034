"""Server-side measurement: what the server itself says it spent while a phase ran.

Owns :class:`ServerSampler`, which reads the server's own counters at the phase's edges
(a reading when the phase starts and one when it ends) and every ``interval`` seconds
(1 s by default) in between on a background thread — Redis ``INFO`` over a dedicated
connection, memcached ``stats`` over a raw socket, PostgreSQL's ``pg_stat_database`` and
MariaDB's ``SHOW GLOBAL STATUS`` — and, when the server's pid is known (a spawned
server), its CPU time and RSS from ``/proc/<pid>/stat`` and ``/proc/<pid>/status``.
:func:`summarize` turns the readings into the figures the results file keeps
(docs/results.md, ``phase["server"]``): CPU µs per op, bytes in/out per op, network Mbps
p90/p70 over the 1-s intervals (in + out, and out alone), CPU % p90/p50, used memory and
evictions.

Usage (the runner's side)::

    sampler = ServerSampler(reachable_url, pid=server.pid() if server else None)
    sampler.start()            # the start reading is taken before start() returns
    ...timed phase...
    phase["server"] = sampler.stop(total_ops=sum(op["count"] for op in ops.values()))

``start`` and ``stop`` may come from different threads in any order, each any number of
times: a stop before the start, a second stop or a start after the stop never raise, and
the summary says what was missing. No figure is ever negative: a counter that went
backwards (a restarted server, reset stats) withholds the figure and says why
(``withheld``), and per-second figures from fewer than two full intervals carry
``low_samples``.

The sampler is one extra client of the server. Its own traffic is counted exactly (the
request bytes and the reply bytes of every ``INFO``/``stats``, kept per reading as
``own_in_bytes``/``own_out_bytes``) and subtracted from the network counters, and it is
excluded from ``connected_clients``. Its CPU cost on the server is not subtracted: about
0.15–0.25 ms per reading on a 2-core VM (Redis ``INFO``, memcached ``stats``), negligible
under load at one reading a second, but the bulk of ``cpu_us_per_op`` in a phase of a few ops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import ssl
import threading
import time
from typing import Any

from .. import memcache_binary
from ..schemes import find_scheme
from ..target import Endpoint, Target, parse_target

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# The sampler's own connection, reported so a reader can discount it.
SAMPLER_CONNECTIONS = 1


def _percentile(values: list[float], pct: float) -> float | None:
    """Linear-interpolated percentile (0–100) of a small list; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = pct / 100.0 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _stat_fields(pid: int | str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: fields after the last ')' are fixed
    return stat[stat.rindex(")") + 2 :].split()


def _cpu_ticks(fields: list[str]) -> tuple[int, int]:
    """(user, system) ticks of a process including its reaped children (cutime, cstime)."""
    return int(fields[11]) + int(fields[13]), int(fields[12]) + int(fields[14])


def read_proc(pid: int) -> dict[str, float] | None:
    """CPU seconds (user, system) and RSS bytes of a server process and its child processes.

    Children matter for servers that fork a process per connection (PostgreSQL): their
    CPU is theirs while they live and lands in the parent's cutime/cstime when reaped.
    """
    for _ in range(5):
        fields = _stat_fields(pid)
        if fields is None:
            return None
        user, system = _cpu_ticks(fields)
        rss = _rss(pid)
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and entry.name != str(pid):
                child = _stat_fields(entry.name)
                if child is not None and child[1] == str(pid):
                    child_user, child_system = _cpu_ticks(child)
                    user, system = user + child_user, system + child_system
                    rss += _rss(int(entry.name))
        # A child reaped during the scan was in neither reading (seen: a whole backend's CPU
        # lost when the run's connection closed just then): read again until none was.
        after = _stat_fields(pid)
        if after is None or after[13:15] == fields[13:15]:
            break
    return {"proc_cpu_user_s": user / _CLK_TCK, "proc_cpu_sys_s": system / _CLK_TCK, "rss_bytes": rss}


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _RedisSource:
    """``INFO`` over one dedicated redis-py connection, with its own bytes counted exactly.

    The connection is taken from the pool and held, so every byte on it is the sampler's:
    its handshake (AUTH, CLIENT SETINFO, SELECT) happens here, before any reading, and only
    ``INFO`` follows. A failed read drops it; the next read reconnects and ``link`` counts
    up, because that handshake is not counted and byte deltas across links are not exact.
    """

    kind = "redis"
    ops_are_commands = True  # every op is at least one command the server counts
    _REQUEST = b"*1\r\n$4\r\nINFO\r\n"

    def __init__(self, server: Endpoint) -> None:
        self.client = _redis_client(server)
        self.lock = threading.Lock()
        self.link = 0
        self.last_info: dict[str, str] = {}  # the last INFO's fields, for a cluster's redirect counts
        self.own_in = 0  # request bytes the server has counted (including the current one)
        self.own_out = 0  # reply bytes the server has counted (up to the previous reply)
        self.own_commands = 0  # INFOs the server has counted
        self._conn: Any = None
        self._connect()

    def _connect(self) -> None:
        pool = self.client.connection_pool
        try:
            self._conn = pool.get_connection()
        except TypeError:  # redis-py before 5.3 wants a command name
            self._conn = pool.get_connection("INFO")
        self._conn.connect()
        self.link += 1

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.disconnect()
            with contextlib.suppress(Exception):
                self.client.connection_pool.release(conn)

    def read(self) -> dict[str, Any]:
        if self._conn is None:
            self._connect()
        try:
            self._conn.send_command("INFO")
            raw = self._conn.read_response()
        except Exception:
            self._drop()
            raise
        if isinstance(raw, str):
            raw = raw.encode()
        self.own_in += len(self._REQUEST)
        info: dict[str, str] = {}
        for line in raw.decode(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith("#"):
                info[key] = value.strip()
        # the server counts this request before answering, but this reply only after sending it
        sample = {
            "cpu_user_s": float(info.get("used_cpu_user", 0)),
            "cpu_sys_s": float(info.get("used_cpu_sys", 0)),
            "net_in_bytes": int(info.get("total_net_input_bytes", 0)) - self.own_in,
            "net_out_bytes": int(info.get("total_net_output_bytes", 0)) - self.own_out,
            "own_in_bytes": self.own_in,
            "own_out_bytes": self.own_out,
            "link": self.link,
            "used_memory_bytes": int(info.get("used_memory", 0)),
            "evictions": int(info.get("evicted_keys", 0)),
            "items": _redis_keys(info),
            # Redis counts a command once it has run: earlier INFOs are in, this one is not
            "commands": int(info.get("total_commands_processed", 0)) - self.own_commands,
            "clients": max(0, int(info.get("connected_clients", 0)) - SAMPLER_CONNECTIONS),
        }
        self.own_out += len(raw) + len(b"$%d\r\n\r\n" % len(raw))  # the bulk string's framing
        self.own_commands += 1
        self.last_info = info
        return sample

    def close(self) -> None:
        self._drop()
        with contextlib.suppress(Exception):
            self.client.close()


def _redis_client(server: Endpoint) -> Any:
    """A redis-py client for the endpoint: TCP, TLS (verified as the run verifies: the ssl_* options)
    or a Unix socket, with its credentials and database."""
    import redis

    where: dict[str, Any] = {"unix_socket_path": server.socket} if server.socket else {
        "host": server.host, "port": server.port}
    if server.tls:
        where.update(ssl=True, **server.tls_options)
    return redis.Redis(**where, db=server.db_number(), username=server.username, password=server.password,
                       socket_timeout=5, socket_connect_timeout=5)


def _error_count(field: str) -> int:
    """``count=12,rejected_calls=0,…`` (an ``errorstat_*`` field) → 12; absent → 0."""
    for part in field.split(","):
        name, _, value = part.partition("=")
        if name == "count" and value.isdigit():
            return int(value)
    return 0


class _RedisClusterSource:
    """A Redis Cluster's figures: one :class:`_RedisSource` per primary (asked of the first
    seed that answers ``CLUSTER SLOTS``), their samples added up — CPU, bytes, commands,
    keys and clients are the cluster's. ``link`` is the sum too, so a reconnect to any node
    still shows."""

    kind = "redis"

    def __init__(self, server: Endpoint) -> None:
        self.lock = threading.Lock()
        self.nodes: list[_RedisSource] = []
        why: Exception | None = None
        for host, port in server.hosts:  # the seeds; every node over TLS (verified alike) when the row says so
            try:
                with _redis_client(_node(server, host, port)) as r:
                    slots = r.execute_command("CLUSTER", "SLOTS")
                break
            except Exception as exc:  # noqa: BLE001 - the next seed may answer
                why = exc
        else:
            raise why or ValueError("no seed")
        primaries = dict.fromkeys(_address(entry[2]) for entry in slots)
        try:
            for host, port in primaries:
                self.nodes.append(_RedisSource(_node(server, host, port)))
        except Exception:
            self.close()
            raise

    def read(self) -> dict[str, Any]:
        total: dict[str, Any] = {"moved": 0, "ask": 0}
        for node in self.nodes:
            for key, value in node.read().items():
                total[key] = total.get(key, 0) + value
            # redirects the node answered (INFO errorstats, Redis 6.2+): whichever client sent them
            for key, error in (("moved", "errorstat_MOVED"), ("ask", "errorstat_ASK")):
                total[key] += _error_count(node.last_info.get(error, ""))
        total["primaries"] = len(self.nodes)
        return total

    def close(self) -> None:
        for node in self.nodes:
            node.close()


def _address(node: list[Any]) -> tuple[str, int]:
    """(host, port) of a ``CLUSTER SLOTS`` node entry (``[host, port, id, …]``)."""
    host = node[0].decode() if isinstance(node[0], bytes) else str(node[0])
    return host, int(node[1])


def _node(server: Endpoint, host: str, port: int | None) -> Endpoint:
    """One node of a cluster: the cluster's credentials and TLS, at the node's address, database 0."""
    return dataclasses.replace(server, host=host, port=port, hosts=((host, port),), db="",
                               display=f"[{host}]:{port}" if ":" in host else f"{host}:{port}")


def _redis_keys(info: dict[str, str]) -> int:
    total = 0
    for key, value in info.items():
        if key.startswith("db") and value.startswith("keys="):
            total += int(value.split(",")[0][5:])
    return total


def tls_context(server: Endpoint) -> ssl.SSLContext:
    """A TLS context from the endpoint's ``ssl_*`` options (redis-py's names, memcached's ``?tls=1`` too),
    verifying the server as the run's client does."""
    params = server.tls_options
    context = ssl.create_default_context(cafile=params.get("ssl_ca_certs"))
    if params.get("ssl_cert_reqs", "").lower() == "none":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if params.get("ssl_certfile"):
        context.load_cert_chain(params["ssl_certfile"], params.get("ssl_keyfile"))
    return context


class _MemcachedSource:
    """``stats`` over a raw socket to the first server of the URL (reconnected after a failure,
    which counts ``link`` up as for Redis). A URL with ``user:password@`` is a SASL memcached,
    which is binary-only: the sampler then authenticates and asks in binary (``memcache_binary``)."""

    kind = "memcached"
    ops_are_commands = True
    _REQUEST = b"stats\r\n"

    def __init__(self, server: Endpoint) -> None:
        self.address: tuple[str, int] | str = server.address  # the first server, or memcached+unix's socket
        self.tls = tls_context(server) if server.tls else None
        self.credentials = (server.username or "", server.password or "") if (
            server.username is not None or server.password is not None) else None
        self.lock = threading.Lock()
        self.link = 0
        self.own_in = 0
        self.own_out = 0
        self.sock: socket.socket | None = None
        self._connect()

    def _connect(self) -> None:
        if isinstance(self.address, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(5)
            try:
                sock.connect(self.address)
            except OSError:
                sock.close()
                raise
            self.sock = sock
        else:
            self.sock = socket.create_connection(self.address, timeout=5)
            if self.tls is not None:
                self.sock = self.tls.wrap_socket(self.sock, server_hostname=self.address[0])
        if self.credentials is not None:
            try:
                sent, received = memcache_binary.authenticate(self.sock, *self.credentials)
            except Exception:
                self._drop()
                raise
            self.own_in += sent
            self.own_out += received
        self.link += 1

    def _drop(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def read(self) -> dict[str, Any]:
        if self.sock is None:
            self._connect()
        try:
            data = self._exchange()
        except Exception:
            self._drop()
            raise
        if isinstance(data, tuple):  # binary: (counters, reply bytes)
            stats, size = data
            self.own_in += memcache_binary.HEADER.size
        else:
            self.own_in += len(self._REQUEST)
            size = len(data)
            stats = {}
            for line in data.decode(errors="replace").splitlines():
                parts = line.split(" ", 2)
                if len(parts) == 3 and parts[0] == "STAT":
                    stats[parts[1]] = parts[2]
        commands = sum(int(stats.get(k, 0)) for k in (
            "cmd_get", "cmd_set", "cmd_touch", "cmd_flush", "delete_hits", "delete_misses",
            "incr_hits", "incr_misses", "decr_hits", "decr_misses"))
        sample = {
            "cpu_user_s": float(stats.get("rusage_user", 0)),
            "cpu_sys_s": float(stats.get("rusage_system", 0)),
            "net_in_bytes": int(stats.get("bytes_read", 0)) - self.own_in,
            "net_out_bytes": int(stats.get("bytes_written", 0)) - self.own_out,
            "own_in_bytes": self.own_in,
            "own_out_bytes": self.own_out,
            "link": self.link,
            "used_memory_bytes": int(stats.get("bytes", 0)),
            "evictions": int(stats.get("evictions", 0)),
            "items": int(stats.get("curr_items", 0)),
            "commands": commands,
            "clients": max(0, int(stats.get("curr_connections", 0)) - SAMPLER_CONNECTIONS),
        }
        self.own_out += size
        return sample

    def _exchange(self) -> bytes | tuple[dict[str, str], int]:
        assert self.sock is not None
        if self.credentials is not None:
            return memcache_binary.stats(self.sock)
        self.sock.sendall(self._REQUEST)
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("memcached closed the stats connection")
            data += chunk
        return data

    def close(self) -> None:
        self._drop()


class _PostgresSource:
    """``pg_stat_database`` for the target's database: transactions and tuples (no byte counters)."""

    kind = "postgresql"
    _QUERY = ("SELECT xact_commit + xact_rollback, tup_returned + tup_fetched, "
              "tup_inserted + tup_updated + tup_deleted, blks_hit, blks_read, numbackends "
              "FROM pg_stat_database WHERE datname = current_database()")

    def __init__(self, server: Endpoint) -> None:
        import psycopg

        self.lock = threading.Lock()
        # libpq's defaults (the user's name, its database) where the URL gives none, as the run's client
        given = {"dbname": server.db or None, "user": server.username, "password": server.password}
        self.conn = psycopg.connect(host=server.host, port=server.port, autocommit=True, connect_timeout=5,
                                    **{k: v for k, v in given.items() if v is not None})

    def read(self) -> dict[str, Any]:
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_stat_clear_snapshot()")  # else the stats stay frozen in this session
            cur.execute(self._QUERY)
            xacts, read, written, hit, disk, backends = cur.fetchone()
        return {"commands": int(xacts), "rows_read": int(read), "rows_written": int(written),
                "blocks_hit": int(hit), "blocks_read": int(disk),
                "clients": max(0, int(backends) - SAMPLER_CONNECTIONS)}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


class _MysqlSource:
    """``SHOW GLOBAL STATUS``: statements, bytes each way, connected threads.

    The sampler's own statement and its reply (about 1 KB a second) are in the byte
    counters: small next to any load worth measuring, and said here so nobody wonders.
    """

    kind = "mysql"

    def __init__(self, server: Endpoint) -> None:
        import pymysql

        self.lock = threading.Lock()
        self.conn = pymysql.connect(host=server.host, port=server.port, user=server.username or "root",
                                    password=server.password or "", connect_timeout=5, autocommit=True)

    def read(self) -> dict[str, Any]:
        with self.conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN "
                        "('Questions','Bytes_received','Bytes_sent','Threads_connected')")
            status = {name: int(value) for name, value in cur.fetchall()}
        return {"commands": status.get("Questions", 0), "net_in_bytes": status.get("Bytes_received", 0),
                "net_out_bytes": status.get("Bytes_sent", 0),
                "clients": max(0, status.get("Threads_connected", 0) - SAMPLER_CONNECTIONS)}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


Source = _RedisSource | _RedisClusterSource | _MemcachedSource | _PostgresSource | _MysqlSource


_SOURCES: dict[str, type[Source]] = {"redis": _RedisSource, "redis-cluster": _RedisClusterSource,
                                      "memcached": _MemcachedSource,
                                      "postgres": _PostgresSource, "mysql": _MysqlSource}
# sources whose command counter sees every op, so fewer commands than ops means ops ran outside the readings
_COUNTS_OPS = frozenset(source.kind for source in _SOURCES.values() if getattr(source, "ops_are_commands", False))


def _open_source(target: str | Target) -> Source | None:
    """The stats source the scheme's row names (``schemes.Scheme.stats``), connected to the target's
    endpoint; None: /proc of the pid only."""
    target = parse_target(target) if isinstance(target, str) else target
    row = find_scheme(target.scheme)
    return _SOURCES[row.stats](target.endpoint()) if row is not None and row.stats else None


def open_source(target: str | Target) -> tuple[Source | None, str | None]:
    """The stats connection for a target (None for servers without one) and, when it could
    not be opened, why. Never raises: a sampler failure must never stop the run."""
    try:
        return _open_source(target), None
    except Exception as exc:  # noqa: BLE001
        return None, f"connect: {type(exc).__name__}: {exc}"


class ServerSampler:
    """Reads a server's counters at a phase's start and end, and every ``interval`` seconds between.

    ``source`` (or ``source_error``, why it could not be opened): a stats connection the
    caller opened and shares across phases (run/monitor.py); the sampler leaves it open.
    """

    def __init__(self, target_url: str | Target, pid: int | None = None, interval: float = 1.0,
                 source: Source | None = None, source_error: str | None = None) -> None:
        self.target_url = target_url
        self.pid = pid
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self.errors: list[str] = [source_error] if source_error else []
        self.baseline: str | None = None  # "start", or "connect" when the start reading never came
        self._source = source
        self._shared = source is not None or source_error is not None
        self._tried = self._shared  # one connection attempt per sampler
        # one reading at a time, and start, stop and connect never interleave
        self._lock = threading.Lock()
        self._stop_lock = threading.Lock()  # a second stop() waits for the first one's summary
        self._state = "new"  # new -> started -> stopped, never back
        self._standby: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._summary: dict[str, Any] | None = None
        self._unanswered = False  # the last reading timed out: the server is hung, not just slow to connect

    @property
    def kind(self) -> str:
        return self._source.kind if self._source else ("process" if self.pid else "none")

    def connect(self) -> ServerSampler:
        """Open the stats connection ahead of time and take a standby reading, so start() has
        only one reading to take; the standby stands in as the baseline if stop() comes first."""
        with self._lock:
            if self._state == "new":
                self._open()
                self._t0 = time.monotonic()
                self._standby = self._read()
        return self

    def _open(self) -> None:
        if not self._tried:
            self._tried = True
            self._source, error = open_source(self.target_url)
            if error:
                self.errors.append(error)

    def start(self) -> ServerSampler:
        """Take the start reading now (connecting first if needed); later ones come from the
        thread. Does nothing once started or stopped."""
        with self._lock:
            if self._state != "new":
                return self
            self._open()
            self._t0 = time.monotonic()
            self.samples.append(self._read())
            self.baseline = "start"
            self._state = "started"
            thread = threading.Thread(target=self._loop, name="cachemark-server-sampler", daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # no thread to spare: the two edge readings still give the per-op figures
                self.errors.append(f"thread: {exc}; only the start and end readings")
            else:
                self._thread = thread
        return self

    def _loop(self) -> None:
        # absolute deadlines so a slow INFO does not make the intervals drift; missed ones are skipped
        next_at = self._t0 + self.interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            with self._lock:
                if self._state != "started":
                    return
                self.samples.append(self._read())
            now = time.monotonic()
            while next_at <= now:
                next_at += self.interval

    def _read(self, ask_the_server: bool = True) -> dict[str, Any]:
        sample: dict[str, Any] = {"t": round(time.monotonic() - self._t0, 6)}
        source = self._source
        if source is not None and ask_the_server:
            try:
                with source.lock:
                    sample.update(source.read())
                self._unanswered = False
            except Exception as exc:  # noqa: BLE001 — keep sampling /proc; report the first errors
                self._unanswered = isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower()
                if len(self.errors) < 5:
                    self.errors.append(f"{source.kind}: {type(exc).__name__}: {exc}")
        if self.pid:
            proc = read_proc(self.pid)
            if proc:
                sample.update(proc)
        return sample

    def stop(self, total_ops: int | None = None) -> dict[str, Any]:
        """Take the end reading, stop the thread and summarise (``total_ops``: the phase's op count).

        Safe from any thread and in any order: a second call returns the first summary, and a
        stop before start() summarises from the standby reading (``baseline: "connect"``) or,
        without one, reports no figures and says why.
        """
        with self._stop_lock:
            if self._summary is None:
                self._summary = self._finish(total_ops)
            return self._summary

    def _finish(self, total_ops: int | None) -> dict[str, Any]:
        with self._lock:
            started = self._state == "started"
            self._state = "stopped"
            self._stop.set()
            thread = self._thread
        if thread is not None:  # only ever set once the thread has started
            thread.join(timeout=self.interval + 10)
        with self._lock:
            if started and self._unanswered and self._source is not None:
                # a server that let the last reading time out (a hung one) is not asked for the end reading:
                # it would hold the end of the run for another timeout and give no figure either
                self.samples.append(self._read(ask_the_server=False))
                self.errors.append(f"{self._source.kind}: no end reading: the server let the one before time out")
            elif started:
                self.samples.append(self._read())
            elif self._standby is not None:
                self.baseline = "connect"
                self.samples = [self._standby, self._read()]
                self.errors.append("the phase ended before its start reading: the baseline is the reading "
                                   "taken when the sampler connected")
            else:
                self.errors.append("stopped before it started: no readings")
            if self._source is not None and not self._shared:
                self._source.close()
            result = summarize(self.samples, total_ops, kind=self.kind, errors=self.errors,
                               interval_tolerance=0.5 * self.interval)
            result["baseline"] = self.baseline
            return result


BACKWARDS = "the counter went backwards (server restarted or its statistics were reset)"
RECONNECTED = "the sampler reconnected during the phase, so its own traffic is not known exactly"
EDGE_MISSING = "a reading at the phase's start or end failed (see errors)"
NOT_SEEN = "the server counted none of the phase's ops between its start and end readings"


def _same_link(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Byte counters are comparable only between readings over the same stats connection."""
    return a.get("link") == b.get("link")


def _with_rates(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each sample plus the per-interval rates since the previous one (first: none).

    A rate whose counter went backwards, or whose byte counters span a reconnect of the
    sampler, is left out rather than reported negative or wrong.
    """
    out: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for sample in samples:
        row = dict(sample)
        if previous is not None:
            dt = sample["t"] - previous["t"]
            if dt > 0:
                now, before = _cpu(sample), _cpu(previous)
                if now is not None and before is not None and now >= before:
                    row["cpu_pct"] = round(100.0 * (now - before) / dt, 3)
                for name in ("net_in", "net_out"):
                    key = f"{name}_bytes"
                    if (key in sample and key in previous and _same_link(sample, previous)
                            and sample[key] >= previous[key]):
                        row[f"{name}_mbps"] = round((sample[key] - previous[key]) * 8 / dt / 1e6, 6)
                if "commands" in sample and "commands" in previous and sample["commands"] >= previous["commands"]:
                    row["ops_per_s"] = round((sample["commands"] - previous["commands"]) / dt, 3)
        out.append(row)
        previous = sample
    return out


def _cpu(sample: dict[str, Any]) -> float | None:
    """CPU seconds: the server's own counters when it reports them, else /proc."""
    if "cpu_user_s" in sample:
        return sample["cpu_user_s"] + sample["cpu_sys_s"]
    if "proc_cpu_user_s" in sample:
        return sample["proc_cpu_user_s"] + sample["proc_cpu_sys_s"]
    return None


def _proc_cpu(sample: dict[str, Any]) -> float | None:
    if "proc_cpu_user_s" in sample:
        return sample["proc_cpu_user_s"] + sample["proc_cpu_sys_s"]
    return None


def summarize(samples: list[dict[str, Any]], total_ops: int | None = None, kind: str = "",
              errors: list[str] | None = None, interval_tolerance: float = 0.5) -> dict[str, Any]:
    """The ``phase["server"]`` figures from raw readings (the first is the baseline, the last the end).

    Per-op figures are counter deltas between the two edge readings. Mbps and CPU %
    percentiles use only intervals of at least ``interval_tolerance`` s, so the short tail
    ending at ``stop()`` cannot dominate them; with fewer than two such intervals they come
    from whatever intervals there are and ``low_samples`` is set. A delta that would be
    negative or inexact is None, with the reason in ``withheld``. Redis and memcached count
    at least one command per op, so fewer commands than ops means ops ran outside the
    readings: ``ops_unseen`` says how many at least, and with none seen the figures are
    withheld.
    """
    rows = _with_rates(samples)
    withheld: dict[str, str] = {}
    result: dict[str, Any] = {
        "source": kind, "sampler_connections": SAMPLER_CONNECTIONS, "errors": list(errors or []),
        "cpu_us_per_op": None, "bytes_in_per_op": None, "bytes_out_per_op": None,
        "net_mbps_p90": None, "net_mbps_p70": None, "net_in_mbps_p90": None, "net_out_mbps_p90": None,
        "net_out_mbps_p70": None, "cpu_pct_p90": None, "cpu_pct_p50": None, "used_memory_bytes": None,
        "rss_bytes": None, "evictions": None,
        "clients": None, "low_samples": True, "rate_intervals": 0, "withheld": withheld, "samples": rows,
    }
    if len(rows) < 2:
        return result
    # each family adds its figures in turn: the order of the keys (and of ``withheld``) is the file's
    ops = total_ops if total_ops else None
    _cpu_figures(result, withheld, rows[0], rows[-1], ops)
    _byte_figures(result, withheld, rows[0], rows[-1], ops)
    _rate_figures(result, rows, interval_tolerance)
    _state_figures(result, withheld, rows)
    _unseen_ops(result, withheld, kind, ops)
    return result


def _delta(withheld: dict[str, str], name: str, before: float | None, after: float | None) -> float | None:
    """``after - before``; None when either is missing, or when the counter went backwards (said in
    ``withheld`` under ``name``)."""
    if before is None or after is None:
        return None
    if after < before:
        withheld[name] = BACKWARDS
        return None
    return after - before


def _cpu_figures(result: dict[str, Any], withheld: dict[str, str], first: dict[str, Any], last: dict[str, Any],
                 ops: int | None) -> None:
    """The server's CPU between the edge readings: seconds, mean %, µs per op; and /proc's alone."""
    elapsed = last["t"] - first["t"]
    cpu = _delta(withheld, "cpu_us_per_op", _cpu(first), _cpu(last))
    if cpu is not None:
        result["cpu_s"] = cpu
        result["cpu_pct_mean"] = 100.0 * cpu / elapsed if elapsed > 0 else None
        if ops:
            result["cpu_us_per_op"] = cpu * 1e6 / ops
    proc = _delta(withheld, "proc_cpu_s", _proc_cpu(first), _proc_cpu(last))
    if proc is not None:
        result["proc_cpu_s"] = proc


def _byte_figures(result: dict[str, Any], withheld: dict[str, str], first: dict[str, Any], last: dict[str, Any],
                  ops: int | None) -> None:
    """Network bytes in and out between the edge readings (the sampler's own left out), in all and
    per op; withheld when an edge lacks them or the sampler reconnected between the edges."""
    for name in ("in", "out"):
        key, figure = f"net_{name}_bytes", f"bytes_{name}_per_op"
        if (key in first) != (key in last):
            withheld[figure] = EDGE_MISSING
            continue
        if key not in first:
            continue
        if not _same_link(first, last):
            withheld[figure] = RECONNECTED
            continue
        moved = _delta(withheld, figure, first[key], last[key])
        if moved is not None:
            result[f"bytes_{name}"] = moved
            if ops:
                result[figure] = moved / ops
        own = f"own_{name}_bytes"  # what the sampler itself exchanged, already left out of bytes_*
        if own in first and own in last:
            result[f"sampler_bytes_{name}"] = last[own] - first[own]


def _rate_figures(result: dict[str, Any], rows: list[dict[str, Any]], interval_tolerance: float) -> None:
    """Mbps and CPU % percentiles over the intervals of at least ``interval_tolerance`` s (over
    every interval when fewer than two are that long: ``low_samples``)."""
    pairs = list(zip(rows, rows[1:], strict=False))
    full = [r for p, r in pairs if r["t"] - p["t"] >= interval_tolerance]
    result["rate_intervals"] = len(full)
    result["low_samples"] = len(full) < 2
    used = full or [r for _, r in pairs]
    total_mbps = [r["net_in_mbps"] + r["net_out_mbps"] for r in used
                  if "net_in_mbps" in r and "net_out_mbps" in r]
    result["net_mbps_p90"] = _percentile(total_mbps, 90)
    result["net_mbps_p70"] = _percentile(total_mbps, 70)
    result["net_in_mbps_p90"] = _percentile([r["net_in_mbps"] for r in used if "net_in_mbps" in r], 90)
    # bytes out alone is what reference 001 alarms on (CloudWatch NetworkBytesOut)
    out_mbps = [r["net_out_mbps"] for r in used if "net_out_mbps" in r]
    result["net_out_mbps_p90"] = _percentile(out_mbps, 90)
    result["net_out_mbps_p70"] = _percentile(out_mbps, 70)
    cpu_pct = [r["cpu_pct"] for r in used if "cpu_pct" in r]
    result["cpu_pct_p90"] = _percentile(cpu_pct, 90)
    result["cpu_pct_p50"] = _percentile(cpu_pct, 50)


def _state_figures(result: dict[str, Any], withheld: dict[str, str], rows: list[dict[str, Any]]) -> None:
    """Memory and RSS (last and peak), evictions, a cluster's redirects, clients (peak) and the
    commands the server counted between the edge readings."""
    first, last = rows[0], rows[-1]
    memory = [r["used_memory_bytes"] for r in rows if "used_memory_bytes" in r]
    if memory:
        result["used_memory_bytes"] = memory[-1]
        result["used_memory_peak_bytes"] = max(memory)
    rss = [r["rss_bytes"] for r in rows if "rss_bytes" in r]
    if rss:
        result["rss_bytes"] = rss[-1]
        result["rss_peak_bytes"] = max(rss)
    if "evictions" in first and "evictions" in last:
        result["evictions"] = _delta(withheld, "evictions", first["evictions"], last["evictions"])
    if "moved" in first and "moved" in last:  # a Redis Cluster: the redirects its primaries answered
        moved = _delta(withheld, "moved", first["moved"], last["moved"])
        ask = _delta(withheld, "ask", first["ask"], last["ask"])
        if moved is not None and ask is not None:
            result["cluster"] = {"primaries": last["primaries"], "moved": moved, "ask": ask}
    clients = [r["clients"] for r in rows if "clients" in r]
    if clients:
        result["clients"] = max(clients)
    if "commands" in first and "commands" in last:
        result["server_commands"] = _delta(withheld, "server_commands", first["commands"], last["commands"])


def _unseen_ops(result: dict[str, Any], withheld: dict[str, str], kind: str, ops: int | None) -> None:
    """Ops the server's command count says ran outside the edge readings, for a server that counts
    every op as at least one command; with none seen, the phase's figures are withheld."""
    seen = result.get("server_commands")
    if kind in _COUNTS_OPS and ops and seen is not None and seen < ops:
        # every op is at least one command, so at least this many ran outside the two readings
        # (an edge reading came late); with none seen, its figures would be 0 or noise
        result["ops_unseen"] = ops - seen
        if seen == 0:
            for figure in ("cpu_us_per_op", "bytes_in_per_op", "bytes_out_per_op", "net_mbps_p90", "net_mbps_p70",
                           "net_in_mbps_p90", "net_out_mbps_p90", "net_out_mbps_p70", "cpu_pct_p90",
                           "cpu_pct_p50"):
                result[figure] = None
                withheld[figure] = NOT_SEEN


def timeseries(server: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-interval server figures keyed like ``phase["timeseries"]`` entries, for merging.

    ``t`` is seconds since the sampler started. A last interval shorter than half the
    typical one (cut short by ``stop()``) is left out: its rates are mostly noise.
    """
    rows = server.get("samples", [])
    steps = sorted(b["t"] - a["t"] for a, b in zip(rows, rows[1:], strict=False))
    if len(steps) >= 3 and rows[-1]["t"] - rows[-2]["t"] < 0.5 * steps[len(steps) // 2]:
        rows = rows[:-1]
    out = []
    for row in rows[1:]:
        out.append({
            "t": row["t"],
            "server_ops_per_s": row.get("ops_per_s"),
            "server_cpu_pct": row.get("cpu_pct"),
            "server_rss_bytes": row.get("rss_bytes"),
            "net_in_mbps": row.get("net_in_mbps"),
            "net_out_mbps": row.get("net_out_mbps"),
        })
    return out
