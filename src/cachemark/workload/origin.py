"""Origins for cache-aside: what the ``fetch`` op calls on a miss, and how long that takes.

Owns the ``origin`` workload field — its parsing (one-line :class:`SpecError` messages) and
the per-worker :class:`Origin` the worker calls. An origin is a latency model
(``fixed:10ms``, ``lognormal:10ms,0.5`` for median and sigma, ``hist:FILE`` replaying
latencies in µs, one per line) or a real query against a PostgreSQL or MySQL/MariaDB server
(``postgresql://user@host:port/db?query=SELECT pg_sleep(0.005)``, ``mysql://…?query=SELECT SLEEP(0.005)``);
a password goes in PGPASSWORD / ~/.pgpass or MYSQL_PWD, never in the URL, which is saved with the results.
``spawn:postgresql?query=…`` (or ``spawn:mysql``) starts a private server for the run and queries it.
``?pool=N`` bounds how many calls may be at the origin at once across every worker process of a run, as a database
connection pool does: a POSIX named semaphore named after the run's namespace, which every
worker opens (the first one creates it) before the first timed phase.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SpecError, UserError
from ..schemes import find_scheme, lab_kind, origin_lab_kinds
from ..target import parse_target, redact_text, split_query, with_params
from ..textfile import one_line

EXAMPLES = ("fixed:10ms, lognormal:10ms,0.5, hist:FILE (µs per line) or postgresql://HOST/DB?query=SELECT 1 "
            "(mysql:// too)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
MAX_LATENCY_S = 60.0
MAX_POOL = 4096
DRAWS = 65_536


@dataclass(frozen=True)
class OriginSpec:
    kind: str  # fixed | lognormal | hist | postgresql | mysql
    latency_s: float = 0.0  # fixed: the latency; lognormal: the median
    sigma: float = 0.0
    path: str = ""  # hist: the file
    url: str = ""  # postgresql: the connection URL (query and pool removed)
    query: str = ""
    pool: int | None = None
    text: str = ""


def _latency(text: str, what: str) -> float:
    text = text.strip()
    number = text.rstrip("nsuµm")
    unit = text[len(number):] or "ms"
    if unit not in _UNITS:
        raise SpecError(f"origin {what} {text!r}: expected a latency like 10ms, 500us, 0.01s")
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise SpecError(f"origin {what} {text!r}: expected a latency like 10ms, 500us, 0.01s") from None
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_LATENCY_S:
        raise SpecError(f"origin {what} {text!r}: must be between 0 and {MAX_LATENCY_S:g}s")
    return seconds


def _pool(params: dict[str, str], source: str) -> int | None:
    if "pool" not in params:
        return None
    value = params.pop("pool")
    if not value.isdigit() or not 1 <= int(value) <= MAX_POOL:
        raise SpecError(f"origin {source!r}: pool={value!r} must be a whole number from 1 to {MAX_POOL}")
    return int(value)


def read_hist(path: str) -> np.ndarray:
    """Latencies in seconds from a file of one latency in µs per line (blank lines and # comments skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"origin hist:{one_line(path, 200)}: cannot read it: {one_line(exc, 200)}") from None
    values = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            us = float(line)
        except ValueError:
            raise SpecError(f"origin hist:{one_line(path, 200)}: line {number}: {one_line(line, 40)!r} "
                            "is not a latency in µs") from None
        if not math.isfinite(us) or us < 0 or us > MAX_LATENCY_S * 1e6:
            raise SpecError(f"origin hist:{one_line(path, 200)}: line {number}: {line!r} µs is out of range")
        values.append(us / 1e6)
    if not values:
        raise SpecError(f"origin hist:{one_line(path, 200)}: no latencies in the file (one µs value per line)")
    return np.asarray(values, dtype=np.float64)


def spawned_origin(text: str, server_url: str) -> str:
    """A ``spawn:`` origin made concrete: the started server's URL with the origin's own ``?query=…&pool=N``."""
    _, _, query = text.partition("?")
    return f"{server_url}?{query}"


def parse_origin(text: object) -> OriginSpec:
    """``fixed:10ms?pool=4`` and the like → an :class:`OriginSpec`; anything else one SpecError line."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"origin {one_line(text, 80)!r}: expected {EXAMPLES}")
    text = text.strip()
    shown = one_line(text, 120)
    row = find_scheme(text.split("://", 1)[0].lower()) if "://" in text else None
    if row is not None and row.origin:  # a SQL server the row says an origin may query
        target = parse_target(text)
        if target.password is not None:
            raise SpecError("origin: a password in the origin URL would be saved with the results; "
                            "give it in PGPASSWORD / ~/.pgpass (PostgreSQL) or MYSQL_PWD (MySQL) instead")
        params = dict(target.params)
        pool = _pool(params, shown)
        query = params.pop("query", "").strip()
        if not query:
            raise SpecError(f"origin {shown!r}: a SQL origin needs ?query=…, e.g. ?query=SELECT pg_sleep(0.005)")
        if not _CONNECT[row.origin].takes_params and params:  # pymysql takes no connection parameters here
            raise SpecError(f"origin {shown!r}: unknown parameter {next(iter(params))!r}; allowed: query, pool")
        url = with_params(target, params).url
        return OriginSpec(row.origin, url=url, query=query, pool=pool, text=text)
    if text.startswith("spawn:"):
        kind, _, query = text[len("spawn:"):].partition("?")
        # spawn:<kind>?query=… — a private server the run starts (lab), then the origin is its URL (spawned_origin)
        spawnable = origin_lab_kinds()
        if kind not in spawnable:
            raise SpecError(f"origin {shown!r}: a spawned origin is one of {', '.join(f'spawn:{k}' for k in spawnable)}"
                            ", e.g. spawn:postgresql?query=SELECT pg_sleep(0.005)")
        parse_origin(f"{lab_kind(kind).serves}://127.0.0.1/x?{query}")  # the checks the server's own URL gets
        return OriginSpec("spawn", text=text)
    kind, sep, rest = text.partition(":")
    if not sep or kind not in ("fixed", "lognormal", "hist"):
        raise SpecError(f"origin {shown!r}: unknown kind {kind!r}; expected {EXAMPLES}")
    body, params = split_query(rest)
    pool = _pool(params, shown)
    if params:
        raise SpecError(f"origin {shown!r}: unknown parameter {next(iter(params))!r}; allowed: pool")
    if kind == "fixed":
        return OriginSpec("fixed", latency_s=_latency(body, "latency"), pool=pool, text=text)
    if kind == "lognormal":
        median, comma, sigma = body.partition(",")
        if not comma:
            raise SpecError(f"origin {shown!r}: expected lognormal:MEDIAN,SIGMA, e.g. lognormal:10ms,0.5")
        try:
            s = float(sigma)
        except ValueError:
            raise SpecError(f"origin {shown!r}: sigma {sigma!r} is not a number") from None
        if not math.isfinite(s) or not 0 <= s <= 5:
            raise SpecError(f"origin {shown!r}: sigma must be between 0 and 5")
        return OriginSpec("lognormal", latency_s=_latency(median, "median"), sigma=s, pool=pool, text=text)
    if not body.strip():
        raise SpecError(f"origin {shown!r}: expected hist:FILE, a file of one latency in µs per line")
    read_hist(body.strip())  # checked now: a bad file is one line before anything runs
    return OriginSpec("hist", path=body.strip(), pool=pool, text=text)


def _postgres(spec: OriginSpec):
    import psycopg

    # libpq reads the URL itself: its parameters (sslmode, …) and PGPASSWORD / ~/.pgpass for the password
    return psycopg.connect(spec.url, autocommit=True, connect_timeout=10)


def _mysql(spec: OriginSpec):
    import pymysql

    server = parse_target(spec.url).endpoint()
    return pymysql.connect(host=server.host, port=server.port, user=server.username or "root",
                           password=os.environ.get("MYSQL_PWD", ""), database=server.db or None,
                           autocommit=True, connect_timeout=10)


@dataclass(frozen=True)
class _Connector:
    connect: Any  # OriginSpec -> a DB-API connection
    takes_params: bool  # the URL's own parameters reach the server (libpq's), else only query= and pool=


# the origin kinds a scheme's row names (``Scheme.origin``), and how each connects
_CONNECT = {"postgresql": _Connector(_postgres, True), "mysql": _Connector(_mysql, False)}


def _connect(spec: OriginSpec):
    return _CONNECT[spec.kind].connect(spec)


class PoolNames:
    """The names one run's origin pool has in /dev/shm, all derived from the run's key: removing
    them touches nothing of another run's. A named semaphore ``/x`` lives at /dev/shm/sem.x."""

    def __init__(self, key: str) -> None:
        self.stem = "cm-pool-" + hashlib.sha1(key.encode()).hexdigest()[:20]

    @property
    def mutex(self) -> str:
        """The semaphore that guards the queue."""
        return "/" + self.stem

    @property
    def state(self) -> str:
        """The shared memory holding the free slots and the queue."""
        return "/dev/shm/" + self.stem

    def wake(self, pid: int) -> str:
        """The semaphore waiter ``pid`` sleeps on."""
        return f"/{self.stem}-w{pid}"

    def owns(self, entry: str) -> bool:
        """Whether /dev/shm entry ``entry`` is one of these names."""
        return entry in (self.stem, f"sem.{self.stem}") or entry.startswith(f"sem.{self.stem}-w")


def remove_pool(key: str) -> None:
    """Remove every name the pool of ``key`` left in /dev/shm once its workers are gone: a worker killed
    while waiting never removes its own wake semaphore (the names hold the run's key, so only its own)."""
    names = PoolNames(key)
    try:
        entries = os.listdir("/dev/shm")
    except OSError:
        return
    for entry in entries:
        if names.owns(entry):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join("/dev/shm", entry))


