"""Django caches configured standalone, on real servers; and Django vs direct adapters."""

from __future__ import annotations

import os
import random
from collections import Counter

import pytest

from cachemark.backends import create_backend
from cachemark.backends.django import DjangoBackend, django_url
from cachemark.errors import BackendUnavailable
from cachemark.lab.base import free_port
from cachemark.target import parse_target


def _open(url: str, namespace: str):
    backend = create_backend(parse_target(url), namespace)
    backend.open()
    return backend


def _addr(server) -> str:
    return f"127.0.0.1:{server.port}"


def _server(req: pytest.FixtureRequest, name: str) -> str:
    return req.getfixturevalue(name).url()


def _mc(req: pytest.FixtureRequest) -> str:
    return _addr(req.getfixturevalue("memcached_server"))


CONFIGS = {
    "locmem": lambda req, tmp: {"BACKEND": "locmem", "LOCATION": "t"},
    "filebased": lambda req, tmp: {"BACKEND": "filebased", "LOCATION": str(tmp / "fb")},
    "db-sqlite": lambda req, tmp: {"BACKEND": "db", "DATABASE": f"sqlite:///{tmp}/django.db"},
    "db-postgresql": lambda req, tmp: {"BACKEND": "db", "DATABASE": _server(req, "postgres_server")},
    "db-mysql": lambda req, tmp: {"BACKEND": "db", "DATABASE": _server(req, "mysql_server")},
    "pymemcache": lambda req, tmp: {"BACKEND": "pymemcache", "LOCATION": _mc(req)},
    "pylibmc": lambda req, tmp: {"BACKEND": "pylibmc", "LOCATION": _mc(req)},
    "redis": lambda req, tmp: {"BACKEND": "redis", "LOCATION": _server(req, "redis_server")},
    "django_redis": lambda req, tmp: {"BACKEND": "django_redis", "LOCATION": _server(req, "redis_server")},
    "diskcache": lambda req, tmp: {"BACKEND": "diskcache", "LOCATION": str(tmp / "dc"), "SHARDS": 4},
}
CLIENTS = {"locmem": "django", "filebased": "django", "db-sqlite": "sqlite3", "db-postgresql": "psycopg",
           "db-mysql": "pymysql", "pymemcache": "pymemcache", "pylibmc": "pylibmc", "redis": "redis-py",
           "django_redis": "django-redis", "diskcache": "diskcache"}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_django_cache(name: str, request: pytest.FixtureRequest, tmp_path, namespace: str) -> None:
    config = CONFIGS[name](request, tmp_path)
    b = _open(django_url(config), namespace)
    try:
        k = namespace + "k"
        assert b.get(k) is None and not b.exists(k)
        b.set(k, b"\x00value")
        assert b.get(k) == b"\x00value" and b.exists(k)
        b.set_many({namespace + str(i): str(i).encode() for i in range(3)})
        assert b.get_many([namespace + str(i) for i in range(4)]) == {
            namespace + str(i): str(i).encode() for i in range(3)
        }
        assert b.incr(namespace + "n", 3) == 3 and b.incr(namespace + "n") == 4
        assert b.delete(k) and b.get(k) is None
        info = b.info()
        assert info["framework"] == "django" and info["django_version"].startswith("5.2")
        assert info["client"] == CLIENTS[name], info
        if name.startswith(("db-p", "db-m", "redis", "django_redis", "pymemcache", "pylibmc")):
            assert info.get("server_version"), info
    finally:
        b.clear_namespace([k, namespace + "n", *(namespace + str(i) for i in range(3))])
        assert b.get(namespace + "1") is None
        b.close()


def test_max_entries_and_cull_frequency_reach_django(namespace: str) -> None:
    b = _open(django_url({"BACKEND": "locmem", "LOCATION": "cull", "MAX_ENTRIES": 10, "CULL_FREQUENCY": 2}),
              namespace)
    try:
        assert b.cache._max_entries == 10 and b.cache._cull_frequency == 2
        for i in range(50):
            b.set(f"{namespace}{i}", b"x")
        assert len(b.cache._cache) <= 10
    finally:
        b.close()


def test_default_filebased_dir_is_shared_and_removed(namespace: str) -> None:
    url = django_url({"BACKEND": "filebased", "MAX_ENTRIES": 50})
    a, b = _open(url, namespace), _open(url, namespace)
    try:
        assert a.location == b.location  # every worker of a run finds the same directory
        a.set(namespace + "k", b"v")
        assert b.get(namespace + "k") == b"v"
    finally:
        a.clear_namespace([namespace + "k"])
        a.close()
        b.close()
    assert not os.path.exists(a.location)


def test_url_forms() -> None:
    # The literal form from the docs, with an unescaped URL inside the query.
    url = "django://?BACKEND=redis&LOCATION=redis://127.0.0.1:1/0&OPTIONS.db=0"
    b = DjangoBackend(parse_target(url), "n:")
    assert b.backend_path.endswith("redis.RedisCache") and b.location == "redis://127.0.0.1:1/0"
    assert b.params["OPTIONS"] == {"db": 0}
    url = django_url({"BACKEND": "locmem", "TIMEOUT": 60, "OPTIONS": {"MAX_ENTRIES": 5}})
    b = DjangoBackend(parse_target(url), "n:")
    assert b.params["TIMEOUT"] == 60 and b.params["OPTIONS"] == {"MAX_ENTRIES": 5}
    assert not DjangoBackend.capabilities(parse_target(url)).shared


def test_server_down_is_one_line(namespace: str) -> None:
    with pytest.raises(BackendUnavailable) as err:
        _open(django_url({"BACKEND": "redis", "LOCATION": f"redis://:s3cret@127.0.0.1:{free_port()}/0"}),
              namespace)
    assert "\n" not in str(err.value) and "s3cret" not in str(err.value)


def _replay(backend, namespace: str, seed: int, ops: int = 3000, keys: int = 300) -> Counter:
    """A seeded get/set/delete sequence; returns hit/miss/op counts."""
    rng = random.Random(seed)
    counts: Counter = Counter()
    for _ in range(ops):
        key = f"{namespace}{rng.randrange(keys)}"
        roll = rng.random()
        if roll < 0.6:
            counts["hit" if backend.get(key) is not None else "miss"] += 1
        elif roll < 0.9:
            backend.set(key, str(rng.randrange(10**6)).encode() * rng.randint(1, 20))
            counts["set"] += 1
        else:
            backend.delete(key)
            counts["delete"] += 1
    return counts


@pytest.mark.parametrize("pair", ["redis", "memcached", "postgresql"])
def test_django_and_direct_adapters_agree(pair: str, request: pytest.FixtureRequest, namespace: str) -> None:
    if pair == "redis":
        direct = request.getfixturevalue("redis_server").url()
        via = django_url({"BACKEND": "redis", "LOCATION": direct})
    elif pair == "memcached":
        server = request.getfixturevalue("memcached_server")
        direct, via = server.url(), django_url({"BACKEND": "pymemcache", "LOCATION": _addr(server)})
    else:
        direct = request.getfixturevalue("postgres_server").url()
        via = django_url({"BACKEND": "db", "DATABASE": direct, "LOCATION": "cm_agree"})
    results = []
    for url, ns in ((direct, namespace + "d:"), (via, namespace + "j:")):
        b = _open(url, ns)
        try:
            results.append(_replay(b, ns, seed=1234))
            written = [f"{ns}{i}" for i in range(300)]
        finally:
            b.clear_namespace(written)
            b.close()
    assert results[0] == results[1]
    assert results[0]["hit"] > 100 and results[0]["miss"] > 100
