"""Conformance of the core backends against real servers: one suite, every adapter.

Each case is a target URL built from the session's lab servers or a scratch directory;
every test runs against every case, so a backend either behaves like the others or
fails by name. Backend-specific behaviour (LRU order, SQLite culling, error messages
for unreachable servers) follows the shared suite.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cachemark.backends import Backend, backend_class, create_backend
from cachemark.errors import BackendUnavailable, SpecError, UserError
from cachemark.lab import LocalServer, free_port
from cachemark.target import parse_target

UrlFactory = Callable[[pytest.FixtureRequest, Path], str]


def _redis(query: str) -> UrlFactory:
    return lambda request, _: request.getfixturevalue("redis_server").url() + query


def _memcached(query: str, servers: int = 1) -> UrlFactory:
    def make(request: pytest.FixtureRequest, _: Path) -> str:
        ports = [request.getfixturevalue("memcached_server").port]
        if servers > 1:
            ports.append(request.getfixturevalue("memcached_server_2").port)
        return "memcached://" + ",".join(f"127.0.0.1:{p}" for p in ports) + query

    return make


def _lab(fixture: str, query: str = "") -> UrlFactory:
    """A URL of a session lab server (PostgreSQL, MariaDB, S3), with ``query`` appended."""
    def make(request: pytest.FixtureRequest, _: Path) -> str:
        url = request.getfixturevalue(fixture).url()
        return url + (("&" if "?" in url else "?") + query if query else "")

    return make


def _django(backend: str, location: UrlFactory | None = None) -> UrlFactory:
    def make(request: pytest.FixtureRequest, d: Path) -> str:
        where = f"&LOCATION={location(request, d)}" if location else ""
        return f"django://?BACKEND={backend}{where}"

    return make


CASES: dict[str, UrlFactory] = {
    "memory": lambda _, __: "memory://",
    "file": lambda _, d: f"file://{d}",
    "file-fanout2": lambda _, d: f"file://{d}?fanout=2",
    "diskcache": lambda _, d: f"diskcache://{d}",
    # a generous timeout: a busy CI machine must not turn lock waits into refused writes
    "diskcache-fanout": lambda _, d: f"diskcache://{d}?shards=4&timeout=2",
    "sqlite": lambda _, d: f"sqlite://{d}/cache.db",
    "redis-hiredis": _redis("?hiredis=true"),
    "redis-python-parser": _redis("?hiredis=false"),
    "redis-cluster": _lab("redis_cluster_server"),
    "memcached-pymemcache": _memcached("?client=pymemcache"),
    "memcached-pylibmc": _memcached("?client=pylibmc"),
    "memcached-pymemcache-2servers": _memcached("?client=pymemcache", servers=2),
    "memcached-pylibmc-2servers": _memcached("?client=pylibmc", servers=2),
    "postgresql": _lab("postgres_server"),
    "mysql": _lab("mysql_server"),
    "s3": _lab("s3_server"),
    "django-locmem": _django("django.core.cache.backends.locmem.LocMemCache"),
    "django-redis": _django("django.core.cache.backends.redis.RedisCache", _redis("")),
    "django-filebased": _django("django.core.cache.backends.filebased.FileBasedCache", lambda _, d: str(d)),
    "twolevel": lambda request, d: f"twolevel://?fast=memory://&slow={_redis('')(request, d)}",
    "tags-versioned-memcached": _memcached("?tags=versioned"),
    "tags-native-redis": _redis("?tags=native"),
}


def open_backend(url: str, namespace: str) -> Backend:
    backend = create_backend(parse_target(url), namespace)
    backend.open()
    return backend


@pytest.fixture(params=sorted(CASES))
def target_url(request: pytest.FixtureRequest, scratch_dir: Path) -> str:
    return CASES[request.param](request, scratch_dir)


@pytest.fixture
def backend(target_url: str, namespace: str) -> Iterator[Backend]:
    b = open_backend(target_url, namespace)
    written: list[str] = [namespace + s for s in ("a", "b", "c", "n", "ttl", "x", "y", "z")]
    yield b
    b.clear_namespace(written)
    b.close()
    b.close()  # closing twice is allowed


# --- the shared suite -------------------------------------------------------------

# Zend's two-level cache keeps values in an envelope (lifetime, priority): no counters.
WITHOUT = {"twolevel": {"incr"}}



def test_set_get_delete(backend: Backend, namespace: str) -> None:
    key = namespace + "a"
    assert backend.get(key) is None
    backend.set(key, b"hello")
    assert backend.get(key) == b"hello"
    backend.set(key, b"\x00\xffbinary" * 100)  # overwrite, binary-safe
    assert backend.get(key) == b"\x00\xffbinary" * 100
    assert backend.delete(key) is True
    assert backend.get(key) is None
    # S3's DeleteObject does not say whether the object existed: its adapter says True
    assert backend.delete(key) is (backend.target.scheme == "s3")


def test_exists(backend: Backend, namespace: str) -> None:
    key = namespace + "a"
    assert backend.exists(key) is False
    backend.set(key, b"v")
    assert backend.exists(key) is True


def test_get_many_set_many(backend: Backend, namespace: str) -> None:
    items = {namespace + k: f"value-{k}".encode() for k in ("x", "y", "z")}
    backend.set_many(items)
    assert backend.get_many([*items, namespace + "missing"]) == items
    assert backend.get_many([]) == {}
    assert backend.get(namespace + "y") == b"value-y"


def test_incr(backend: Backend, namespace: str) -> None:
    if "incr" in WITHOUT.get(backend.target.scheme, ()):
        pytest.skip(f"{backend.target.scheme} has no counters (see WITHOUT)")
    key = namespace + "n"
    assert backend.incr(key) == 1  # a missing counter starts at 0
    assert backend.incr(key, 5) == 6
    assert backend.get(key) == b"6"


# memcached's clock ticks once a second and a TTL of N s ends at the Nth tick after the write: a 1 s
# TTL may be gone a moment after it was set (CI once read it back as a miss), a 2 s one lives 1-2 s.
TTL_S = 2
TTL_GONE_AFTER_S = TTL_S + 1.1


@dataclass
class _TtlWritten:
    """One case's half of test_ttl_expiry done ahead: its keys written, the short-lived one read
    back at once, and when (monotonic s)."""

    backend: Backend
    key: str
    keep: str
    first_read: bytes | None
    read_at: float


@pytest.fixture(scope="module")
def ttl_written(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, _TtlWritten | BaseException]]:
    """Every case's TTL keys written one after another, before the first case's test runs: the
    3.1 s each case then waits for its key to expire overlap (one wait for all, not one each).
    A case whose server is missing (a skip) or whose writes fail keeps that, for its own test."""
    cases: dict[str, _TtlWritten | BaseException] = {}
    urls: dict[str, str] = {}
    for name in sorted(CASES):  # every server started first: the writes then follow each other closely
        try:
            urls[name] = CASES[name](request, tmp_path_factory.mktemp("ttl"))
        except (Exception, pytest.skip.Exception) as exc:  # noqa: BLE001 — reported by the case's test
            cases[name] = exc
    for name, url in urls.items():
        namespace = f"cmt:{uuid.uuid4().hex[:10]}:"
        try:
            backend = open_backend(url, namespace)
        except Exception as exc:  # noqa: BLE001 — reported by the case's test
            cases[name] = exc
            continue
        key, keep = namespace + "ttl", namespace + "b"
        try:
            backend.set(key, b"short-lived", ttl=TTL_S)
            backend.set(keep, b"forever")
            first_read = backend.get(key)
        except Exception as exc:  # noqa: BLE001 — reported by the case's test
            cases[name] = exc
            backend.close()
            continue
        cases[name] = _TtlWritten(backend, key, keep, first_read, time.monotonic())
    yield cases
    for written in cases.values():
        if isinstance(written, _TtlWritten):
            written.backend.clear_namespace([written.key, written.keep])
            written.backend.close()


@pytest.mark.parametrize("case", sorted(CASES))
def test_ttl_expiry(case: str, ttl_written: dict[str, _TtlWritten | BaseException]) -> None:
    written = ttl_written[case]
    if isinstance(written, BaseException):
        raise written
    backend = written.backend
    # read back right after its write (a round trip: under a millisecond), against at least 1 s of life:
    # a read that came 1,000x later would miss. The wait below is a floor: load only lengthens it
    assert written.first_read == b"short-lived"
    time.sleep(max(0.0, written.read_at + TTL_GONE_AFTER_S - time.monotonic()))
    assert backend.get(written.key) is None
    assert backend.exists(written.key) is False
    assert backend.get(written.keep) == b"forever"


def test_clear_namespace_removes_only_its_own(target_url: str, namespace: str) -> None:
    other_ns = f"cmt:{uuid.uuid4().hex[:10]}:"
    mine = open_backend(target_url, namespace)
    # A private (per-process) cache holds both namespaces in the one instance.
    other = mine if not type(mine).capabilities(mine.target).shared else open_backend(target_url, other_ns)
    try:
        my_keys = [f"{namespace}{i}" for i in range(20)]
        other_keys = [f"{other_ns}{i}" for i in range(20)]
        for key in my_keys:
            mine.set(key, b"mine")
        for key in other_keys:
            other.set(key, b"other")
        # The runner may pass keys outside the namespace: they must be left alone.
        removed = mine.clear_namespace(my_keys + other_keys)
        assert removed in (len(my_keys), -1)
        assert mine.get_many(my_keys) == {}
        assert other.get_many(other_keys) == dict.fromkeys(other_keys, b"other")
    finally:
        other.clear_namespace(other_keys)
        other.close()
        mine.close()


def test_constructor_does_not_connect(target_url: str, namespace: str) -> None:
    backend = create_backend(parse_target(target_url), namespace)
    backend.close()  # never opened: still safe
    caps = type(backend).capabilities(backend.target)
    for op in ("get", "set", "delete", "exists", "get_many", "set_many", "incr"):
        assert caps.supports(op) is (op not in WITHOUT.get(backend.target.scheme, ())), op


# --- backend-specific behaviour ---------------------------------------------------


def test_memory_lru_evicts_least_recently_used(namespace: str) -> None:
    b = open_backend("memory://?max_entries=3", namespace)
    for k in "abc":
        b.set(namespace + k, k.encode())
    assert b.get(namespace + "a") == b"a"  # a is now the most recent; b is the oldest
    b.set(namespace + "d", b"d")
    assert b.get(namespace + "b") is None
    assert [b.get(namespace + k) for k in "acd"] == [b"a", b"c", b"d"]
    b.set(namespace + "e", b"e")  # reads went a, c, d: a is now the oldest
    assert b.get(namespace + "a") is None
    assert [b.get(namespace + k) for k in "cde"] == [b"c", b"d", b"e"]
    assert not type(b).capabilities(b.target).shared


def test_sqlite_culling_keeps_rows_within_max_entries(scratch_dir: Path, namespace: str) -> None:
    import sqlite3

    path = scratch_dir / "cull.db"
    b = open_backend(f"sqlite://{path}?max_entries=10&cull_frequency=3", namespace)
    for i in range(50):
        b.set(f"{namespace}{i:03d}", b"v")
        (rows,) = sqlite3.connect(path).execute("SELECT COUNT(*) FROM cachemark_cache").fetchone()
        assert rows <= 10
    assert b.get(f"{namespace}049") == b"v"  # the newest key survives
    assert b.get(f"{namespace}000") is None  # the lowest keys were culled first
    b.set_many({f"{namespace}m{i}": b"v" for i in range(25)})
    (rows,) = sqlite3.connect(path).execute("SELECT COUNT(*) FROM cachemark_cache").fetchone()
    assert rows <= 10
    b.close()


def test_sqlite_leaves_foreign_tables_alone(scratch_dir: Path, namespace: str) -> None:
    import sqlite3

    path = scratch_dir / "shared.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE app_data (id INTEGER)")
        conn.execute("INSERT INTO app_data VALUES (1)")
    b = open_backend(f"sqlite://{path}", namespace)
    b.set(namespace + "a", b"v")
    assert b.clear_namespace() == 1
    b.close()
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM app_data").fetchone() == (1,)


@pytest.mark.parametrize("scheme", ["file", "diskcache"])
def test_pathless_target_shares_a_temp_dir_until_cleared(scheme: str, namespace: str) -> None:
    a = open_backend(f"{scheme}://", namespace)
    b = open_backend(f"{scheme}://", namespace)  # another worker of the same run
    a.set(namespace + "k", b"shared")
    assert b.get(namespace + "k") == b"shared"
    root = a.root if scheme == "file" else a.directory  # type: ignore[attr-defined]
    assert os.path.isdir(root)
    a.close()
    assert os.path.isdir(root)  # closing one worker must not pull the floor from the others
    b.clear_namespace()
    b.close()
    assert not os.path.exists(root)


def _worker_writes_then_reads(url: str, namespace: str, me: int, workers: int, barrier: Any) -> None:
    b = open_backend(url, namespace)
    for i in range(50):
        b.set(f"{namespace}{me}:{i}", f"{me}:{i}".encode())
    b.incr(namespace + "counter", 1)
    barrier.wait(30)
    for other in range(workers):
        for i in range(50):
            assert b.get(f"{namespace}{other}:{i}") == f"{other}:{i}".encode()
    b.close()


@pytest.mark.parametrize("case", ["file", "diskcache", "diskcache-fanout", "sqlite", "redis-hiredis"])
def test_worker_processes_share_one_cache(
    case: str, request: pytest.FixtureRequest, scratch_dir: Path, namespace: str
) -> None:
    url = CASES[case](request, scratch_dir)
    ctx = multiprocessing.get_context("fork")
    workers = 4
    barrier = ctx.Barrier(workers)
    procs = [
        ctx.Process(target=_worker_writes_then_reads, args=(url, namespace, n, workers, barrier))
        for n in range(workers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * workers
    b = open_backend(url, namespace)
    if case != "file":  # the file backend's incr is documented as not atomic across workers
        assert b.get(namespace + "counter") == str(workers).encode()
    b.clear_namespace()
    b.close()


def test_null_backend_is_inert() -> None:
    miss = open_backend("null://", "ns:")
    assert miss.get("ns:a") is None and miss.get_many(["ns:a"]) == {}
    hit = open_backend("null://?hit=true&size=10", "ns:")
    assert hit.get("ns:a") == b"x" * 10
    hit.set("ns:a", b"ignored")
    assert hit.clear_namespace() == 0


def test_redis_info_reports_parser_and_server(redis_server: LocalServer, namespace: str) -> None:
    on = open_backend(redis_server.url() + "?hiredis=true", namespace)
    off = open_backend(redis_server.url() + "?hiredis=false", namespace)
    assert on.info()["hiredis"] is True and off.info()["hiredis"] is False
    assert on.info()["server_version"] == redis_server.version
    assert type(off.client.connection_pool.connection_kwargs["parser_class"]).__name__  # type: ignore[attr-defined]
    on.close()
    off.close()


@pytest.mark.parametrize("client", ["pymemcache", "pylibmc"])
def test_memcached_failing_server_raises_instead_of_missing(
    spawn: Callable[..., LocalServer], namespace: str, client: str
) -> None:
    first, second = spawn("memcached"), spawn("memcached")
    url = f"memcached://127.0.0.1:{first.port},127.0.0.1:{second.port}?client={client}"
    b = open_backend(url, namespace)
    keys = [f"{namespace}{i}" for i in range(20)]
    b.set_many(dict.fromkeys(keys, b"v"))
    second.stop()
    for round_ in range(2):  # twice: the second round must not quietly skip the dead server either
        errors = misses = 0
        for key in keys:
            try:
                value = b.get(key)
            except Exception:
                errors += 1
                continue
            if value is None:
                misses += 1
            else:
                assert value == b"v"
        # libmemcached (pylibmc) reports the very first request to a server that just
        # closed its socket as a miss, not an error; from then on it raises ServerDown.
        assert misses <= (1 if client == "pylibmc" and round_ == 0 else 0)
        assert 0 < errors < len(keys) - misses
    b.close()


# --- errors a user can cause: one line, the right class ----------------------------


def assert_unavailable(url: str) -> str:
    backend = create_backend(parse_target(url), "ns:")  # constructing never connects
    with pytest.raises(BackendUnavailable) as info:
        backend.open()
    message = str(info.value)
    assert "\n" not in message and message
    assert "s3cret" not in message and "wrong" not in message
    return message


def test_redis_unreachable() -> None:
    assert "cannot connect" in assert_unavailable(f"redis://127.0.0.1:{free_port()}/0")


@pytest.mark.parametrize("query", ["?hiredis=true", "?hiredis=false"])
def test_redis_wrong_or_missing_password(redis_server_auth: LocalServer, query: str) -> None:
    port = redis_server_auth.port
    assert "auth" in assert_unavailable(f"redis://:wrong@127.0.0.1:{port}/0{query}").lower()
    assert "auth" in assert_unavailable(f"redis://127.0.0.1:{port}/0{query}").lower()
    good = open_backend(redis_server_auth.url() + query, "ns:")
    good.close()


def test_redis_unknown_host() -> None:
    assert_unavailable("redis://no-such-host.invalid:6379/0")


@pytest.mark.parametrize("client", ["pymemcache", "pylibmc"])
def test_memcached_unreachable(client: str, memcached_server: LocalServer) -> None:
    dead = free_port()
    assert_unavailable(f"memcached://127.0.0.1:{dead}?client={client}")
    # one good server and one dead one: still unavailable, naming the dead one
    message = assert_unavailable(
        f"memcached://127.0.0.1:{memcached_server.port},127.0.0.1:{dead}?client={client}"
    )
    assert str(dead) in message


@pytest.mark.parametrize(
    "url",
    ["sqlite:///proc/no-such-dir/cache.db", "file:///proc/no-such-dir", "diskcache:///proc/no-such-dir"],
)
def test_local_backends_unopenable_path(url: str) -> None:
    assert_unavailable(url)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0?client=jedis",
        "redis://127.0.0.1:6379/notadb",
        "memcached://127.0.0.1:11211?client=libmc",
        "memory://?max_entries=zero",
        "sqlite://",
        "file:///tmp/x?fanout=7",
        "diskcache:///tmp/x?shards=0",
    ],
)
def test_bad_options_are_user_errors(url: str) -> None:
    target = parse_target(url)
    with pytest.raises(SpecError) as info:
        backend_class(target)(target, "ns:")
    assert isinstance(info.value, UserError) and "\n" not in str(info.value)
