"""Server-side measurement: what the server itself says it spent while a phase ran.

Owns :class:`ServerSampler`, a background thread that every ``interval`` seconds (1 s by
default) reads the server's own counters — Redis ``INFO`` over a dedicated redis-py
connection, memcached ``stats`` over a raw socket, PostgreSQL's ``pg_stat_database`` and
MariaDB's ``SHOW GLOBAL STATUS`` — and, when the server's pid is known
(a spawned server), its CPU time and RSS from ``/proc/<pid>/stat`` and ``/proc/<pid>/status``.
:func:`summarize` turns the per-second samples into the figures the results file keeps
(docs/results.md, ``phase["server"]``): CPU µs per op, bytes in/out per op, network Mbps
p90/p70 over the 1-s intervals, used memory and evictions.

Usage (the runner's side)::

    sampler = ServerSampler(reachable_url, pid=server.pid() if server else None)
    sampler.start()            # a baseline sample is taken before start() returns
    ...timed phase...
    phase["server"] = sampler.stop(total_ops=sum(op["count"] for op in ops.values()))

The sampler is one extra client of the server. Its own traffic is counted exactly (the
request bytes and the reply bytes of every ``INFO``/``stats``) and subtracted from the
network counters, and it is excluded from ``connected_clients``; its CPU cost on the
server (one small command per second) is not subtracted and is negligible under load.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

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
    """``INFO`` over a dedicated redis-py connection, with its own bytes counted exactly."""

    kind = "redis"

    def __init__(self, url: str) -> None:
        import redis

        # only the connection options redis-py understands; cachemark's own (client=...) are dropped
        parts = urlsplit(url)
        self.client = redis.Redis.from_url(
            parts._replace(query="").geturl(), socket_timeout=5, socket_connect_timeout=5
        )
        # the raw reply, so its exact size on the wire is known and can be subtracted
        self.client.set_response_callback("INFO", lambda response, **_: response)
        self.own_in = 0  # request bytes the server has counted (including the current one)
        self.own_out = 0  # reply bytes the server has counted (up to the previous reply)

    def read(self) -> dict[str, Any]:
        raw = self.client.execute_command("INFO")
        if isinstance(raw, str):
            raw = raw.encode()
        self.own_in += len(b"*1\r\n$4\r\nINFO\r\n")
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
            "used_memory_bytes": int(info.get("used_memory", 0)),
            "evictions": int(info.get("evicted_keys", 0)),
            "items": _redis_keys(info),
            "commands": int(info.get("total_commands_processed", 0)),
            "clients": max(0, int(info.get("connected_clients", 0)) - SAMPLER_CONNECTIONS),
        }
        self.own_out += len(raw) + len(b"$%d\r\n\r\n" % len(raw))
        return sample

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


def _redis_keys(info: dict[str, str]) -> int:
    total = 0
    for key, value in info.items():
        if key.startswith("db") and value.startswith("keys="):
            total += int(value.split(",")[0][5:])
    return total


class _MemcachedSource:
    """``stats`` over a raw socket to the first server of the URL."""

    kind = "memcached"
    _REQUEST = b"stats\r\n"

    def __init__(self, url: str) -> None:
        first = urlsplit(url).netloc.rpartition("@")[2].split(",")[0]
        host, _, port = first.rpartition(":") if ":" in first else (first, "", "11211")
        self.sock = socket.create_connection((host or "127.0.0.1", int(port or 11211)), timeout=5)
        self.own_in = 0
        self.own_out = 0

    def read(self) -> dict[str, Any]:
        self.sock.sendall(self._REQUEST)
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("memcached closed the stats connection")
            data += chunk
        self.own_in += len(self._REQUEST)
        stats: dict[str, str] = {}
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
            "used_memory_bytes": int(stats.get("bytes", 0)),
            "evictions": int(stats.get("evictions", 0)),
            "items": int(stats.get("curr_items", 0)),
            "commands": commands,
            "clients": max(0, int(stats.get("curr_connections", 0)) - SAMPLER_CONNECTIONS),
        }
        self.own_out += len(data)
        return sample

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class _PostgresSource:
    """``pg_stat_database`` for the target's database: transactions and tuples (no byte counters)."""

    kind = "postgresql"
    _QUERY = ("SELECT xact_commit + xact_rollback, tup_returned + tup_fetched, "
              "tup_inserted + tup_updated + tup_deleted, blks_hit, blks_read, numbackends "
              "FROM pg_stat_database WHERE datname = current_database()")

    def __init__(self, url: str) -> None:
        import psycopg

        parts = urlsplit(url)
        self.conn = psycopg.connect(parts._replace(scheme="postgresql", query="").geturl(), autocommit=True,
                                    connect_timeout=5)

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

    def __init__(self, url: str) -> None:
        import pymysql

        parts = urlsplit(url)
        self.conn = pymysql.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
                                    user=parts.username or "root", password=parts.password or "",
                                    connect_timeout=5, autocommit=True)

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


