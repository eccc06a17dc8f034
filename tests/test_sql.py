"""SQL cache tables on real servers: PostgreSQL and MariaDB started by the lab."""

from __future__ import annotations

import time
import uuid

import pytest

from cachemark.backends import create_backend
from cachemark.errors import BackendUnavailable
from cachemark.lab.base import free_port
from cachemark.target import parse_target


@pytest.fixture(params=["postgresql", "mysql"])
def sql_url(request: pytest.FixtureRequest) -> str:
    server = request.getfixturevalue("postgres_server" if request.param == "postgresql" else "mysql_server")
    return server.url()


def _with(url: str, **params: object) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{url}{'&' if '?' in url else '?'}{query}" if query else url


def _open(url: str, namespace: str):
    backend = create_backend(parse_target(url), namespace)
    backend.open()
    return backend


def _count(backend) -> int:
    cur = backend._execute(
        f"SELECT COUNT(*) FROM {backend.table} WHERE cache_key >= %s AND cache_key < %s",
        (backend._lo, backend._hi),
    )
    return cur.fetchone()[0]


# get/set/delete/exists/many/incr/TTL and namespace-only cleanup: the shared suite in
# test_backends.py runs them against PostgreSQL and MariaDB; what is SQL's own is here.


def test_sql_specifics(sql_url: str, namespace: str) -> None:
    other_ns = f"cmt:{uuid.uuid4().hex[:10]}:"
    b, other = _open(sql_url, namespace), _open(sql_url, other_ns)
    try:
        b.set(namespace + "short", b"x", ttl=0.2)
        time.sleep(0.3)
        assert b.incr(namespace + "short", 5) == 5  # an expired counter restarts
        info = b.info()
        assert info["client"] and info["client_version"] and info["server_version"]
        other.set_many({other_ns + str(i): b"o" for i in range(7)})
        assert b.clear_namespace() == 1 and other.clear_namespace() == 7  # counted exactly
        assert b._table_exists()  # never dropped
    finally:
        b.close()
        other.close()


def test_culling_like_django(sql_url: str, namespace: str) -> None:
    b = _open(_with(sql_url, max_entries=20, cull_frequency=4), namespace)
    try:
        for i in range(100):
            b.set(f"{namespace}{i:03d}", b"x")
            # Django culls only when the count exceeds max_entries, before the write.
            assert _count(b) <= 21
        # Culling removes the lowest keys in key order, so the newest key always survives.
        assert b.get(f"{namespace}099") == b"x"
        assert b.get(f"{namespace}000") is None
    finally:
        b.clear_namespace()
        b.close()


def test_cull_frequency_zero_empties_the_namespace(sql_url: str, namespace: str) -> None:
    b = _open(_with(sql_url, max_entries=5, cull_frequency=0), namespace)
    try:
        for i in range(7):
            b.set(f"{namespace}{i}", b"x")
        assert _count(b) <= 6
    finally:
        b.clear_namespace()
        b.close()


@pytest.mark.parametrize("scheme", ["postgresql", "mysql"])
def test_server_down_is_one_line(scheme: str) -> None:
    b = create_backend(parse_target(f"{scheme}://u:secret@127.0.0.1:{free_port()}/db"), "cmt:x:")
    with pytest.raises(BackendUnavailable) as err:
        b.open()
    msg = str(err.value)
    assert "\n" not in msg and "secret" not in msg and "127.0.0.1" in msg


def test_missing_database_postgres(postgres_server) -> None:
    url = postgres_server.url().rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(BackendUnavailable, match="no_such_db") as err:
        create_backend(parse_target(url), "cmt:x:").open()
    assert "\n" not in str(err.value)


def test_bad_user_mysql(mysql_server) -> None:
    url = mysql_server.url().replace("root@", "intruder:wrong@")
    with pytest.raises(BackendUnavailable, match="Access denied") as err:
        create_backend(parse_target(url), "cmt:x:").open()
    assert "\n" not in str(err.value) and "wrong" not in str(err.value)


def test_constructor_does_not_connect() -> None:
    # A dead port: constructing must succeed; only open() may fail.
    create_backend(parse_target(f"postgresql://127.0.0.1:{free_port()}/x"), "cmt:x:")
    create_backend(parse_target(f"mysql://127.0.0.1:{free_port()}/x"), "cmt:x:")
