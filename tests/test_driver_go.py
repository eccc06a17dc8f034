"""The Go driver (drivers/go, docs/drivers.md): what is Go's own. Everything every driver must do —
hits and misses, verification, dropped and refused writes, a dying server, Ctrl-C, open loop,
passwords, the protocol — is in tests/test_driver_conformance.py, which runs go-redis and go-memcache."""

from __future__ import annotations

import pytest

from driver_kit import handshake, with_client  # noqa: E402


@pytest.mark.parametrize(("name", "kind", "client", "library"), [
    ("go-redis", "redis", "redis.Client", "go-redis"), ("go-memcache", "memcached", "memcache.Client", "gomemcache")])
def test_the_clients_are_go_redis_and_gomemcache(name, kind, client, library, request):
    hello, ready = handshake(name, with_client(request.getfixturevalue(f"{kind}_server").url(), name))
    assert hello["runtime"].startswith("go ") and (ready["client"], ready["client_library"]) == (client, library)
    assert ready["client_version"] == hello["libraries"][library]
