"""The scheme registry: one row per scheme, consulted by every room, so the rooms agree."""

from __future__ import annotations

import contextlib

import pymemcache.client.base
import pytest

from cachemark.backends import backend_class, schemes
from cachemark.backends.redis import RedisBackend
from cachemark.engine import target_config
from cachemark.errors import SpecError
from cachemark.run.provide import provide
from cachemark.schemes import lab_kinds, network_schemes, scheme
from cachemark.target import check_params, parse_target


def test_every_scheme_has_an_adapter_and_every_lab_kind_serves_a_known_scheme() -> None:
    for name in schemes():
        assert scheme(name).adapter.startswith("cachemark.backends.")
    from cachemark.schemes import lab_kind

    for kind in lab_kinds():
        assert lab_kind(kind).serves in schemes()


@pytest.mark.parametrize(("url", "allowed"), [
    ("redis://127.0.0.1:6379?socket_timout=1", "socket_timeout"),
    ("sqlite:///tmp/c.db?max_entry=10", "max_entries"),
    ("memory://?size=1", "max_entries"),
    ("twolevel://?fast=memory://&slow=redis://127.0.0.1?bogus=1", "socket_timeout"),  # nested targets too
])
def test_an_unknown_parameter_is_refused_with_the_allowed_list(url: str, allowed: str) -> None:
    with pytest.raises(SpecError) as info:
        check_params(parse_target(url))
    assert "unknown parameter" in str(info.value) and allowed in str(info.value)


def test_known_parameters_and_django_settings_pass() -> None:
    for url in ("redis://h:1/0?client=engine&threads=2&connections=8&pipeline=4&protocol=resp3&tags=versioned",
                "django://?BACKEND=django.core.cache.backends.locmem.LocMemCache&TIMEOUT=60&OPTIONS.MAX_ENTRIES=5",
                "spawn:memcached?threads=2&memory_mb=64&client=pylibmc", "spawn:redis?password=x&hiredis=false"):
        check_params(parse_target(url))


def test_an_unknown_scheme_fails_before_any_run(tmp_path, cachemark) -> None:
    result = cachemark("run", "-t", "memory://", "-t", "redys://127.0.0.1", "--duration", "0.2s", "--warmup", "0",
                       "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown backend scheme 'redys'" in result.stderr and "valkey" in result.stderr
    assert not (tmp_path / "out.json").exists()  # refused while planning: memory:// never ran


def test_valkey_is_one_scheme_everywhere() -> None:
    target = parse_target("valkey://127.0.0.1:6390/0")
    assert backend_class(target) is RedisBackend
    assert target_config(target)["servers"] == ["127.0.0.1:6390"]
    assert "valkey" in network_schemes()


def test_rediss_without_a_port_has_one_default_port() -> None:
    """The client (redis-py) connects to 6379 for rediss:// too; so must a network proxy."""
    target = parse_target("rediss://cache.example")
    assert RedisBackend(target, "cm:x:")._kwargs["port"] == scheme("rediss").default_port == 6379


def test_spawn_parameters_reach_the_server_and_the_client() -> None:
    # threads is memcached's -t: it used to be stripped as if it were the engine's
    with provide(parse_target("spawn:memcached?threads=3&client=pylibmc")) as (reachable, servers):
        assert reachable.param("client") == "pylibmc" and reachable.param("threads") is None
        host, port = reachable.hosts[0]
        client = pymemcache.client.base.Client((host, port))
        with contextlib.closing(client):
            assert int(client.stats(b"settings")[b"num_threads"]) == 3


def test_a_spawn_parameter_neither_side_takes_is_refused() -> None:
    with pytest.raises(SpecError) as info:
        check_params(parse_target("spawn:s3?key_nameing=sha1"))
    assert "spawn:s3: unknown parameter 'key_nameing'" in str(info.value) and "key_naming" in str(info.value)


def test_spawn_s3_client_parameters_are_not_dropped() -> None:
    from cachemark.schemes import split_spawn_params

    server, client = split_spawn_params(parse_target("spawn:s3?key_naming=sha1"))
    assert server == {} and client == {"key_naming": "sha1"}


def test_the_fingerprint_records_every_schemes_client_library() -> None:
    from cachemark.measure.fingerprint import package_versions
    from cachemark.schemes import _SCHEMES, client_packages

    packages = client_packages()
    for s in _SCHEMES.values():
        if s.package:
            assert s.package.split("[")[0] in packages, s.name
    versions = package_versions()
    assert {"redis", "pymemcache", "boto3", "django"} <= set(versions)  # installed by the test extras


@pytest.mark.parametrize("host", ["a" * 100_000, "a" * 64 + ".example", "a..b", "." * 300])
def test_a_host_no_resolver_takes_is_one_line_when_the_url_is_parsed(host: str) -> None:
    """Python's idna codec raised from inside the client library (a crash, exit 70) on every command."""
    for url in (f"redis://{host}:6379/0", f"memcached://127.0.0.1:11211,{host}:11212"):
        with pytest.raises(SpecError, match="is not a host name") as caught:
            parse_target(url)
        assert len(str(caught.value)) < 400


def test_host_names_resolvers_take_still_parse() -> None:
    for host in ("localhost", "cache-1.internal.example.com.", "b\u00fccher.example", "a" * 63 + ".b"):
        assert parse_target(f"redis://{host}:6379/0").host == host
