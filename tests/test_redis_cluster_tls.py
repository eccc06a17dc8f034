"""A TLS-only Redis Cluster, as managed ones are (``spawn:redis-cluster?tls=1``: one throw-away CA, every
node's client port, cluster bus and replication over TLS), through redis-py's cluster client and the engine's
cluster mode (``rediss+cluster://…``).

Ground truth: every value read is checked against what was written (the engine's ``verify_fraction=1``,
the Python path's own checks), each primary's and replica's own command counters, and the exact hit
counts of the same seeded workload; a CA that did not sign the nodes' certificates is one line, exit 2.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from cachemark.engine import run_load, target_config
from cachemark.errors import BackendUnavailable
from cachemark.lab.certs import make_certs
from cachemark.lab.redis_cluster import command

pytestmark = pytest.mark.timeout(300)


def _gets(node: object) -> int:
    """``cmdstat_get`` calls the node has served (0 when it has served none)."""
    for line in command(node, "INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_get:"):
            return int(line.split("calls=", 1)[1].split(",", 1)[0])
    return 0


@pytest.fixture(scope="module")
def tls_cluster(spawn_for_file):
    return spawn_for_file("redis-cluster", nodes=3, replicas=1, tls="1")


def test_lab_serves_tls_only_and_names_the_ca(tls_cluster):
    url = tls_cluster.url()
    assert url.startswith("rediss+cluster://127.0.0.1:") and "ssl_ca_certs=" in url
    assert tls_cluster.describe()["tls"] is True
    # the client port speaks TLS only: a plain-text PING gets no reply
    import socket

    node = tls_cluster.primaries[0]
    with socket.create_connection((node.host, node.port), timeout=2) as sock:
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        try:
            reply = sock.recv(100)
        except OSError:
            reply = b""
    assert b"PONG" not in reply
    # CLUSTER SLOTS over TLS names the nodes' TLS ports, replicas included
    slots = command(node, "CLUSTER", "SLOTS")
    ports = {n.port for n in tls_cluster.nodes}
    assert {entry[2][1] for entry in slots} | {entry[3][1] for entry in slots} == ports


def test_engine_reads_verified_values_from_every_node_over_tls(tls_cluster, namespace):
    before = [_gets(n) for n in tls_cluster.nodes]
    for replicas in (False, True):
        url = tls_cluster.url() + "&client=engine" + ("&read_from_replicas=1" if replicas else "")
        cfg = target_config(url) | {
            "connections": 3, "pipeline": 4, "ops": 6000, "duration_s": 30, "prefill": True,
            "keys": {"count": 500, "prefix": namespace, "dist": "uniform"}, "verify_fraction": 1.0, "seed": 7,
            "values": {"sizes": [[100, 3], [20_000, 1]]},
            "mix": [{"op": "get", "weight": 8}, {"op": "set", "weight": 2}]}
        assert cfg["tls"]["ca_file"].endswith("ca.pem") and cfg["cluster"] is True
        result = run_load(cfg)
        get, set_ = result["ops"]["get"], result["ops"]["set"]
        assert get["count"] + set_["count"] == 6000
        # every value read back was checked; replicas may lag a write by a moment, never corrupt one
        assert not any(get["errors"].values()) and not any(set_["errors"].values()), result["errors_sample"]
        assert get["hits"] == get["count"] if not replicas else get["hits"] > 0.99 * get["count"]
        assert result["cluster"]["moved"] == 0 and result["cluster"]["primaries"] == 3
        served = [_gets(n) - b for n, b in zip(tls_cluster.nodes, before, strict=True)]
        primaries, replica_gets = served[:3], served[3:]
        assert all(g > 100 for g in primaries), served
        if replicas:
            assert all(g > 100 for g in replica_gets), served
        else:
            assert replica_gets == [0, 0, 0], served
        before = [_gets(n) for n in tls_cluster.nodes]


def test_python_path_and_engine_from_the_command_line(tls_cluster, cachemark, tmp_path):
    out = tmp_path / "r.json"
    url = tls_cluster.url()
    proc = cachemark("run", "--no-calibrate", "--mix", "get=90,set=10", "--keys", "300", "--ops", "2000",
                     "--warmup", "0", "--prefill", "-o", str(out), "-t", url, "-t", url + "&client=engine",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "cluster: 3 primaries, 0 MOVED, 0 ASK" in proc.stdout
    runs = json.loads(out.read_text())["runs"]
    assert [r["backend"]["info"]["client"] for r in runs] == ["redis-py", "cachemark-engine"]
    for run in runs:
        assert run["status"] == "ok"
        phase = run["phases"][-1]
        get = phase["ops"]["get"]
        assert get["hits"] == get["count"] > 1500 and not get.get("errors")
        # the server figures: every primary's INFO, read over TLS and added up
        assert phase["server"]["source"] == "redis" and not phase["server"]["errors"]
        assert phase["server"]["server_commands"] >= 2000


def test_a_ca_that_did_not_sign_the_nodes_is_one_line_and_exit_2(tls_cluster, cachemark, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    bad = tls_cluster.url().split("?")[0] + f"?ssl_ca_certs={quote(make_certs(str(other)).ca)}"
    with pytest.raises(BackendUnavailable, match="certificate"):
        run_load(target_config(bad + "&client=engine") | {"ops": 10, "keys": {"count": 10, "prefix": "cm:x:"}})
    for url in (bad, bad + "&client=engine"):
        proc = cachemark("run", "--no-calibrate", "--ops", "10", "--warmup", "0", "-t", url, cwd=tmp_path,
                         timeout=120)
        assert proc.returncode == 2, proc.stdout[-1500:] + proc.stderr[-1500:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
        assert "certificate" in lines[0].lower(), lines[0]
