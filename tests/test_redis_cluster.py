"""Redis Cluster: the lab's ``spawn:redis-cluster``, redis-py's cluster client (``redis+cluster://``) and the
engine's cluster mode, against real local clusters (redis-server with ``cluster-enabled yes``).

Ground truth is the nodes' own counters (each primary's ``keyspace_hits``) and the exact hit and miss counts
of the same seeded workload on a single redis-server.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator

import pytest

from cachemark.errors import SpecError
from cachemark.lab.redis_cluster import ClusterNode, RedisClusterServer, command, slot_ranges
from conftest import run_cli  # noqa: F401 - run_cli: the cachemark fixture's
from io_backends import need_io


def _stat(node: object, name: str) -> int:
    text = command(node, "INFO", "stats")
    return int(next(line.split(":", 1)[1] for line in text.splitlines() if line.startswith(name + ":")))


@pytest.fixture
def cluster(redis_cluster_server) -> RedisClusterServer:
    return redis_cluster_server


def _counts(phase: dict) -> dict[str, tuple[int, int, int]]:
    return {name: (op["count"], op.get("hits", 0), op.get("misses", 0)) for name, op in phase["ops"].items()}


def test_lab_forms_a_cluster_of_three_primaries_and_removes_it(cluster, spawn):
    assert cluster.url() == "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in cluster.primaries)
    slots = command(cluster.primaries[1], "CLUSTER", "SLOTS")
    owned = sorted((first, last, node[1]) for first, last, node, *_ in slots)
    assert owned == [(a, b, n.port) for (a, b), n in zip(slot_ranges(3), cluster.primaries, strict=True)]
    assert "cluster_state:ok" in command(cluster.primaries[2], "CLUSTER", "INFO")
    # a private one, to see stop() end every process and remove every directory
    other = spawn("redis-cluster", nodes=2)
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
    held = _dbsize(cluster)
    on_cluster = run_target(cluster.url(), workload)
    after = [_stat(n, "keyspace_hits") for n in cluster.primaries]
    single = run_target(redis_server.url(), workload)
    assert on_cluster.status == "ok", on_cluster.reason
    phase = on_cluster.to_json()["phases"][0]
    assert _counts(phase) == _counts(single.to_json()["phases"][0])
    assert phase["ops"]["get"]["misses"] > 100 and not phase["ops"]["get"]["errors"]
    # the server figures are every primary's INFO added up: each op is at least one command somewhere
    server = phase["server"]
    assert server["source"] == "redis" and not server["errors"] and server["server_commands"] >= 3000
    hits = [b - a for a, b in zip(before, after, strict=True)]
    assert all(h > 100 for h in hits), hits  # every primary served a share of the reads
    assert phase["cluster"] == {"primaries": 3, "moved": 0, "ask": 0}  # the nodes' own count of redirects
    assert sum(hits) >= phase["ops"]["get"]["hits"]
    # cleanup left nothing of the run's namespace on any node, nor any other key: the cluster is the worker's
    # shared one, so against what it held before the run (an earlier test's keys are not this run's)
    assert _left(cluster, on_cluster.backend.namespace) == [] and _dbsize(cluster) <= held


def test_cluster_url_parameters_are_checked():
    from cachemark.backends.redis_cluster import RedisClusterBackend
    from cachemark.target import check_params, parse_target

    with pytest.raises(SpecError, match="unknown parameter 'hiredis'"):
        check_params(parse_target("redis+cluster://127.0.0.1:7000?hiredis=false"))
    with pytest.raises(SpecError, match="unknown parameter 'bogus'"):
        check_params(parse_target("spawn:redis-cluster?nodes=3&bogus=1"))
    check_params(parse_target("spawn:redis-cluster?nodes=3&replicas=1&read_from_replicas=1"))
    with pytest.raises(SpecError, match="database 0 only"):
        RedisClusterBackend(parse_target("redis+cluster://127.0.0.1:7000/2"), "cm:x:")


# --- the native engine's cluster mode (redis+cluster://…?client=engine) ---------------------------------------


def _engine_config(cluster: RedisClusterServer, prefix: str, **extra: object) -> dict:
    from cachemark.engine import target_config

    return target_config(cluster.url() + "?client=engine") | {
        "connections": 4, "pipeline": 4, "keys": {"count": 2000, "prefix": prefix, "dist": "uniform"},
        "mix": [{"op": "get", "weight": 8}, {"op": "set", "weight": 1}, {"op": "delete", "weight": 1}],
        "verify_fraction": 0.0, "seed": 3} | extra


def _node_reads(cluster: RedisClusterServer) -> list[tuple[int, int]]:
    return [(_stat(n, "keyspace_hits"), _stat(n, "keyspace_misses")) for n in cluster.primaries]


def test_engine_sends_each_key_to_its_slot_owner(cluster, namespace):
    from cachemark.engine import run_load

    before = _node_reads(cluster)
    result = run_load(_engine_config(cluster, namespace, ops=20000))
    after = _node_reads(cluster)
    get = result["ops"]["get"]
    assert result["cluster"] == {"primaries": 3, "moved": 0, "ask": 0}
    assert result["connections"] == 4 * 3  # one socket per client and primary
    assert not get["errors"] and get["misses"] > 1000
    served = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(before, after, strict=True)]
    # the nodes' own counters: every read landed on the node that owns its key (a wrong node
    # would have answered MOVED, counted by neither), and every node had its share
    assert sum(h for h, _ in served) == get["hits"] and sum(m for _, m in served) == get["misses"]
    assert all(h > 1000 for h, _ in served), served
    assert _clear(cluster, namespace) > 1000  # what the run left, removed from every node


def test_engine_writes_each_node_whole_pipelines(cluster, namespace):
    """Closed loop at pipeline 16: a client's socket holds the requests drawn for its node and
    sends them as one whole pipeline once the previous one is answered, as each of
    redis-benchmark --cluster's clients does. Refilled a few at a time on every node after each
    node's replies, each node read ~5 commands per read event (pipeline 16 over 3 nodes); sent
    as soon as the socket was free, 13; the nodes' own counters say how many they read at once."""
    from cachemark.engine import run_load

    def counters() -> list[tuple[int, int]]:
        return [(_stat(n, "total_commands_processed"), _stat(n, "total_reads_processed")) for n in cluster.primaries]

    before = counters()
    result = run_load(_engine_config(cluster, namespace, ops=60000, threads=1, connections=2, pipeline=16,
                                     prefill=False))  # the counters: the timed loop alone
    after = counters()
    get = result["ops"]["get"]
    assert not get["errors"] and result["cluster"]["moved"] == 0
    per_read = [(b[0] - a[0]) / max(1, b[1] - a[1]) for a, b in zip(before, after, strict=True)]
    # a whole pipeline is 16, less the last part-pipelines and any read the kernel split
    assert min(per_read) > 15, per_read
    assert _clear(cluster, namespace) > 1000


