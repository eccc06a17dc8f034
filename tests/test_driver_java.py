"""The Java driver (drivers/java, docs/drivers.md): what is Java's own. Everything every driver must
do — hits and misses (after a JIT warm-up batch), verification, dropped and refused writes, a dying
server, Ctrl-C, open loop, passwords, the protocol — is in tests/test_driver_conformance.py, which runs
java-jedis, java-lettuce and java-spymemcached."""

from __future__ import annotations

import pytest

from driver_kit import handshake, with_client  # noqa: E402


@pytest.mark.parametrize(("name", "kind", "client"), [
    ("java-jedis", "redis", "redis.clients.jedis.Jedis"), ("java-lettuce", "redis", "io.lettuce.core.RedisClient"),
    ("java-spymemcached", "memcached", "net.spy.memcached.MemcachedClient")])
def test_the_clients_are_jedis_lettuce_and_spymemcached(name, kind, client, request):
    hello, ready = handshake(name, with_client(request.getfixturevalue(f"{kind}_server").url(), name))
    library = name.removeprefix("java-")
    assert hello["runtime"].startswith("java ") and (ready["client"], ready["client_library"]) == (client, library)
    assert ready["client_version"] == hello["libraries"][library]
