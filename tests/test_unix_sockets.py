"""Unix domain sockets: ``redis+unix://`` and ``memcached+unix://`` through the Python clients
and the native engine, against real servers the lab spawns with ``unix=1``.

Each run's hits and misses are predicted by the workload (every key prefilled: all hits;
nothing prefilled: all misses), and the server's own counters (Redis ``INFO`` keyspace and
commandstats, memcached ``stats``), read over the same socket, must agree with them.
"""

from __future__ import annotations

import importlib.util
import json
import socket
from pathlib import Path

import pytest
import redis

from cachemark.engine import run_load, target_config
from cachemark.errors import SpecError
from cachemark.target import check_params, parse_target
from io_backends import need_io

pytestmark = pytest.mark.timeout(300)

OPS = 1500
KEYS = 200


def _redis_info(path: str) -> dict:
    client = redis.Redis(unix_socket_path=path)
    try:
        info = client.info("all")
    finally:
        client.close()
    return {"get_calls": info.get("cmdstat_get", {}).get("calls", 0),
            "hits": info["keyspace_hits"], "misses": info["keyspace_misses"]}


def _memcached_stats(path: str) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(path)
        sock.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            data += sock.recv(65536)
    stats = dict(line.split(" ")[1:3] for line in data.decode().splitlines() if line.startswith("STAT "))
    return {"get_calls": int(stats["cmd_get"]), "hits": int(stats["get_hits"]), "misses": int(stats["get_misses"])}


def _run(cachemark, tmp_path: Path, targets: list[str], *extra: str) -> list[dict]:
    out = tmp_path / "r.json"
    args = ["run", "--no-calibrate", "--mix", "get=100", "--keys", str(KEYS), "--ops", str(OPS), "--workers", "2",
            "--warmup", "0", "-o", str(out), *extra]
    for target in targets:
        args += ["-t", target]
    proc = cachemark(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())["runs"]


@pytest.mark.parametrize("kind", ["redis", "memcached"])
@pytest.mark.parametrize("prefill", [True, False])
def test_hits_and_misses_as_predicted_on_both_paths(spawn, cachemark, tmp_path, kind, prefill):
    server = spawn(kind, unix=True)
    url = server.url()
    assert url.startswith(f"{kind}+unix:///") and server.socket_path in url
    counters = _redis_info if kind == "redis" else _memcached_stats
    before = counters(server.socket_path)
    sep = "&" if "?" in url else "?"
    targets = [url, url + f"{sep}client=engine"]
    if kind == "memcached" and importlib.util.find_spec("pylibmc"):
        targets.append(url + f"{sep}client=pylibmc")
    runs = _run(cachemark, tmp_path, targets, *([] if prefill else ["--no-prefill"]))
    assert len(runs) == len(targets)
    total_hits = total_misses = total_gets = 0
    for run in runs:
        assert run["status"] == "ok", run.get("reason")
        assert run["backend"]["scheme"] == f"{kind}+unix"
        assert run["backend"]["info"]["unix_socket"] is True
        phase = run["phases"][-1]
        get = phase["ops"]["get"]
        assert get["count"] == OPS and not get.get("errors")
        if prefill:
            assert (get["hits"], get["misses"]) == (OPS, 0)
        else:
            assert (get["hits"], get["misses"]) == (0, OPS)
        # the sampler read the server's counters over the socket: its command count is the run's,
        # plus the engine's set-up handshake (a PING or version per connection, made in the phase)
        assert phase["server"]["source"] == kind and not phase["server"]["errors"]
        assert OPS <= phase["server"]["server_commands"] <= OPS + 2
        total_hits += get["hits"]
        total_misses += get["misses"]
        total_gets += get["count"]
    after = counters(server.socket_path)
    # Untimed reads, all hits: each run's dropped-writes probe reads back the value it just
    # wrote, and the engine's prefill call ends with one read (of a key it has just written).
    untimed = len(runs) + (1 if prefill else 0)
    assert after["get_calls"] - before["get_calls"] == total_gets + untimed
    assert after["hits"] - before["hits"] == total_hits + untimed
    assert after["misses"] - before["misses"] == total_misses


@pytest.mark.parametrize("io", ["uring", "epoll"])
@pytest.mark.parametrize("kind", ["redis", "memcached"])
def test_engine_io_backends_over_a_unix_socket(spawn, kind, io):
    need_io(io)
    server = spawn(kind, unix=True)
    cfg = target_config(server.url())
    cfg.update(io=io, threads=2, connections=4, pipeline=4, ops=4000, duration_s=30, prefill=True,
               keys={"count": 100, "prefix": f"cmu:{io}:"}, values={"sizes": [[100, 1], [70000, 1]]},
               mix=[{"op": "get", "weight": 9}, {"op": "set", "weight": 1}], verify_fraction=1.0)
    result = run_load(cfg)
    get, set_ = result["ops"]["get"], result["ops"]["set"]
    assert get["count"] + set_["count"] == 4000
    # every key was prefilled and every value read back is verified: large ones span many reads
    assert get["hits"] == get["count"] and not get["errors"] and not set_["errors"], result["errors_sample"]


def test_a_missing_socket_is_one_line_and_exit_2(cachemark, tmp_path):
    for url in ("redis+unix:///nonexistent.sock", "redis+unix:///nonexistent.sock?client=engine",
                "memcached+unix:///nonexistent.sock", "memcached+unix:///nonexistent.sock?client=engine"):
        proc = cachemark("run", "--no-calibrate", "--ops", "10", "-t", url, cwd=tmp_path, timeout=120)
        assert proc.returncode == 2, (url, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "/nonexistent.sock" in lines[0], (url, proc.stderr)
        assert "Traceback" not in proc.stdout + proc.stderr


def test_network_profiles_refuse_a_unix_socket(spawn, cachemark, tmp_path):
    server = spawn("redis", unix=True)
    proc = cachemark("run", "--no-calibrate", "--ops", "10", "--network", "lan", "-t", server.url(),
                     cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Unix socket" in lines[0] and "--network" in lines[0], proc.stderr


def test_urls_and_engine_config(tmp_path):
    cfg = target_config("redis+unix:///run/r.sock?db=3&protocol=resp3")
    assert cfg["servers"] == ["unix:/run/r.sock"] and cfg["db"] == 3 and cfg["protocol"] == "resp3"
    assert target_config("memcached+unix:///run/m.sock")["servers"] == ["unix:/run/m.sock"]
    with pytest.raises(SpecError, match="absolute socket path"):
        check_params(parse_target("redis+unix://run/r.sock"))
    with pytest.raises(SpecError, match="unknown parameter"):
        check_params(parse_target("memcached+unix:///run/m.sock?db=1"))
    with pytest.raises(SpecError, match="unix=.*true or false"):
        from cachemark.lab import server_class

        server_class("redis")(unix="maybe")
