"""Two-level caches (Zend TwoLevels semantics): memcached + file, memcached + redis, real servers."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from tests.test_tags import run_clean_check

from cachemark.backends import create_backend
from cachemark.errors import SpecError
from cachemark.target import parse_target


def _url(fast: str, slow: str, **params: object) -> str:
    extra = "".join(f"&{k}={v}" for k, v in params.items())
    return f"twolevel://?fast={quote(fast, safe='')}&slow={quote(slow, safe='')}{extra}"


@pytest.fixture(params=["memcached+file", "memcached+redis"])
def twolevel_url(request: pytest.FixtureRequest, tmp_path) -> str:
    fast = request.getfixturevalue("memcached_server").url()
    if request.param == "memcached+file":
        return _url(fast, f"file://{tmp_path}/slow")  # scan tags by default for file://
    return _url(fast, request.getfixturevalue("redis_server").url())  # native tags for redis://


def _open(url: str, namespace: str):
    backend = create_backend(parse_target(url), namespace)
    backend.open()
    return backend


def test_clean_with_concurrent_writers(twolevel_url: str, namespace: str) -> None:
    counts = run_clean_check(twolevel_url, namespace, keys=300, per_writer=100)
    assert counts["seeded_gone"] > 0


def test_zend_semantics(twolevel_url: str, namespace: str) -> None:
    b = _open(twolevel_url, namespace)
    try:
        mode = "scan" if "file" in b.slow.target.scheme else "native"
        assert b.capabilities(b.target).tags == mode and b.info()["tags"] == mode
        k = namespace + "k"
        b.set_tagged(k, b"value", ["page"], ttl=300)
        # Written to both levels, in the same envelope.
        assert b.fast.get(k) is not None and b.slow.get(k) == b.fast.get(k)
        assert b.get(k) == b"value"
        # A fast miss falls back to slow and refills fast.
        b.fast.delete(k)
        assert b.get(k) == b"value" and b.fast.get(k) is not None
        # Zend's fast lifetime: lifetime / (11 - priority), priority 8 by default.
        assert b._fast_ttl(300, 8) == 100 and b._fast_ttl(None, 8) == 2592000 / 3
        # Clean goes through the slow level's tag index and invalidates the fast copies too.
        b.set(namespace + "plain", b"p")
        assert b.clean_tags(["page"]) == 1
        assert b.fast.get(k) is None and b.slow.get(k) is None and b.get(k) is None
        assert b.get_many([k, namespace + "plain"]) == {namespace + "plain": b"p"}
        assert b.exists(namespace + "plain") and b.delete(namespace + "plain")
        assert not b.exists(namespace + "plain")
    finally:
        b.clear_namespace([namespace + "k", namespace + "plain"])
        b.close()


def test_levels_are_checked(tmp_path) -> None:
    with pytest.raises(SpecError, match="fast=<url> and slow=<url>"):
        create_backend(parse_target("twolevel://?fast=memory%3A%2F%2F"), "n:")
    with pytest.raises(SpecError, match="versioned"):
        create_backend(parse_target(_url("memory://", "redis://127.0.0.1:1/0?tags=versioned")), "n:")
    with pytest.raises(SpecError, match="no tags"):
        create_backend(parse_target(_url("memory://", "memcached://127.0.0.1:1")), "n:")
    with pytest.raises(SpecError, match="fast level holds no tags"):
        create_backend(parse_target(_url(f"file://{tmp_path}?tags=scan", f"file://{tmp_path}")), "n:")
    # Unencoded nested URLs without their own query also work.
    b = create_backend(parse_target(f"twolevel://?fast=memcached://127.0.0.1:1&slow=file://{tmp_path}"), "n:")
    assert b.slow_mode == "scan"