def _clear(cluster: RedisClusterServer, namespace: str) -> int:
    from cachemark.backends.redis_cluster import RedisClusterBackend
    from cachemark.target import parse_target

    backend = RedisClusterBackend(parse_target(cluster.url()), namespace)
    try:
        return backend.clear_namespace()
    finally:
        backend.close()


def test_engine_counts_what_a_single_redis_counts(cluster, redis_server):
    from cachemark.run.runner import run_target
    from cachemark.spec import Workload

    # one client: the engine's op stream is then the same sequence on both targets
    workload = Workload(keys=500, key_dist="uniform", mix="get=70,set=20,delete=10", ops=5000, duration=None,
                        warmup=0, workers=1, seed=11)  # a timed warm-up would differ in length
    held = _dbsize(cluster)  # the worker's shared cluster: what it held before, not 0
    on_cluster = run_target(cluster.url() + "?client=engine", workload)
    single = run_target(redis_server.url() + "?client=engine", workload)
    assert on_cluster.status == "ok", on_cluster.reason
    phase = on_cluster.to_json()["phases"][0]
    assert _counts(phase) == _counts(single.to_json()["phases"][0])
    assert phase["ops"]["get"]["misses"] > 100 and not phase["ops"]["get"]["errors"]
    assert phase["cluster"] == {"primaries": 3, "moved": 0, "ask": 0}  # the map from the start was right
    # cleanup reached every node
    assert _left(cluster, on_cluster.backend.namespace) == [] and _dbsize(cluster) <= held


def _left(cluster: RedisClusterServer, namespace: str) -> list:
    """The keys of ``namespace`` any primary still holds."""
    return [key for n in cluster.primaries for key in command(n, "KEYS", namespace + "*")]


def _dbsize(cluster: RedisClusterServer) -> int:
    return sum(command(n, "DBSIZE") for n in cluster.primaries)