Source = _RedisSource | _MemcachedSource | _PostgresSource | _MysqlSource


def _open_source(url: str) -> Source | None:
    scheme = urlsplit(url).scheme
    if scheme in ("redis", "rediss", "valkey"):
        return _RedisSource(url)
    if scheme == "memcached":
        return _MemcachedSource(url)
    if scheme in ("postgresql", "postgres"):
        return _PostgresSource(url)
    if scheme in ("mysql", "mariadb"):
        return _MysqlSource(url)
    return None  # other servers: /proc of the pid only (when spawned)


class ServerSampler:
    """Samples a server's counters every ``interval`` seconds on a background thread."""

    def __init__(self, target_url: str, pid: int | None = None, interval: float = 1.0) -> None:
        self.target_url = target_url
        self.pid = pid
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._source: Source | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    @property
    def kind(self) -> str:
        return self._source.kind if self._source else ("process" if self.pid else "none")

    def connect(self) -> ServerSampler:
        """Open the sampler's connection ahead of time, so start() only has to take a sample."""
        if self._source is None and not self.errors:
            try:
                self._source = _open_source(self.target_url)
            except Exception as exc:  # noqa: BLE001 — a sampler failure must never stop the run
                self.errors.append(f"connect: {type(exc).__name__}: {exc}")
        return self

    def start(self) -> ServerSampler:
        """Take the baseline sample now (connecting first if needed); later ones come from the thread."""
        self.connect()
        self._t0 = time.monotonic()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="cachemark-server-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        # sleep to absolute deadlines so a slow INFO does not make the intervals drift
        next_at = self._t0 + self.interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            self._sample()
            next_at += self.interval

    def _sample(self) -> None:
        sample: dict[str, Any] = {"t": round(time.monotonic() - self._t0, 4)}
        if self._source is not None:
            try:
                sample.update(self._source.read())
            except Exception as exc:  # noqa: BLE001 — keep sampling /proc; report the error once
                if len(self.errors) < 5:
                    self.errors.append(f"{self._source.kind}: {type(exc).__name__}: {exc}")
        if self.pid:
            proc = read_proc(self.pid)
            if proc:
                sample.update(proc)
        self.samples.append(sample)

    def stop(self, total_ops: int | None = None) -> dict[str, Any]:
        """Take a final sample, stop the thread and summarise (``total_ops``: the phase's op count)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 10)
        self._sample()
        if self._source is not None:
            self._source.close()
        return summarize(self.samples, total_ops, kind=self.kind, errors=self.errors)


def _with_rates(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each sample plus the per-interval rates since the previous one (first: none)."""
    out: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for sample in samples:
        row = dict(sample)
        if previous is not None:
            dt = sample["t"] - previous["t"]
            if dt > 0:
                now, before = _cpu(sample), _cpu(previous)
                if now is not None and before is not None:
                    row["cpu_pct"] = round(100.0 * (now - before) / dt, 3)
                for name in ("net_in", "net_out"):
                    key = f"{name}_bytes"
                    if key in sample and key in previous:
                        row[f"{name}_mbps"] = round((sample[key] - previous[key]) * 8 / dt / 1e6, 6)
                if "commands" in sample and "commands" in previous:
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


