"""S3 adapter against moto's standalone server (a real HTTP server started by the lab)."""

from __future__ import annotations

import time

import pytest

from cachemark.backends import create_backend
from cachemark.errors import BackendUnavailable
from cachemark.lab.base import free_port
from cachemark.target import parse_target


def _url(server, path: str = "", **params: object) -> str:
    base = server.url()  # s3://cachemark/?endpoint_url=...
    bucket_end = base.index("/?")
    url = base[:bucket_end] + (path or "/") + base[bucket_end + 1:]
    return url + "".join(f"&{k}={v}" for k, v in params.items())


def _open(url: str, namespace: str):
    backend = create_backend(parse_target(url), namespace)
    backend.open()
    return backend


@pytest.mark.parametrize("key_naming", ["raw", "sha1"])
@pytest.mark.parametrize("encoding", ["raw", "pickle"])
def test_operations(s3_server, namespace: str, key_naming: str, encoding: str) -> None:
    b = _open(_url(s3_server, "/pre", key_naming=key_naming, encoding=encoding), namespace)
    try:
        k = namespace + "k"
        assert b.get(k) is None and not b.exists(k)
        b.set(k, b"\x00\x01value")
        assert b.get(k) == b"\x00\x01value" and b.exists(k)
        b.set_many({namespace + str(i): str(i).encode() for i in range(3)})
        assert b.get_many([namespace + str(i) for i in range(4)]) == {
            namespace + str(i): str(i).encode() for i in range(3)
        }
        assert b.incr(namespace + "n", 2) == 2 and b.incr(namespace + "n") == 3
        # a 1-s TTL (it was 0.3 s): the write and the read back are two requests to moto, a Python server,
        # which a loaded 2-core host can stall for some 100 ms each. The wait is a floor, from after the write
        b.set(namespace + "t", b"x", ttl=1.0)
        expires_by = time.time() + 1.0  # the adapter set its expiry before this, on this clock
        assert b.get(namespace + "t") == b"x"
        time.sleep(max(0.0, expires_by + 0.1 - time.time()))
        assert b.get(namespace + "t") is None and not b.exists(namespace + "t")
        assert b.delete(k) and b.get(k) is None
        names = b._list()
        assert names and all(n.startswith("pre/" + namespace) for n in names)
        if key_naming == "sha1":
            assert all(n.endswith(".djcache") for n in names)
        info = b.info()
        assert info["client"] == "boto3" and info["emulator"] == "moto"
    finally:
        b.clear_namespace()
        b.close()


def test_clear_namespace_touches_only_its_namespace(s3_server, namespace: str) -> None:
    other_ns = namespace.replace("cmt:", "cmo:")
    mine, other = _open(_url(s3_server), namespace), _open(_url(s3_server), other_ns)
    try:
        mine.set_many({namespace + str(i): b"m" for i in range(12)})
        other.set_many({other_ns + str(i): b"o" for i in range(5)})
        assert mine.clear_namespace() == 12
        assert mine._list() == []
        assert len(other.get_many([other_ns + str(i) for i in range(5)])) == 5
    finally:
        other.clear_namespace()
        mine.close()
        other.close()


def test_cull_by_list(s3_server, namespace: str) -> None:
    b = _open(_url(s3_server, max_entries=10, cull_frequency=2), namespace)
    try:
        for i in range(25):
            b.set(f"{namespace}{i}", b"x")
            # The cull runs before each write once the namespace holds max_entries objects.
            assert len(b._list()) <= 10
        assert b.get(f"{namespace}24") == b"x"
    finally:
        b.clear_namespace()
        b.close()


def test_missing_bucket_is_one_line(s3_server, namespace: str) -> None:
    url = s3_server.url().replace("s3://cachemark/", "s3://no-such-bucket/")
    with pytest.raises(BackendUnavailable, match="does not exist") as err:
        create_backend(parse_target(url), namespace).open()
    assert "\n" not in str(err.value) and "aws_secret_access_key=cachemark" not in str(err.value)


def test_server_down_is_one_line(namespace: str) -> None:
    url = (f"s3://b/?endpoint_url=http://127.0.0.1:{free_port()}&region=us-east-1"
           "&aws_access_key_id=a&aws_secret_access_key=s3cret&connect_timeout=1")
    with pytest.raises(BackendUnavailable) as err:
        create_backend(parse_target(url), namespace).open()
    assert "\n" not in str(err.value) and "s3cret" not in str(err.value)


def test_url_without_prefix_keeps_the_endpoint(s3_server, namespace: str) -> None:
    # The documented form: no "/" before the query, an endpoint URL full of slashes inside it.
    url = s3_server.url().replace("s3://cachemark/?", "s3://cachemark?")
    b = _open(url, namespace)
    try:
        assert b.bucket == "cachemark" and b.prefix == "" and b.endpoint_url.startswith("http://127.0.0.1:")
        b.set(namespace + "x", b"1")
        assert b.get(namespace + "x") == b"1"
    finally:
        b.clear_namespace()
        b.close()


def test_spawned_server_is_marked_emulator(s3_server) -> None:
    described = s3_server.describe()
    assert described["emulator"] is True and "AWS" in described["note"]
    assert "emulator=moto" in s3_server.url()