def _owner(cluster: RedisClusterServer, slot: int) -> object:
    for first, last, node, *_ in command(cluster.primaries[0], "CLUSTER", "SLOTS"):
        if first <= slot <= last:
            return next(n for n in cluster.primaries if n.port == node[1])
    raise AssertionError(f"slot {slot} has no owner")


@pytest.mark.parametrize("load", [{"io": "uring", "threads": 1, "connections": 2, "pipeline": 1},
                                  {"io": "epoll", "threads": 2, "connections": 4, "pipeline": 4,
                                   "mode": "open", "rate": 4000}], ids=["uring-closed", "epoll-open-2threads"])
@pytest.mark.serial
def test_engine_follows_a_slot_migrated_mid_run(spawn, namespace, load):
    """ASK while the slot's keys move, MOVED once it has moved: both counted, no op lost."""
    import threading

    from cachemark.engine import run_load

    need_io(load["io"])
    cluster = spawn("redis-cluster", nodes=2)
    slot = command(cluster.primaries[0], "CLUSTER", "KEYSLOT", namespace + "0")
    source = _owner(cluster, slot)
    target = next(n for n in cluster.primaries if n is not source)
    config = _engine_config(cluster, namespace, duration_s=3.0, on_error="continue",
                            keys={"count": 20, "prefix": namespace, "dist": "uniform"},
                            mix=[{"op": "get", "weight": 8}, {"op": "set", "weight": 2}]) | load
    out: dict = {}
    load = threading.Thread(target=lambda: out.update(result=run_load(config)))
    load.start()
    time.sleep(1.0)
    _migrate(slot, source, target)
    load.join(timeout=30)
    result = out["result"]
    get = result["ops"]["get"]
    assert result["cluster"]["moved"] >= 1 and result["cluster"]["ask"] >= 1, result["cluster"]
    assert result["prefill_errors"] == 0 and result["missed"] <= 0.01 * get["count"]  # open loop kept its rate
    assert not get["errors"] and not result["ops"]["set"]["errors"], result["errors_sample"]
    assert get["hits"] == get["count"]  # prefilled, nothing deleted: every read found its key, wherever it was
    assert command(target, "EXISTS", namespace + "0") == 1


