"""Redis Cluster: the lab's ``spawn:redis-cluster``, redis-py's cluster client (``redis+cluster://``) and the
engine's cluster mode, against real local clusters (redis-server with ``cluster-enabled yes``).

Ground truth is the nodes' own counters (each primary's ``keyspace_hits``) and the exact hit and miss counts
of the same seeded workload on a single redis-server.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachemark.errors import SpecError
from cachemark.lab.redis_cluster import RedisClusterServer, command, slot_ranges

sys.path.insert(0, str(Path(__file__).parent))
from conftest import start_server  # noqa: E402


def _stat(node: object, name: str) -> int:
    text = command(node, "INFO", "stats")
    return int(next(line.split(":", 1)[1] for line in text.splitlines() if line.startswith(name + ":")))


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServer]:
    server = start_server("redis-cluster", nodes=3)
    yield server  # type: ignore[misc]
    server.stop()


def _counts(phase: dict) -> dict[str, tuple[int, int, int]]:
    return {name: (op["count"], op["hits"], op["misses"]) for name, op in phase["ops"].items()}


def test_lab_forms_a_cluster_of_three_primaries_and_removes_it(cluster):
    assert cluster.url() == "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in cluster.primaries)
    slots = command(cluster.primaries[1], "CLUSTER", "SLOTS")
    owned = sorted((first, last, node[1]) for first, last, node, *_ in slots)
    assert owned == [(a, b, n.port) for (a, b), n in zip(slot_ranges(3), cluster.primaries, strict=True)]
    assert "cluster_state:ok" in command(cluster.primaries[2], "CLUSTER", "INFO")
    # a private one, to see stop() end every process and remove every directory
    other = start_server("redis-cluster", nodes=2)
    dirs, procs = [n.tmpdir for n in other.nodes], [n.proc for n in other.nodes]
    other.stop()
    assert not any(os.path.exists(d) for d in dirs)
    assert all(p is not None and p.poll() is not None for p in procs)


@pytest.mark.parametrize("query", ["nodes=0", "nodes=17", "nodes=x", "replicas=3"])
def test_lab_refuses_bad_sizes_in_one_line(query):
    key, _, value = query.partition("=")
    with pytest.raises(SpecError, match=f"spawn:redis-cluster: {key}="):
        RedisClusterServer(**{key: value})


def test_python_cluster_client_counts_what_a_single_redis_counts_and_spreads_keys(cluster, redis_server):
    from cachemark.run.runner import run_target
    from cachemark.spec import Workload

    workload = Workload(keys=300, key_dist="uniform", mix="get=60,set=20,delete=10,get_many=5,set_many=5",
                        ops=3000, duration=None, warmup=0, workers=1, seed=5)
    before = [_stat(n, "keyspace_hits") for n in cluster.primaries]
    on_cluster = run_target(cluster.url(), workload)
    after = [_stat(n, "keyspace_hits") for n in cluster.primaries]
    single = run_target(redis_server.url(), workload)
    assert on_cluster.status == "ok", on_cluster.reason
    phase = on_cluster.phases[0]
    assert _counts(phase) == _counts(single.phases[0])
    assert phase["ops"]["get"]["misses"] > 100 and not phase["ops"]["get"]["errors"]
    hits = [b - a for a, b in zip(before, after, strict=True)]
    assert all(h > 100 for h in hits), hits  # every primary served a share of the reads
    assert sum(hits) >= phase["ops"]["get"]["hits"]
    # cleanup left nothing of the run's namespace on any node
    assert all(command(n, "DBSIZE") == 0 for n in cluster.primaries)


def test_cluster_url_parameters_are_checked():
    from cachemark.backends.redis_cluster import RedisClusterBackend
    from cachemark.schemes import check_params
    from cachemark.target import parse_target

    with pytest.raises(SpecError, match="unknown parameter 'hiredis'"):
        check_params(parse_target("redis+cluster://127.0.0.1:7000?hiredis=false"))
    with pytest.raises(SpecError, match="unknown parameter 'bogus'"):
        check_params(parse_target("spawn:redis-cluster?nodes=3&bogus=1"))
    check_params(parse_target("spawn:redis-cluster?nodes=3&replicas=1&read_from_replicas=1"))
    with pytest.raises(SpecError, match="database 0 only"):
        RedisClusterBackend(parse_target("redis+cluster://127.0.0.1:7000/2"), "cm:x:")
