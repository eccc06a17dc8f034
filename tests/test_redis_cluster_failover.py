"""A Redis Cluster losing a node mid-run: a primary killed and its replica promoted by the cluster, a replica
read from killed. The nodes' own counters (``INFO commandstats``, ``INFO replication``) are the ground truth.

Apart from test_redis_cluster.py so that `make test`'s serial pass can run these beside its tests (each waits on
the cluster's node timeout): in one file, they were most of that pass.
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from cachemark.lab.redis_cluster import command
from test_redis_cluster import _gets


@pytest.mark.parametrize("client", ["engine", "redis-py"])
@pytest.mark.serial
def test_a_cluster_failover_is_followed_and_its_write_outage_timed(spawn, tmp_path, client):
    """A primary SIGKILLed mid-run: its replica is promoted by the cluster (node timeout 2 s). The engine
    learns that from the other nodes (no dead node can answer MOVED), redis-py from its own topology
    refresh; both send that node's keys there. The writes to them failed for one window, from the kill to
    the promotion, timed and printed — the other nodes' writes, which went on, do not split it."""
    import subprocess

    cluster = spawn("redis-cluster", nodes=3, replicas=1)
    victim, replica = cluster.primaries[0], cluster.nodes[3]  # replica i follows primary i % 3
    assert f"master_port:{victim.port}" in command(replica, "INFO", "replication")
    out = tmp_path / "failover.json"
    run = subprocess.Popen(
        [sys.executable, "-m", "cachemark", "run", "-t", cluster.url() + f"?client={client}", "--duration", "9s",
         "--warmup", "0", "--keys", "500", "--value-size", "200", "--mix", "get=50,set=50", "--no-calibrate",
         "--allow-errors", "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while _gets(victim) < 100:  # the timed phase has begun (no warm-up; the prefill only writes)
            assert time.monotonic() < deadline and run.poll() is None, "the timed phase never started"
            time.sleep(0.05)
        time.sleep(1.0)
        victim.kill()
        output = run.communicate(timeout=60)[0]
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, output
    assert "role:master" in command(replica, "INFO", "replication")
    assert _gets(replica) > 100, output  # a replica serves no reads: these came after its promotion
    phase = json.loads(out.read_text())["runs"][0]["phases"][0]
    errors = {kind for op in phase["ops"].values() for kind, n in op["errors"].items() if n}
    assert errors <= {"connection", "timeout"} and errors, phase["ops"]
    (outage,) = phase["write_outages"]  # one window: the other nodes' writes did not split it
    assert outage["recovered"] and outage["server"] == f"127.0.0.1:{replica.port}", outage
    # the node timeout (2 s) and the promotion, ~3-4 s: the 9-s run leaves ~8 s after the kill for that
    # and for the promoted replica's reads
    assert 1.0 < outage["duration_s"] < 10, outage
    assert 0 < outage["failed_writes"] <= outage["errors"]
    assert f"failover: writes failed for {outage['duration_s']:.1f} s" in output, output


@pytest.mark.serial
def test_engine_reads_from_the_primary_while_a_replica_is_down(spawn, namespace):
    """A replica read from (read_from_replicas=1) killed mid-run: the reads in flight on it fail, and its
    turns then go to its primary (a reconnect is tried every 100 ms), as redis-py's retry goes to the next
    node — not a connection error per turn for the rest of the run."""
    import threading

    from cachemark.engine import run_load, target_config

    cluster = spawn("redis-cluster", nodes=3, replicas=1)
    victim = cluster.nodes[3]
    config = target_config(cluster.url() + "?client=engine&read_from_replicas=1") | {
        "connections": 4, "pipeline": 4, "duration_s": 3.0, "on_error": "continue", "timeout_ms": 1000,
        "verify_fraction": 0.0, "keys": {"count": 2000, "prefix": namespace, "dist": "uniform"},
        "mix": [{"op": "get", "weight": 9}, {"op": "set", "weight": 1}]}
    out: dict = {}
    load = threading.Thread(target=lambda: out.update(result=run_load(config)))
    load.start()
    time.sleep(1.0)
    victim.kill()
    load.join(timeout=30)
    result = out["result"]
    get = result["ops"]["get"]
    failed = sum(get["errors"].values())
    # at most the reads in flight on the victim when it died: a pipeline sent and one held, per client
    assert failed <= 4 * 2 * 4, (get["errors"], result["errors_sample"])
    assert get["hits"] == get["count"] - failed > 5000
    assert any(str(victim.port) in m and "reads go to the primary" in m for m in result["errors_sample"])
    assert not result["ops"]["set"]["errors"]