def _migrate(slot: int, source: ClusterNode, target: ClusterNode) -> None:
    """Moves ``slot`` and its keys from ``source`` to ``target`` as redis-cli's resharding does."""
    command(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
    command(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
    while keys := command(source, "CLUSTER", "GETKEYSINSLOT", slot, 100):
        command(source, "MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)
        time.sleep(0.3)  # the slot stays half-moved a while: requests for it are ASKed over
    for node in (target, source):
        command(node, "CLUSTER", "SETSLOT", slot, "NODE", target.node_id)


@pytest.mark.serial
def test_engine_follows_a_node_that_joins_the_cluster_mid_run(spawn, namespace):
    """A node added while the run goes on and given a slot (a cluster grown by resharding): the engine
    learns it from the first ASK, connects to it, and sends the slot's keys there once MOVED says so.
    The new node's own counters show the reads; no op fails, and the result names the node."""
    import threading

    from cachemark.engine import run_load
    from cachemark.report.data import cluster_note
    from cachemark.results.schema import ClusterFigures

    cluster = spawn("redis-cluster", nodes=2)
    with _joining_node(cluster) as joiner:
        slot = command(cluster.primaries[0], "CLUSTER", "KEYSLOT", namespace + "0")
        config = _engine_config(cluster, namespace, duration_s=3.0, on_error="continue", threads=2,
                                keys={"count": 20, "prefix": namespace, "dist": "uniform"},
                                mix=[{"op": "get", "weight": 8}, {"op": "set", "weight": 2}])
        out: dict = {}
        load = threading.Thread(target=lambda: out.update(result=run_load(config)))
        load.start()
        time.sleep(1.0)
        _migrate(slot, _owner(cluster, slot), joiner)
        reads_before = _gets(joiner)
        load.join(timeout=30)
        result = out["result"]
        get = result["ops"]["get"]
        assert result["cluster"]["joined"] == [f"{joiner.host}:{joiner.port}"], result["cluster"]
        assert result["cluster"]["moved"] >= 1 and result["cluster"]["ask"] >= 1, result["cluster"]
        assert not get["errors"] and not result["ops"]["set"]["errors"], result["errors_sample"]
        assert get["hits"] == get["count"]  # prefilled, nothing deleted: every read found its key, wherever it was
        assert _gets(joiner) - reads_before > 100  # after the move, the slot's reads went to the new node
        assert result["connections"] == 4 * 2  # the start map's: the joined node's sockets came later
        # the reports' cluster line (terminal, Markdown, HTML) names it
        note = cluster_note(ClusterFigures.model_validate(result["cluster"]))
        assert f", 1 node joined ({joiner.host}:{joiner.port})" in note


def _run_beside(cluster: RedisClusterServer, workload: object, change: Callable[[], None]) -> object:
    """A Python-path run of ``workload``, with ``change`` done to the cluster in a thread beside it (the run
    wants the main thread for its signals)."""
    import threading

    from cachemark.run.runner import run_target

    changer = threading.Thread(target=change)
    changer.start()
    outcome = run_target(cluster.url(), workload)
    changer.join(timeout=30)
    return outcome


def _a_slot_in_use(cluster: RedisClusterServer) -> int | None:
    """The slot of a key a Python-path run (``cm:*``) wrote, a second into its timed phase; None if none came."""
    deadline = time.monotonic() + 20
    while not (keys := [k for n in cluster.primaries for k in command(n, "KEYS", "cm:*")]):
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)
    time.sleep(1.0)  # into the timed phase
    return command(cluster.primaries[0], "CLUSTER", "KEYSLOT", keys[0])


@contextlib.contextmanager
def _joining_node(cluster: RedisClusterServer) -> Iterator[ClusterNode]:
    """A node that has met ``cluster`` and has no slots yet: in no slot map, so a run starts without it.
    Every node knows it before it is used (the one it did not meet learns it by gossip: a migration asked
    of that one sooner fails with "I don't know about node"). A bare ClusterNode, started here: no
    ``spawn:`` kind (so no conftest fixture) starts a node outside a formed cluster."""
    joiner = ClusterNode().start()
    try:
        joiner.node_id = command(joiner, "CLUSTER", "MYID")
        command(cluster.primaries[0], "CLUSTER", "MEET", joiner.host, joiner.port, joiner.bus_port)
        deadline = time.monotonic() + 20

        def met() -> bool:
            return (all(f in command(joiner, "CLUSTER", "INFO") for f in ("cluster_known_nodes:3", "state:ok"))
                    and all(joiner.node_id in command(p, "CLUSTER", "NODES") for p in cluster.primaries))

        while not met():
            assert time.monotonic() < deadline, "the new node never met the cluster"
            time.sleep(0.05)
        yield joiner
    finally:
        joiner.stop()


@pytest.mark.serial
def test_python_path_follows_a_node_that_joins_once_moved_there(spawn):
    """redis-py learns a joined node from MOVED. Before that, while the slot migrates, it cannot follow an
    ASK to a node it has not met (redis/redis-py#4015, 6.4: AttributeError on None): those ops fail, and are
    counted under redis-py's own error, as an application would meet them — never a crash of the run."""

    from cachemark.spec import Workload

    cluster = spawn("redis-cluster", nodes=2)
    with _joining_node(cluster) as joiner:
        workload = Workload(keys=20, key_dist="uniform", mix="get=80,set=20", duration="4s", warmup=0, workers=1)
        moved: list[int] = []

        def migrate() -> None:  # beside the run (which wants the main thread for its signals)
            if (slot := _a_slot_in_use(cluster)) is None:
                return
            _migrate(slot, _owner(cluster, slot), joiner)
            moved.append(_gets(joiner))

        outcome = _run_beside(cluster, workload, migrate)
        assert moved, "the slot was not migrated during the run"
        assert outcome.status == "ok", outcome.reason
        phase = outcome.phases[0].to_json()  # as saved
        assert phase["cluster"]["moved"] >= 1, phase["cluster"]
        assert _gets(joiner) - moved[0] > 100  # after MOVED, the slot's reads went to the new node
        get = phase["ops"]["get"]
        assert set(get.get("errors", {})) <= {"AttributeError"}, phase["error_samples"]
        assert all("redis_connection" in m for m in phase["error_samples"]), phase["error_samples"]
        assert get["hits"] == get["count"] - sum(get.get("errors", {}).values()) > 1000


def test_python_path_has_its_redirects_counted_by_the_nodes(spawn):
    """redis-py follows MOVED and ASK unseen; the primaries count every redirect they answer
    (INFO errorstats), so the run's cluster line is theirs: a slot migrated mid-run shows."""

    from cachemark.spec import Workload

    cluster = spawn("redis-cluster", nodes=2)
    workload = Workload(keys=20, key_dist="uniform", mix="get=80,set=20", duration="4s", warmup=0, workers=1)

    def migrate() -> None:  # beside the run (which wants the main thread for its signals)
        if (slot := _a_slot_in_use(cluster)) is None:
            return
        source = _owner(cluster, slot)
        target = next(n for n in cluster.primaries if n is not source)
        command(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
        command(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
        while moving := command(source, "CLUSTER", "GETKEYSINSLOT", slot, 100):
            command(source, "MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *moving)
            time.sleep(0.3)
        for node in (target, source):
            command(node, "CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        done.append(slot)

    done: list[int] = []
    outcome = _run_beside(cluster, workload, migrate)
    assert done, "the slot was not migrated during the run"
    assert outcome.status == "ok", outcome.reason
    phase = outcome.phases[0].to_json()  # as saved
    assert phase["cluster"]["primaries"] == 2 and phase["cluster"]["moved"] >= 1, phase["cluster"]
    get = phase["ops"]["get"]
    assert not get["errors"] and get["count"] > 100
    assert get["hits"] == get["count"]  # nothing deleted: every read found its key, wherever it was


@pytest.mark.serial
def test_engine_counts_a_killed_node_and_ends_on_time(spawn, namespace):
    import threading

    from cachemark.engine import run_load

    cluster = spawn("redis-cluster", nodes=3)
    config = _engine_config(cluster, namespace, duration_s=3.0, timeout_ms=1000)
    out: dict = {}
    started = time.monotonic()
    load = threading.Thread(target=lambda: out.update(result=run_load(config)))
    load.start()
    time.sleep(1.0)
    cluster.primaries[1].kill()
    load.join(timeout=30)
    took = time.monotonic() - started
    result = out["result"]
    get = result["ops"]["get"]
    # the 3-s deadline (a floor) and the drain: 3.04 s beside a busy loop, 2.5 s of slack for 0.04 s used
    assert took < 3.0 + 2.5, took
    assert get["errors"].get("connection", 0) > 0 and get["hits"] > 0  # the other two nodes served on
    assert result["stopped_on_errors"] is None  # not every op failed
    assert any(str(cluster.primaries[1].port) in m for m in result["errors_sample"])


def test_engine_refuses_what_cluster_mode_cannot_route(cluster, redis_server):
    from cachemark.engine import run_load, target_config
    from cachemark.errors import BackendUnavailable

    not_a_cluster = target_config(redis_server.url().replace("redis://", "redis+cluster://").removesuffix("/0"))
    with pytest.raises(BackendUnavailable, match="no cluster seed gave its slot map: .*cluster support disabled"):
        run_load(not_a_cluster | {"ops": 10, "keys": {"count": 10, "prefix": "cm:x:"}})

    with pytest.raises(SpecError, match="mget.*cluster mode"):
        run_load(_engine_config(cluster, "cm:x:", ops=10, mix=[{"op": "mget", "weight": 1, "count": 3}]))
    with pytest.raises(SpecError, match="database 0 only"):
        target_config("redis+cluster://127.0.0.1:7000/1?client=engine")
    with pytest.raises(SpecError, match="redis\\+cluster://"):
        target_config("redis://127.0.0.1:7000,127.0.0.1:7001?client=engine")
    # the flag belongs to cluster URLs alone: on a single server's it is an unknown parameter
    from cachemark.target import check_params, parse_target

    with pytest.raises(SpecError, match="unknown parameter 'read_from_replicas'"):
        check_params(parse_target("redis://127.0.0.1:7000?client=engine&read_from_replicas=1"))
    with pytest.raises(SpecError, match='"read_from_replicas" is for a Redis Cluster'):
        run_load(target_config(redis_server.url() + "?client=engine") | {"read_from_replicas": True, "ops": 10,
                                                                        "keys": {"count": 10, "prefix": "cm:x:"}})


def test_cli_spawns_a_cluster_and_prints_its_redirects(cachemark, tmp_path):
    proc = cachemark("run", "-t", "spawn:redis-cluster?nodes=3&client=engine", "-t", "spawn:redis-cluster?nodes=2",
                     "--ops", "2000", "--keys", "300", "--mix", "get=80,set=20", "--warmup", "0", "--no-calibrate",
                     "-o", str(tmp_path / "r.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "redis-cluster(engine): main: cluster: 3 primaries, 0 MOVED, 0 ASK" in proc.stdout
    runs = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["ok", "ok"]
    assert runs[0]["phases"][0]["cluster"] == {"primaries": 3, "moved": 0, "ask": 0}
    assert runs[1]["backend"]["info"]["cluster"] is True and runs[1]["server"]["primaries"] == 2
    report = cachemark("report", str(tmp_path / "r.json"), "-f", "markdown", cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-1000:]
    assert "cluster: 3 primaries, 0 MOVED, 0 ASK" in (tmp_path / "r.md").read_text()
    bad = cachemark("run", "-t", "spawn:redis-cluster?nodes=99", "--ops", "10", "--no-calibrate", cwd=tmp_path)
    assert bad.returncode == 2 and "nodes='99' must be a number from 1 to 16" in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr
    proxied = cachemark("run", "-t", "redis+cluster://127.0.0.1:1", "--network", "lan", "--ops", "10", "--no-calibrate",
                       cwd=tmp_path)
    assert proxied.returncode == 2 and "cannot stand in front of a Redis Cluster" in proxied.stderr + proxied.stdout
    down = cachemark("run", "-t", "redis+cluster://127.0.0.1:1?client=engine", "--ops", "10", "--no-calibrate",
                     cwd=tmp_path)
    assert down.returncode == 2 and "Connection refused" in down.stderr + down.stdout
    assert "Traceback" not in proxied.stderr + down.stderr


def _gets(node: object) -> int:
    """The GETs a node executed (its own ``INFO commandstats``)."""
    text = command(node, "INFO", "commandstats")
    line = next((ln for ln in text.splitlines() if ln.startswith("cmdstat_get:")), "")
    return int(line.split("calls=", 1)[1].split(",", 1)[0]) if line else 0


def test_engine_reads_from_replicas_in_rotation_when_asked(spawn, namespace, cachemark, tmp_path):
    """read_from_replicas=1: the engine connects to every replica CLUSTER SLOTS names (READONLY
    in its handshake) and sends reads to a slot's primary and replicas in turn, writes to the
    primary; the replicas' own command counts show it. Without the flag they serve no GET."""
    from cachemark.engine import run_load, target_config

    cluster = spawn("redis-cluster", nodes=3, replicas=1)
    replicas = cluster.nodes[3:]
    config = target_config(cluster.url() + "?client=engine&read_from_replicas=1")
    assert config["read_from_replicas"] is True
    load = {"connections": 4, "pipeline": 4, "ops": 20000, "warmup_s": 0.5, "verify_fraction": 0.0, "seed": 3,
            "keys": {"count": 2000, "prefix": namespace, "dist": "uniform"},
            "mix": [{"op": "get", "weight": 8}, {"op": "exists", "weight": 1}, {"op": "set", "weight": 1}]}
    before = [_gets(n) for n in cluster.nodes]
    result = run_load(config | load)
    served = [_gets(n) - b for n, b in zip(cluster.nodes, before, strict=True)]
    get = result["ops"]["get"]
    assert result["cluster"] == {"primaries": 3, "replicas": 3, "moved": 0, "ask": 0}  # READONLY: no MOVED
    assert result["connections"] == 4 * 6  # one socket per client and node
    assert not any(op["errors"] for op in result["ops"].values()), result["errors_sample"]
    assert get["hits"] == get["count"] > 10000  # prefilled, nothing deleted: every read found its key
    # every GET of the run (prefill's canaries and warm-up aside) landed on a primary or a replica,
    # each about half of its slots' reads (the rotation is per primary: itself, then its replica)
    assert sum(served) >= get["count"]
    assert all(n > 0.3 * get["count"] / 3 for n in served[3:]), served
    assert all(n > 0.3 * get["count"] / 3 for n in served[:3]), served
    print("GETs per node (primaries, then replicas):", served)

    # without the flag: primaries only, as before
    before = [_gets(n) for n in replicas]
    plain = run_load(target_config(cluster.url() + "?client=engine") | load)
    assert plain["cluster"] == {"primaries": 3, "moved": 0, "ask": 0} and plain["connections"] == 4 * 3
    assert [_gets(n) - b for n, b in zip(replicas, before, strict=True)] == [0, 0, 0]
    assert _clear(cluster, namespace) > 1000

    # the CLI and its report say how many replicas were read from
    proc = cachemark("run", "-t", cluster.url() + "?client=engine&read_from_replicas=1", "--ops", "2000",
                     "--keys", "300", "--mix", "get=80,set=20", "-o", str(tmp_path / "r.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "cluster: 3 primaries (+3 replicas read from), 0 MOVED, 0 ASK" in proc.stdout, proc.stdout[-2000:]


def test_replicas_follow_their_primaries_and_serve_reads_when_asked(spawn):
    from cachemark.run.runner import run_target
    from cachemark.spec import Workload

    cluster = spawn("redis-cluster", nodes=2, replicas=1)
    replicas = cluster.nodes[2:]
    assert len(cluster.nodes) == 4 and cluster.url().count(",") == 1  # seeds: the primaries
    for replica, primary in zip(replicas, cluster.primaries, strict=True):
        info = command(replica, "INFO", "replication")
        assert "role:slave" in info and f"master_port:{primary.port}" in info and "master_link_status:up" in info
    workload = Workload(keys=200, mix="get=90,set=10", ops=3000, duration=None, warmup=0, workers=1, seed=2)
    before = [_stat(n, "keyspace_hits") for n in replicas]
    outcome = run_target(cluster.url() + "?read_from_replicas=1", workload)
    assert outcome.status == "ok", outcome.reason
    assert outcome.backend.info["read_from_replicas"] is True
    served = [_stat(n, "keyspace_hits") - b for n, b in zip(replicas, before, strict=True)]
    assert all(s > 100 for s in served), served  # reads went round-robin to the replicas too


class _EndlessRedirects:
    """A fake cluster node: its slot map names itself for every slot, and every data command is
    answered with ``MOVED`` to itself — nodes that never agree, which must cost errors, not a loop."""

    def __init__(self) -> None:
        import socket
        import threading

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn) -> None:
        buf = b""
        with conn:
            while True:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
                while (parsed := _one_command(buf)) is not None:
                    args, buf = parsed
                    conn.sendall(self._answer(args))

    def _answer(self, args: list[bytes]) -> bytes:
        name = args[0].upper()
        if name == b"PING":
            return b"+PONG\r\n"
        if name == b"CLUSTER":
            host = b"127.0.0.1"
            return (b"*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$%d\r\n%s\r\n:%d\r\n$2\r\nid\r\n"
                    % (len(host), host, self.port))
        return b"-MOVED 42 127.0.0.1:%d\r\n" % self.port

    def close(self) -> None:
        self.listener.close()


def _one_command(buf: bytes) -> tuple[list[bytes], bytes] | None:
    """One RESP command (``*N`` of bulk strings) off the front of ``buf``, or None if incomplete."""
    if not buf.startswith(b"*") or b"\r\n" not in buf:
        return None
    head, rest = buf.split(b"\r\n", 1)
    args = []
    for _ in range(int(head[1:])):
        if b"\r\n" not in rest:
            return None
        size, rest = rest.split(b"\r\n", 1)
        n = int(size[1:])
        if len(rest) < n + 2:
            return None
        args.append(rest[:n])
        rest = rest[n + 2:]
    return args, rest


@pytest.mark.serial
def test_engine_gives_up_on_endless_redirects():
    from cachemark.engine import run_load

    fake = _EndlessRedirects()
    try:
        started = time.monotonic()
        result = run_load({"protocol": "resp2", "servers": [f"127.0.0.1:{fake.port}"], "cluster": True,
                           "connections": 2, "ops": 200, "prefill": False, "on_error": "continue",
                           "keys": {"count": 100, "prefix": "cm:x:"}, "mix": [{"op": "get", "weight": 1}]})
        # 4.5 s quiet, 4.7-5.7 s beside a busy loop (1,200 redirects through a Python fake, which load
        # slows): the bound was 10 s (1.7x), now 30 s (5x). Endless redirects never return at all (the
        # 300-s test timeout), so any finite bound tells them apart
        assert time.monotonic() - started < 30
    finally:
        fake.close()
    get = result["ops"]["get"]
    assert get["count"] == 200 and get["errors"] == {"server": 200}
    assert result["cluster"]["moved"] == 200 * 6  # five hops followed, the sixth refused
    assert any("redirected more than 5 times" in m for m in result["errors_sample"])
