"""cachemark never deletes or changes what it did not write (issue 10, items 7 and 11).

Every test writes sentinels first — another application's DiskCache, rows in the same
SQLite table, ``.djcache`` files, a Django cache table, keys of another run — then runs
cachemark against the same place (real directories, real servers) and checks that every
sentinel is still there, byte for byte, and that the persisted settings did not move.
Cleanup failures must say what was left instead of disappearing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cachemark.backends import create_backend
from cachemark.backends.base import Backend, CleanupFailed
from cachemark.backends.django import django_url
from cachemark.errors import SpecError, UserError
from cachemark.lab import LocalServer
from cachemark.run.runner import run_target
from cachemark.spec import TagSpec, Workload
from cachemark.target import parse_target

# Small runs that still overflow every limit below (200 keys against 50-100 entries / 50 kB).
SMALL = Workload(keys=200, value_size="500-1500", key_dist="uniform", mix={"get": 70, "set": 30}, ops=1500,
                 duration=None, warmup=0, workers=2, seed=3)


def _open(url: str, namespace: str) -> Backend:
    backend = create_backend(parse_target(url), namespace)
    backend.open()
    return backend


def _listing(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its content: the sentinel a run must leave as it was."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


# --- DiskCache: settings are persisted in the cache, and size_limit culls the whole cache ------


def _users_diskcache(directory: Path, shards: int = 0) -> dict[str, bytes]:
    import diskcache

    values = {f"user:{i}": os.urandom(2000) for i in range(55)}
    cls = diskcache.FanoutCache if shards else diskcache.Cache
    extra = {"shards": shards} if shards else {}
    with cls(str(directory), size_limit=2**30, **extra) as cache:
        for key, value in values.items():
            cache.set(key, value)
    return values


def _diskcache_state(directory: Path) -> tuple[dict[str, list], dict[str, bytes]]:
    """Every shard's persisted settings and every key's value, read with sqlite3 alone.

    Opening a DiskCache to check it would itself write settings (FanoutCache passes its
    size_limit on), so the ground truth is read from the files directly.
    """
    settings, values = {}, {}
    for db in sorted(directory.rglob("cache.db")):
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            settings[str(db.relative_to(directory))] = conn.execute(
                "SELECT key, value FROM Settings ORDER BY key").fetchall()
            for key, raw, filename in conn.execute("SELECT key, value, filename FROM Cache"):
                values[key] = raw if filename is None else (db.parent / filename).read_bytes()
    return settings, values


@pytest.mark.parametrize("shards", [False, True], ids=["Cache", "FanoutCache"])
def test_diskcache_size_limit_leaves_the_users_cache_and_settings_alone(tmp_path: Path, shards: bool) -> None:
    users = tmp_path / "users-cache"
    _users_diskcache(users, 2 if shards else 0)
    settings, values = _diskcache_state(users)
    names = sorted(p.relative_to(users).as_posix() for p in users.rglob("*"))
    assert len(values) == 55 and ("size_limit", 2**30 // (2 if shards else 1)) in next(iter(settings.values()))
    query = "size_limit=50000&eviction_policy=least-frequently-used" + ("&shards=2&timeout=2" if shards else "")
    outcome = run_target(f"diskcache://{users}?{query}", SMALL)
    assert outcome.status == "ok", outcome.reason
    assert outcome.backend.cleanup_error is None
    assert _diskcache_state(users) == (settings, values)  # 55 of 55 keys, and the settings did not move
    assert sorted(p.relative_to(users).as_posix() for p in users.rglob("*")) == names  # nothing of the run left


def test_diskcache_run_leaves_no_file_in_the_users_directory(tmp_path: Path) -> None:
    users = tmp_path / "users-cache"
    _users_diskcache(users)
    names = sorted(os.listdir(users))
    data = (users / "cache.db").read_bytes()
    outcome = run_target(f"diskcache://{users}?size_limit=50000", SMALL)
    assert outcome.status == "ok", outcome.reason
    assert sorted(os.listdir(users)) == names
    assert (users / "cache.db").read_bytes() == data  # not even opened for writing


def test_a_directory_cachemark_created_is_removed_again(tmp_path: Path) -> None:
    for scheme in ("file", "diskcache"):
        new = tmp_path / f"new-{scheme}"
        outcome = run_target(f"{scheme}://{new}", SMALL)
        assert outcome.status == "ok", outcome.reason
        assert not new.exists(), f"{scheme}: {sorted(os.listdir(new))}"


# --- SQLite: culling counts and deletes the run's namespace only ---------------------------


def _foreign_rows(path: Path, table: str = "cachemark_cache") -> list[tuple]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        sql = f"SELECT key, value, expires FROM {table} WHERE key NOT LIKE 'cm:%' ORDER BY key"
        return conn.execute(sql).fetchall()


@pytest.mark.parametrize("cull_frequency", [3, 0])
def test_sqlite_max_entries_culls_only_the_runs_namespace(tmp_path: Path, cull_frequency: int) -> None:
    path = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE cachemark_cache (key TEXT PRIMARY KEY, value BLOB, expires REAL)")
        # Keys that sort before "cm:" would be culled first; one of them has expired.
        conn.executemany("INSERT INTO cachemark_cache VALUES (?, ?, ?)",
                         [(f"app:{i}", f"row {i}".encode(), 1.0 if i == 0 else None) for i in range(6)])
    before = _foreign_rows(path)
    outcome = run_target(f"sqlite://{path}?max_entries=100&cull_frequency={cull_frequency}", SMALL)
    assert outcome.status == "ok", outcome.reason
    assert _foreign_rows(path) == before  # 6 of 6, the expired one included


def test_concurrent_runs_on_one_sqlite_table_do_not_cull_each_other(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/shared.db?max_entries=100"
    a, b = _open(url, "cm:aaaaaaaa:"), _open(url, "cm:bbbbbbbb:")
    try:
        for i in range(100):
            a.set(f"cm:aaaaaaaa:{i}", b"a")
        for i in range(150):  # b overflows its own limit: it culls, but only its own rows
            b.set(f"cm:bbbbbbbb:{i}", b"b")
        assert sum(a.get(f"cm:aaaaaaaa:{i}") == b"a" for i in range(100)) == 100
        with contextlib.closing(sqlite3.connect(tmp_path / "shared.db")) as conn:
            (mine,) = conn.execute("SELECT COUNT(*) FROM cachemark_cache WHERE key LIKE 'cm:bbbbbbbb:%'").fetchone()
        assert 0 < mine <= 100
    finally:
        a.close()
        b.close()


def test_sqlite_keeps_a_foreign_databases_journal_mode(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE app_data (id INTEGER)")
        conn.execute("INSERT INTO app_data VALUES (1)")
    outcome = run_target(f"sqlite://{path}", SMALL)
    assert outcome.status == "ok", outcome.reason
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # not switched to WAL
        assert conn.execute("SELECT * FROM app_data").fetchall() == [(1,)]


# --- Django: its own cull cannot be limited to a namespace --------------------------------


def test_django_filebased_cull_leaves_another_apps_files(tmp_path: Path) -> None:
    shared = tmp_path / "django-cache"
    shared.mkdir()
    for i in range(3):
        (shared / f"{uuid.uuid4().hex}.djcache").write_bytes(f"another app's entry {i}".encode())
    before = _listing(shared)
    url = django_url({"BACKEND": "filebased", "LOCATION": str(shared), "MAX_ENTRIES": 50, "CULL_FREQUENCY": 0})
    outcome = run_target(url, SMALL)
    assert outcome.status == "ok", outcome.reason
    assert _listing(shared) == before  # 3 of 3 files, and nothing of the run left


def test_django_diskcache_options_leave_the_users_cache_alone(tmp_path: Path) -> None:
    users = tmp_path / "users-cache"
    _users_diskcache(users, shards=8)  # another Django app's DjangoCache (8 shards by default)
    before = _diskcache_state(users)
    url = django_url({"BACKEND": "diskcache", "LOCATION": str(users), "OPTIONS": {"size_limit": 50000}})
    outcome = run_target(url, SMALL)
    assert outcome.status == "ok", outcome.reason
    assert _diskcache_state(users) == before


_DJANGO_ROWS = [(f":1:app:{i}", f"value {i}", "2099-01-01 00:00:00") for i in range(6)]


@pytest.fixture(params=["sqlite", "postgresql"])
def django_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, Any]]:
    """(DATABASE= URL, kind, execute(sql, fetch)) for a database another app also uses."""
    if request.param == "sqlite":
        path = tmp_path / "app.db"

        def execute(sql: str, fetch: bool = False) -> list[tuple]:
            with contextlib.closing(sqlite3.connect(path)) as conn, conn:
                rows = conn.execute(sql).fetchall()
            return rows if fetch else []

        yield f"sqlite://{path}", "sqlite", execute
        return
    import psycopg

    server = request.getfixturevalue("postgres_server")
    target = parse_target(server.url())
    dbname = f"fd_{uuid.uuid4().hex[:8]}"
    admin = {"host": target.host, "port": target.port(5432), "user": target.username or None, "autocommit": True}
    with psycopg.connect(dbname="postgres", **admin) as conn:
        conn.execute(f"CREATE DATABASE {dbname}")

    def execute_pg(sql: str, fetch: bool = False) -> list[tuple]:
        with psycopg.connect(dbname=dbname, **admin) as conn:
            cur = conn.execute(sql)
            return [tuple(str(v) for v in row) for row in cur.fetchall()] if fetch else []

    user = f"{target.username}@" if target.username else ""
    yield f"postgresql://{user}{target.host}:{target.port(5432)}/{dbname}", "postgresql", execute_pg
    with psycopg.connect(dbname="postgres", **admin) as conn:
        conn.execute(f"DROP DATABASE {dbname} WITH (FORCE)")


def _make_django_table(kind: str, execute: Any, table: str) -> list[tuple]:
    """Another app's Django cache table, laid out as ``createcachetable`` makes it, with 6 rows."""
    expires = "datetime" if kind == "sqlite" else "timestamp with time zone"
    execute(f"CREATE TABLE {table} (cache_key varchar(255) NOT NULL PRIMARY KEY, value text NOT NULL, "
            f"expires {expires} NOT NULL)")
    for key, value, expires in _DJANGO_ROWS:
        execute(f"INSERT INTO {table} VALUES ('{key}', '{value}', '{expires}')")
    return execute(f"SELECT cache_key, value FROM {table} ORDER BY cache_key", True)