def summarize(samples: list[dict[str, Any]], total_ops: int | None = None, kind: str = "",
              errors: list[str] | None = None, interval_tolerance: float = 0.5) -> dict[str, Any]:
    """The ``phase["server"]`` figures from raw samples (the first is the baseline).

    Mbps percentiles use only intervals of at least ``interval_tolerance`` s so that the
    short tail interval ending at ``stop()`` cannot dominate them.
    """
    rows = _with_rates(samples)
    result: dict[str, Any] = {
        "source": kind, "sampler_connections": SAMPLER_CONNECTIONS, "errors": list(errors or []),
        "cpu_us_per_op": None, "bytes_in_per_op": None, "bytes_out_per_op": None,
        "net_mbps_p90": None, "net_mbps_p70": None, "net_in_mbps_p90": None, "net_out_mbps_p90": None,
        "cpu_pct_p90": None, "used_memory_bytes": None, "rss_bytes": None, "evictions": None,
        "clients": None, "samples": rows,
    }
    if len(rows) < 2:
        return result
    first, last = rows[0], rows[-1]
    elapsed = last["t"] - first["t"]
    cpu0, cpu1 = _cpu(first), _cpu(last)
    ops = total_ops if total_ops else None
    if cpu0 is not None and cpu1 is not None:
        result["cpu_s"] = cpu1 - cpu0
        result["cpu_pct_mean"] = 100.0 * (cpu1 - cpu0) / elapsed if elapsed > 0 else None
        if ops:
            result["cpu_us_per_op"] = (cpu1 - cpu0) * 1e6 / ops
    if "proc_cpu_user_s" in first and "proc_cpu_user_s" in last:
        result["proc_cpu_s"] = (last["proc_cpu_user_s"] + last["proc_cpu_sys_s"]
                                - first["proc_cpu_user_s"] - first["proc_cpu_sys_s"])
    for name in ("in", "out"):
        key = f"net_{name}_bytes"
        if key in first and key in last:
            result[f"bytes_{name}"] = last[key] - first[key]
            if ops:
                result[f"bytes_{name}_per_op"] = (last[key] - first[key]) / ops
    pairs = zip(rows, rows[1:], strict=False)
    full = [r for p, r in pairs if r["t"] - p["t"] >= interval_tolerance] or rows[1:]
    total_mbps = [r["net_in_mbps"] + r["net_out_mbps"] for r in full
                  if "net_in_mbps" in r and "net_out_mbps" in r]
    result["net_mbps_p90"] = _percentile(total_mbps, 90)
    result["net_mbps_p70"] = _percentile(total_mbps, 70)
    result["net_in_mbps_p90"] = _percentile([r["net_in_mbps"] for r in full if "net_in_mbps" in r], 90)
    result["net_out_mbps_p90"] = _percentile([r["net_out_mbps"] for r in full if "net_out_mbps" in r], 90)
    result["net_out_mbps_p70"] = _percentile([r["net_out_mbps"] for r in full if "net_out_mbps" in r], 70)
    result["cpu_pct_p90"] = _percentile([r["cpu_pct"] for r in full if "cpu_pct" in r], 90)
    memory = [r["used_memory_bytes"] for r in rows if "used_memory_bytes" in r]
    if memory:
        result["used_memory_bytes"] = memory[-1]
        result["used_memory_peak_bytes"] = max(memory)
    rss = [r["rss_bytes"] for r in rows if "rss_bytes" in r]
    if rss:
        result["rss_bytes"] = rss[-1]
        result["rss_peak_bytes"] = max(rss)
    if "evictions" in first and "evictions" in last:
        result["evictions"] = last["evictions"] - first["evictions"]
    clients = [r["clients"] for r in rows if "clients" in r]
    if clients:
        result["clients"] = max(clients)
    if "commands" in first and "commands" in last:
        result["server_commands"] = last["commands"] - first["commands"]
    return result


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