class SharedPool:
    """At most ``size`` holders at once across the processes that open the same ``key``, served in
    the order they asked, as a database pool hands a freed connection to its longest waiter.

    A bare semaphore is not fair: a process that releases the slot and asks again at once takes it
    back before the waiter it woke is even scheduled, so on a busy machine one worker kept the slot
    and the others' waits were either nothing or very long — not the queue the pool models. Here a
    release hands the slot straight to the first process in a queue kept in shared memory (each
    waiter sleeps on its own semaphore), so a slot is never taken past a waiter.
    """

    CAP = 4096  # most processes waiting at once

    def __init__(self, key: str, size: int) -> None:
        import _multiprocessing
        import mmap

        self.names = PoolNames(key)
        self.pid = os.getpid()
        self.wakes: dict[int, object] = {}
        # `mutex` guards the queue; its creator holds it until the queue is set up
        try:
            self.mutex = _multiprocessing.SemLock(1, 0, 1, self.names.mutex, False)
            created = True
        except FileExistsError:  # another worker of the run created it first
            self.mutex = _multiprocessing.SemLock._rebuild(0, 1, 1, self.names.mutex)
            self.mutex.acquire()
            created = False
        try:
            fd = os.open(self.names.state, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if created:
                    os.ftruncate(fd, 8 * (3 + self.CAP))
                elif os.fstat(fd).st_size < 8 * (3 + self.CAP):
                    raise RuntimeError(f"origin pool {self.names.stem}: its shared queue is missing")
                self.map = mmap.mmap(fd, 8 * (3 + self.CAP))
            finally:
                os.close(fd)
            self.state = memoryview(self.map).cast("q")  # free slots, queue head, queue tail, queue
            if created:
                self.state[0] = size
            self.wake = _multiprocessing.SemLock(1, 0, 1, self.names.wake(self.pid), False)
        finally:
            self.mutex.release()

    def acquire(self) -> None:
        st = self.state
        with self._locked():
            if st[0] > 0:
                st[0] -= 1
                return
            if st[2] - st[1] >= self.CAP:
                raise RuntimeError(f"origin pool: more than {self.CAP} processes waiting")
            st[3 + st[2] % self.CAP] = self.pid
            st[2] += 1
        try:
            self.wake.acquire()  # the slot is ours: a release handed it over
        except BaseException:  # Ctrl-C while waiting: leave the queue, or pass on a slot just handed over
            if not self._leave_queue():
                self.release()
            raise

    def _leave_queue(self) -> bool:
        st = self.state
        with self._locked():
            waiting = [st[3 + i % self.CAP] for i in range(st[1], st[2])]
            if self.pid not in waiting:
                return False
            waiting.remove(self.pid)
            st[2] -= 1
            for i, pid in enumerate(waiting):
                st[3 + (st[1] + i) % self.CAP] = pid
            return True

    @contextlib.contextmanager
    def _locked(self):
        self.mutex.acquire()
        try:
            yield
        finally:
            self.mutex.release()

    def release(self) -> None:
        """Hands the slot to the longest waiter still alive, or frees it."""
        st = self.state
        while True:
            with self._locked():
                if st[1] == st[2]:
                    st[0] += 1
                    return
                pid = st[3 + st[1] % self.CAP]
                st[1] += 1
            try:
                os.kill(pid, 0)  # a worker that died waiting must not take the slot with it
            except ProcessLookupError:
                continue
            wake = self.wakes.get(pid)
            if wake is None:
                import _multiprocessing

                try:
                    wake = self.wakes[pid] = _multiprocessing.SemLock._rebuild(0, 1, 1, self.names.wake(pid))
                except FileNotFoundError:
                    return  # interrupted as it was handed the slot: it passed the slot on before it left
            wake.release()
            return

    def unlink(self) -> None:
        """Remove the names (holders keep their handles and mapping); the first worker to finish does it."""
        import _multiprocessing

        for name in (self.names.mutex, self.names.wake(self.pid)):
            with contextlib.suppress(OSError):
                _multiprocessing.sem_unlink(name)
        with contextlib.suppress(OSError):
            os.unlink(self.names.state)


class Origin:
    """One worker's origin: ``call()`` blocks for one origin query (a modelled or a real one)."""

    def __init__(self, spec: OriginSpec, rng: np.random.Generator, pool_key: str) -> None:
        self.spec = spec
        self.rng = rng
        self.pool_key = pool_key
        self.pool: SharedPool | None = None
        self.conn = None
        self._draws: list[float] = []
        self._next = 0
        if spec.kind == "hist":
            self._table = read_hist(spec.path)

    def open(self) -> None:
        if self.spec.pool is not None and self.pool is None:
            self.pool = SharedPool(self.pool_key, self.spec.pool)
        if self.spec.kind in _CONNECT and self.conn is None:
            try:
                self.conn = _connect(self.spec)
            except ImportError as exc:
                raise UserError(f"a {self.spec.kind} origin needs the {exc.name} package: "
                                f"pip install {exc.name}") from None
            except Exception as exc:  # noqa: BLE001 — the driver's own errors: one line for the user
                raise UserError(f"origin: cannot connect: {redact_text(' '.join(str(exc).split()), 200)}") from None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.unlink()
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None

    def _refill(self) -> None:
        spec = self.spec
        if spec.kind == "fixed":
            draws = np.full(DRAWS, spec.latency_s)
        elif spec.kind == "lognormal":
            draws = spec.latency_s * np.exp(self.rng.normal(0.0, spec.sigma, DRAWS))
        else:
            draws = self.rng.choice(self._table, DRAWS)
        self._draws = np.minimum(draws, MAX_LATENCY_S).tolist()
        self._next = 0

    def call(self) -> None:
        """One origin query: sleep the model's next latency, or run the SQL query and read its rows."""
        if self.conn is not None:  # a real query: its rows are read, as the application would
            with self.conn.cursor() as cur:
                cur.execute(self.spec.query)
                if cur.description is not None:
                    cur.fetchall()
            return
        if self._next >= len(self._draws):
            self._refill()
        delay = self._draws[self._next]
        self._next += 1
        if delay > 0:
            time.sleep(delay)