def _tables(kind: str, execute: Any) -> set[str]:
    if kind == "sqlite":
        return {r[0] for r in execute("SELECT name FROM sqlite_master WHERE type = 'table'", True)}
    return {r[0] for r in execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'", True)}


def test_django_db_cull_refuses_a_table_with_foreign_rows(django_db) -> None:
    database, kind, execute = django_db
    before = _make_django_table(kind, execute, "app_cache")
    url = django_url({"BACKEND": "db", "DATABASE": database, "LOCATION": "app_cache",
                      "MAX_ENTRIES": 50, "CULL_FREQUENCY": 0})
    with pytest.raises(UserError) as info:
        run_target(url, SMALL)
    message = str(info.value)
    assert "\n" not in message and "app_cache" in message and "6 rows" in message
    assert execute("SELECT cache_key, value FROM app_cache ORDER BY cache_key", True) == before


def test_django_db_default_table_is_the_runs_own(django_db) -> None:
    database, kind, execute = django_db
    # Another run (or app) already uses the table name cachemark used to share.
    before = _make_django_table(kind, execute, "cachemark_django_cache")
    tables = _tables(kind, execute)
    url = django_url({"BACKEND": "db", "DATABASE": database, "MAX_ENTRIES": 50, "CULL_FREQUENCY": 0})
    outcome = run_target(url, SMALL)
    assert outcome.status == "ok", outcome.reason
    assert execute("SELECT cache_key, value FROM cachemark_django_cache ORDER BY cache_key", True) == before
    assert _tables(kind, execute) == tables  # the run's own table was dropped again


def test_django_db_refusal_is_one_line_and_exit_2(tmp_path: Path, cachemark) -> None:
    path = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE app_cache (cache_key varchar(255) NOT NULL PRIMARY KEY, value text NOT NULL, "
                     "expires datetime NOT NULL)")
        conn.executemany("INSERT INTO app_cache VALUES (?, ?, ?)", _DJANGO_ROWS)
    url = django_url({"BACKEND": "db", "DATABASE": f"sqlite://{path}", "LOCATION": "app_cache",
                      "CULL_FREQUENCY": 0})
    proc = cachemark("run", "-t", url, "--keys", "50", "--ops", "200", "--warmup", "0", "--workers", "1",
                     "--no-calibrate", "--out", str(tmp_path / "r.json"), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if "error" in line or "Traceback" in line]
    assert len(lines) == 1 and "6 rows" in lines[0] and "app_cache" in lines[0], proc.stderr[-2000:]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM app_cache").fetchone() == (6,)


# --- memcached: it cannot list keys, so cleanup must know every key and say what it missed -----


def _memcached_keys(port: int, prefix: str) -> list[str]:
    """The keys under ``prefix`` as the server itself lists them (lru_crawler metadump)."""
    from urllib.parse import unquote

    # memcached answers "BUSY currently processing crawler request" (and nothing more) while its LRU crawler
    # is at work, which it does by itself on a server holding items with TTLs (the worker's shared one holds
    # other tests'): ask again, rather than wait for an END that never comes
    deadline = time.monotonic() + 10
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        while True:
            sock.sendall(b"lru_crawler metadump all\r\n")
            data = b""
            while not data.endswith((b"END\r\n", b"BUSY currently processing crawler request\r\n")):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            if not data.startswith(b"BUSY"):
                break
            assert time.monotonic() < deadline, "memcached's LRU crawler stayed busy for 10 s: no key listing"
            time.sleep(0.05)
    keys = [unquote(line.split()[0][4:].decode()) for line in data.split(b"\n") if line.startswith(b"key=")]
    return [k for k in keys if k.startswith(prefix)]


def test_versioned_tags_leave_no_key_on_memcached(memcached_server) -> None:
    workload = SMALL.model_copy(update={"mix": {"get": 70, "set": 25, "clean": 5},
                                        "tags": TagSpec(pool=20, max_per_key=3)})
    outcome = run_target(memcached_server.url() + "?tags=versioned", workload)
    assert outcome.status == "ok", outcome.reason
    namespace = outcome.backend.namespace
    assert _memcached_keys(memcached_server.port, namespace) == []


@pytest.fixture
def restartable_memcached(spawn) -> LocalServer:
    """A private memcached that a test can kill, and start again on its port (a restart mid-run)."""
    return spawn("memcached")


@pytest.mark.parametrize("client", ["pymemcache", "pylibmc"])
def test_memcached_cleanup_survives_a_server_restart(restartable_memcached: LocalServer, client: str) -> None:
    server, ns = restartable_memcached, "cm:ab12cd34:"
    url = f"memcached://127.0.0.1:{server.port}?client={client}"
    cleaner = _open(url, ns)  # the runner's preflight connection, idle during the run
    writer = _open(url, ns)
    for i in range(1000):
        writer.set(f"{ns}{i}", b"x")
    writer.close()
    server.restart()
    writer = _open(url, ns)
    for i in range(900):  # written after the restart: the ones cleanup must still remove
        writer.set(f"{ns}{i}", b"y")
    writer.close()
    assert len(_memcached_keys(server.port, ns)) == 900
    cleaner.clear_namespace(f"{ns}{i}" for i in range(1000))
    cleaner.close()
    assert _memcached_keys(server.port, ns) == []


@pytest.mark.parametrize("client", ["pymemcache", "pylibmc"])
def test_memcached_cleanup_failure_says_what_remains(restartable_memcached: LocalServer, client: str) -> None:
    server, ns = restartable_memcached, "cm:ab12cd34:"
    cleaner = _open(f"memcached://127.0.0.1:{server.port}?client={client}&connect_timeout=1&timeout=1", ns)
    server.kill()
    with pytest.raises(CleanupFailed) as info:
        cleaner.clear_namespace(f"{ns}{i}" for i in range(900))
    cleaner.close()
    message = str(info.value)
    assert message.startswith("cleanup failed: memcached at 127.0.0.1:")
    assert "900 keys of namespace cm:ab12cd34: may remain" in message and "\n" not in message


def test_runner_reports_the_cleanup_failure_line(restartable_memcached: LocalServer,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The run itself ends before the server dies; the line is what the user then reads."""
    from cachemark.run import sequence as runner  # where the run opens its preflight backend

    server = restartable_memcached
    real = runner.create_backend

    def preflight_then_kill(target, namespace):  # the server dies after the workers are done
        backend = real(target, namespace)
        clear = backend.clear_namespace

        def clear_after_kill(keys=()):
            server.kill()
            return clear(keys)

        backend.clear_namespace = clear_after_kill  # type: ignore[method-assign]
        return backend

    monkeypatch.setattr(runner, "create_backend", preflight_then_kill)
    outcome = run_target(f"memcached://127.0.0.1:{server.port}?connect_timeout=1&timeout=1", SMALL)
    error = outcome.backend.cleanup_error
    assert error.startswith("cleanup failed: memcached at 127.0.0.1:"), error
    assert f"keys of namespace {outcome.backend.namespace} may remain" in error


# --- item 11: the real error surfaces, bad paths are one line -----------------------------


@pytest.mark.parametrize("query", ["", "?max_entries=100000"])
def test_sqlite_disk_full_surfaces_instead_of_the_rollback_error(tiny_disk: Path, query: str) -> None:
    backend = _open(f"sqlite://{tiny_disk}/c.db{query}", "cm:full:")
    try:
        with pytest.raises(sqlite3.OperationalError) as info:
            for i in range(1000):
                backend.set_many({f"cm:full:{i}:{j}": os.urandom(2000) for j in range(2)})
        assert "disk is full" in str(info.value), str(info.value)
        with pytest.raises(sqlite3.OperationalError) as info:
            for i in range(1000):
                backend.set(f"cm:full:{i}", os.urandom(2000))
        assert "disk is full" in str(info.value), str(info.value)
    finally:
        backend.close()


def test_file_disk_full_raises_enospc_and_keeps_no_partial_file(tiny_disk: Path) -> None:
    import errno

    backend = _open(f"file://{tiny_disk}", "cm:full:")
    try:
        with pytest.raises(OSError) as info:
            for i in range(1000):
                backend.set(f"cm:full:{i}", os.urandom(3000))
        assert info.value.errno == errno.ENOSPC
        leftovers = [p.name for p in tiny_disk.rglob("*.tmp")]
        assert leftovers == []  # the half-written temp file went with the error
        backend.clear_namespace()
    finally:
        backend.close()
    assert os.listdir(tiny_disk) == []


@pytest.mark.parametrize("scheme", ["file", "sqlite", "diskcache"])
@pytest.mark.parametrize("path", ["/tmp/a%00b", "/tmp/" + "x" * 5000, "/tmp/" + "x" * 300 + "/c",
                                  "/tmp/" + "x/" * 3000], ids=["nul", "5000-byte name", "300-byte name", "6005 bytes"])
def test_nul_bytes_and_absurd_lengths_in_paths_are_one_line(scheme: str, path: str) -> None:
    with pytest.raises(SpecError) as info:
        target = parse_target(f"{scheme}://{path}")
        create_backend(target, "cm:x:")
    message = str(info.value)
    assert "\n" not in message and "\x00" not in message
    assert len(message) < 400, message
