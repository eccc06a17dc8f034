"""TLS: ``rediss://`` and ``memcached://…?tls=1`` through the Python clients and the native
engine (rustls), against servers the lab spawns with ``tls=1`` (a throw-away CA and certificate
in their temp dirs).

Reads are verified (the engine checks every value it reads back against the contract), hits
are as the workload predicts, and a certificate the client cannot verify is one line, exit 2.
"""

from __future__ import annotations

import json
import threading
import time
from urllib.parse import quote

import pytest
import redis

from cachemark.engine import run_load, target_config
from cachemark.errors import BackendUnavailable, SpecError
from cachemark.lab.certs import make_certs
from io_backends import need_io

pytestmark = pytest.mark.timeout(300)

OPS = 1500


def _engine(url: str, **extra: object) -> dict:
    cfg = target_config(url)
    cfg.update(threads=2, connections=4, pipeline=8, ops=3000, duration_s=30, prefill=True, verify_fraction=1.0,
               keys={"count": 100, "prefix": "cmtls:"}, values={"sizes": [[100, 1], [150_000, 1]]},
               mix=[{"op": "get", "weight": 9}, {"op": "set", "weight": 1}])
    cfg.update(extra)
    return run_load(cfg)


def _one_line_exit_2(proc, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout[-1500:] + proc.stderr[-1500:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_verified_reads_through_the_python_client_and_the_engine(spawn, cachemark, tmp_path, kind):
    server = spawn(kind, tls="1")
    url = server.url()
    scheme = {"redis": "rediss", "memcached": "memcached"}[kind]
    assert url.startswith(f"{scheme}://127.0.0.1:") and "ssl_ca_certs=" in url
    out = tmp_path / "r.json"
    # memcached 1.6.18's TLS stalls on pipelined writes (a prefill's batches; docs/engine.md): it is
    # read without one, so every read misses
    prefill = kind == "redis"
    proc = cachemark("run", "--no-calibrate", "--mix", "get=100", "--keys", "200", "--ops", str(OPS), "--workers", "2",
                     "--warmup", "0", "--prefill" if prefill else "--no-prefill", "-o", str(out), "-t", url,
                     "-t", url + "&client=engine", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    runs = json.loads(out.read_text())["runs"]
    python = {"redis": "redis-py", "memcached": "pymemcache"}[kind]
    assert [r["backend"]["info"]["client"] for r in runs] == [python, "cachemark-engine"]
    for run in runs:
        assert run["status"] == "ok" and run["backend"]["info"]["tls"] is True
        assert run["backend"]["info"]["tls_verify"] is True
        phase = run["phases"][-1]
        get = phase["ops"]["get"]
        predicted = (OPS, OPS, 0) if prefill else (OPS, 0, OPS)
        assert (get["count"], get["hits"], get["misses"]) == predicted and not get.get("errors")
        # the server's counters, read over TLS too
        assert phase["server"]["source"] == kind and not phase["server"]["errors"]
        assert OPS <= phase["server"]["server_commands"] <= OPS + 2


@pytest.mark.parametrize("io", ["epoll", "uring"])
@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_engine_tls_pipelined_large_values(spawn, kind, io):
    """Both I/O backends: epoll seals and opens records on the socket, io_uring in the socket's buffers."""
    need_io(io)
    server = spawn(kind, tls="1")
    # memcached 1.6.18's TLS stalls on pipelined writes (a Python ssl client's too: docs/engine.md):
    # it is loaded one request at a time, without the prefill (16 in flight)
    pipelined = kind == "redis"
    for connections in (1, 4):
        result = _engine(server.url(), threads=1, connections=connections, timeout_ms=2000,
                         prefill=pipelined, pipeline=8 if pipelined else 1, io=io)
        get, set_ = result["ops"]["get"], result["ops"]["set"]
        assert get["count"] + set_["count"] == 3000
        # 150 kB values span many TLS records and reads; every one read back is checked, and
        # nothing timed out, in the timed phase or before it (the prefill)
        assert not get["errors"] and not set_["errors"] and result["errors_sample"] == []
        if pipelined:
            assert get["hits"] == get["count"]
        else:
            assert get["hits"] > 0 and get["hits"] + get["misses"] == get["count"]
        # the server's bytes are the plaintext the engine counted: records were sealed whole, not lost
        assert result["wire_bytes_out"] > 0 and result["wire_bytes_in"] > get["hits"] * 100


def test_client_certificates_and_no_verification(spawn, tmp_path):
    server = spawn("redis", tls="client")
    url = server.url()
    assert "ssl_certfile=" in url and "ssl_keyfile=" in url
    result = _engine(url)
    assert result["ops"]["get"]["hits"] == result["ops"]["get"]["count"] > 0
    without = url.split("&ssl_certfile=")[0]
    # TLS 1.3: the server's refusal arrives as an alert on the first read after the handshake
    with pytest.raises(BackendUnavailable, match="CertificateRequired"):
        _engine(without)
    # ssl_cert_reqs=none: no CA needed, the server's certificate is not checked
    plain = spawn("redis", tls="1")
    unverified = plain.url().split("?")[0] + "?ssl_cert_reqs=none"
    assert target_config(unverified)["tls"] == {"verify": False}
    result = _engine(unverified)
    assert result["ops"]["get"]["hits"] == result["ops"]["get"]["count"] > 0


def test_a_bad_ca_is_one_line_and_exit_2(spawn, cachemark, tmp_path):
    server = spawn("redis", tls="1")
    other = tmp_path / "other"
    other.mkdir()
    wrong_ca = make_certs(str(other)).ca
    bad = server.url().split("?")[0] + f"?ssl_ca_certs={quote(wrong_ca)}"
    with pytest.raises(BackendUnavailable, match="TLS handshake failed: .*certificate"):
        _engine(bad)
    for url in (bad, bad + "&client=engine"):
        proc = cachemark("run", "--no-calibrate", "--ops", "10", "-t", url, cwd=tmp_path, timeout=120)
        _one_line_exit_2(proc, "certificate")
    missing = server.url().split("?")[0] + "?ssl_ca_certs=/nonexistent/ca.pem&client=engine"
    with pytest.raises(SpecError, match="cannot read the CA file"):
        _engine(missing)
    proc = cachemark("run", "--no-calibrate", "--ops", "10", "-t", missing, cwd=tmp_path, timeout=120)
    _one_line_exit_2(proc)


def test_spawn_options_are_checked(tmp_path):
    from cachemark.lab import server_class

    with pytest.raises(SpecError, match="tls and unix"):
        server_class("redis")(tls="1", unix="1")
    with pytest.raises(SpecError, match="must be 1, 0 or client"):
        server_class("redis")(tls="maybe")
    assert "tls" not in target_config("redis://127.0.0.1:6379/0")
    with pytest.raises(SpecError, match="tls and unix"):
        server_class("memcached")(tls="1", unix="1")
    with pytest.raises(SpecError, match="pylibmc does not speak TLS"):
        from cachemark.backends import create_backend
        from cachemark.target import parse_target

        create_backend(parse_target("memcached://127.0.0.1:1?tls=1&client=pylibmc"), "cm:x:")


@pytest.mark.parametrize("io", ["epoll", "uring"])
@pytest.mark.serial
def test_engine_tls_counts_connections_the_server_drops_and_goes_on(spawn, io):
    """A TLS connection the server closes mid-run is one connection error per request lost on it, on
    both I/O backends; the client connects again (a new handshake) and the run goes on to its end."""
    need_io(io)
    server = spawn("redis", tls="1")
    admin = redis.Redis.from_url(server.url())
    killed = []

    def kill_clients() -> None:
        time.sleep(1.0)
        killed.append(admin.client_kill_filter(_type="normal", skipme=True))

    killer = threading.Thread(target=kill_clients)
    killer.start()
    result = _engine(server.url(), threads=1, connections=4, pipeline=4, ops=None, duration_s=2.5, io=io,
                     timeout_ms=2000, on_error="continue", values={"sizes": [[100, 1]]})
    killer.join()
    assert killed and killed[0] >= 4, killed  # the engine's four connections were among those dropped
    get, set_ = result["ops"]["get"], result["ops"]["set"]
    lost = get["errors"].get("connection", 0) + set_["errors"].get("connection", 0)
    # at most a pipeline's worth per connection is in flight when it is dropped
    assert 1 <= lost <= 4 * 4, (lost, result["errors_sample"])
    assert any("server closed the connection" in m for m in result["errors_sample"]), result["errors_sample"]
    assert not {k: v for k, v in get["errors"].items() if k != "connection"}, get["errors"]
    # nothing else went wrong, and the run went on over new connections for its last 1.5 s
    assert get["count"] + set_["count"] > 1000 and get["hits"] > 0
