"""Sizing a real server: byte curves against libCacheSim, each server's model against the server,
and the chosen size replayed on spawned Redis and memcached (the measured get hit ratio within
0.02 of the predicted one, where objects × mean bytes misses it)."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace

import numpy as np
import pytest

from cachemark.analysis import requests as rq
from cachemark.analysis.server_model import memcached_chunks, memcached_item_size, replay_key
from cachemark.analysis.server_size import curves, simulate, size_server, verify


def _variable_sizes(n: int, objects: int, alpha: float, seed: int) -> rq.Requests:
    """Gets only (libCacheSim's model), Zipf ids, a fixed log-normal size per object."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(np.arange(1, objects + 1, dtype=np.float64) ** -alpha)
    ids = np.searchsorted(cdf / cdf[-1], rng.random(n)).astype(np.uint64)
    size_of = np.clip(rng.lognormal(6, 1.3, objects), 1, 200_000).astype(np.uint32)
    return rq._columns(np.arange(n), np.zeros(n), ids, np.zeros(n), size_of[ids.astype(np.int64)], np.zeros(n), "")


def _libcachesim_misses(cls, r: rq.Requests, capacity: int) -> int:  # noqa: ANN001
    import libcachesim

    cache, request, misses = cls(capacity), libcachesim.Request(), 0
    for obj, size in zip(r.ids.tolist(), r.value_size.tolist(), strict=True):
        request.obj_id, request.obj_size = obj, size
        misses += not cache.get(request)
    return misses


@pytest.mark.parametrize(("alpha", "seed"), [(0.8, 1), (1.1, 2)])
def test_byte_curves_equal_libcachesim_at_8_capacities(alpha, seed) -> None:
    libcachesim = pytest.importorskip("libcachesim")
    r = _variable_sizes(30_000, 4_000, alpha, seed)
    _, first = np.unique(r.ids, return_index=True)
    total = int(r.value_size[first].astype(np.int64).sum())
    capacities = [int(total * f) for f in (0.002, 0.005, 0.01, 0.03, 0.1, 0.2, 0.4, 0.8)]
    gets = len(r)
    for policy, cls in (("lru", libcachesim.LRU), ("fifo", libcachesim.FIFO), ("sieve", libcachesim.Sieve)):
        ours = simulate(r, policy, capacities, r.value_size)
        for capacity, hit in zip(capacities, ours, strict=True):
            theirs = _libcachesim_misses(cls, r, capacity)
            mine = round((1 - hit) * gets)
            if policy == "sieve":
                assert abs(mine - theirs) / gets <= 0.005, (policy, capacity, mine, theirs)
            else:
                assert mine == theirs, (policy, capacity)


def test_a_million_requests_size_by_bytes_and_objects_in_seconds() -> None:
    r = _variable_sizes(1_000_000, 100_000, 0.9, 3)
    started = time.process_time()  # CPU seconds of every thread: the machine's load does not count
    found = curves(r, ("lru", "fifo", "sieve"), points=16)
    took = time.process_time() - started
    assert len(found) == 6 and {c.unit for c in found} == {"bytes", "objects"}
    for c in found:  # a bigger cache never hits less (LRU is a stack policy; FIFO/SIEVE nearly so here)
        assert c.hit_ratios[-1] > c.hit_ratios[0] and all(0 <= h <= 1 for h in c.hit_ratios)
    assert took < 30, took  # ~6 CPU-seconds: 96 caches × 10⁶ requests


def test_the_ops_are_counted_as_the_application_sees_them() -> None:
    """Sets and deletes are not gets; a delete removes; a TTL expires on the trace's clock."""
    ops = [rq.SET, rq.GET, rq.DELETE, rq.GET, rq.GET, rq.GET]
    t = [0, 1, 2, 3, 4, 10_000_000]  # µs
    ttl = [5, 5, 0, 5, 5, 5]  # the fill at 3 µs expires 5 s later: the get at 10 s misses
    r = rq._columns(t, ops, [7] * 6, [10] * 6, [100] * 6, ttl, "")
    assert simulate(r, "lru", [1 << 20]) == [pytest.approx(2 / 4)]  # gets at 1 µs and 4 µs hit, of 4
    r = rq._columns(t, ops, [7] * 6, [10] * 6, [100] * 6, [0] * 6, "")
    assert simulate(r, "lru", [1 << 20]) == [pytest.approx(3 / 4)]  # without the TTL the last one hits


def test_memcached_slab_classes_are_the_binary_s_own() -> None:
    """``memcached -vv`` lists its classes at start-up (it runs a second, then is stopped)."""
    root = ["-u", "root"] if os.geteuid() == 0 else []
    listed = subprocess.run(["timeout", "1", "memcached", "-vv", "-m", "8", "-p", "0", "-U", "0", *root],
                            capture_output=True, text=True, timeout=10)
    lines = (listed.stdout + listed.stderr).splitlines()
    sizes = [int(line.split()[5]) for line in lines if line.startswith("slab class")]
    assert sizes == memcached_chunks()


def test_a_memcached_item_lands_in_the_class_the_model_says(spawn) -> None:
    from pymemcache.client.base import Client

    # a memcached of its own: on the worker's shared one, other tests' items fill slab classes too, and the
    # class asked for could hold one of theirs whatever class this item went to
    client = Client(("127.0.0.1", spawn("memcached").port))
    chunks = memcached_chunks()
    for key_size, value in ((20, 30), (17, 1000), (40, 5000)):
        key = replay_key(12345 + value, key_size)
        client.set(key, b"v" * value, noreply=False)
        item = int(memcached_item_size(np.array([key_size]), np.array([value]))[0])
        expected = next(i for i, c in enumerate(chunks) if c >= item) + 1
        slabs = client.stats("slabs")
        used = {int(k.split(b":")[0]) for k, v in slabs.items() if k.endswith(b":used_chunks") and int(v)}
        assert expected in used, (item, expected, used)
        client.delete(key)
    client.close()


def _trace() -> rq.Requests:
    # 300,000 requests over 120,000 objects in 15 s of the trace's clock: variable sizes (large objects
    # popular), 10 % sets, 2 % deletes, TTLs of 2–30 s on half the objects
    return rq.generate(requests=300_000, objects=120_000, rate=20_000)


@pytest.mark.parametrize(("server", "target"), [("redis", 0.6), ("memcached", 0.72)])
def test_the_chosen_size_holds_on_the_real_server(server, target) -> None:
    r = _trace()
    sized = size_server(r, server, target=target, policies=())
    assert sized.predicted >= target and sized.spawn_url.startswith(f"spawn:{server}?")
    check = verify(sized, r)
    assert check.replay_counted == pytest.approx(check.measured, abs=1e-9)  # the server's counters agree
    assert check.within, (check.summary(), check.notes)
    # objects × mean bytes (every request but deletes an access, no base memory) falls short of it
    assert sized.naive_predicted < target - 0.025, (sized.naive_bytes, sized.naive_predicted)


def test_redis_lfu_is_simulated_and_its_size_holds_on_the_real_server(cachemark, tmp_path) -> None:
    """allkeys-lfu sized by its own simulation (a log counter decaying by the minute), configured on a
    spawned Redis evicting by LFU: measured within 0.02. Simulated as LRU, the same setting predicts
    further from what the server gave: the policy matters (here LFU needs ~15 % less memory)."""
    r = _trace()
    lfu = size_server(r, "redis", target=0.6, policies=(), eviction="allkeys-lfu")
    assert "maxmemory_policy=allkeys-lfu" in lfu.spawn_url and "allkeys-lfu" in lfu.model.notes[0]
    check = verify(lfu, r)
    assert check.within, (check.summary(), check.notes)
    charged = lfu.model.charge(r.key_size, r.value_size, r.ttl_s)
    as_lru = simulate(r, "redis", [lfu.model.capacity(lfu.setting)], sizes=charged, model=lfu.model)[0]
    assert abs(as_lru - check.measured) > abs(lfu.predicted - check.measured), (as_lru, lfu.predicted, check)
    lru = size_server(r, "redis", target=0.6, policies=(), model=replace(lfu.model, eviction="allkeys-lru"))
    assert lfu.setting < 0.95 * lru.setting, (lfu.setting, lru.setting)
    # a policy the model does not simulate: one line, exit 2, before any work
    result = cachemark("size", "--keys", "100", "--redis-policy", "volatile-lru", cwd=tmp_path)
    assert result.returncode == 2 and "--redis-policy 'volatile-lru': one of allkeys-lru, allkeys-lfu" in result.stderr


def test_a_redis_too_small_to_take_the_replays_writes_is_one_line_not_a_crash() -> None:
    """A size within a few KB of Redis's base memory: the replay's own buffers put used memory over
    maxmemory with nothing left to evict, and Redis refuses the writes (OOM). That was a crash."""
    from cachemark.errors import UserError

    r = rq.generate(requests=20_000, objects=5_000, rate=20_000)
    sized = size_server(r, "redis", target=0.3, policies=())
    with pytest.raises(UserError, match=r"refused the replay's writes .* 4,096 B beyond its [\d,]+ B base"):
        verify(sized, r, setting=sized.model.base_bytes + 4096)


def test_a_server_that_stops_during_the_replay_is_one_line(spawn) -> None:
    """The replay's own RESP client: a server gone mid-replay is the user's one line, not a crash."""
    from cachemark.analysis.server_replay import _Redis
    from cachemark.errors import UserError

    server = spawn("redis")
    client = _Redis(server.port)
    assert client.gets([b"k1", b"k2"]) == [False, False]
    client.writes([(b"k1", 10, 0.0)], [])
    assert client.gets([b"k1"]) == [True]  # the write's reply read first, then the get's
    server.stop()
    with pytest.raises(UserError, match="the server closed its connection during the replay"):
        client.gets([b"k1"])


def test_size_names_byte_capacities_verifies_and_carries_them_in_json(tmp_path, cachemark) -> None:
    import json

    trace = rq.write_trace(rq.generate(requests=60_000, objects=30_000, rate=15_000), tmp_path / "g.trace")
    result = cachemark("size", str(trace), "--sizes", "1MiB,4MiB", "--policy", "lru,fifo,sieve", "--hit-ratio",
                       "0.5", "--json", "--verify", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert "get hits" in document["counted"] and document["sizes"] == [1 << 20, 4 << 20]
    points = {p["bytes"]: p for p in document["byte_curve"]}
    r = rq.from_trace(trace)
    for size in (1 << 20, 4 << 20):
        for policy in ("lru", "fifo", "sieve"):
            entry = points[float(size)][policy]
            assert entry["hit_ratio"] + entry["miss_ratio"] == pytest.approx(1)
            # the hit ratio of gets under the trace's ops, as the simulation gives it on its own
            assert entry["hit_ratio"] == pytest.approx(simulate(r, policy, [size])[0], abs=1e-12)
    servers = {s["server"]: s for s in document["servers"]}
    assert servers["redis"]["param"] == "maxmemory" and servers["memcached"]["param"] == "memory_mb"
    assert servers["redis"]["spawn_url"].startswith("spawn:redis?maxmemory=")
    assert servers["redis"]["predicted_hit_ratio"] >= 0.5
    # --verify: each server's size replayed on a spawned server, measured beside predicted
    checked = {v["server"]: v for v in document["verified"]}
    assert set(checked) == {"redis", "memcached"}
    for v in checked.values():
        # the tight check is test_the_chosen_size_holds_on_the_real_server; here a Redis of ~2.7 MB, where
        # ~0.015 of hit ratio goes to memory the model does not attribute (docs/sizing.md)
        assert v["within"] == (abs(v["measured_hit_ratio"] - v["predicted_hit_ratio"]) <= 0.02), v
        assert abs(v["difference"]) <= 0.04, v
    bad = cachemark("size", str(trace), "--sizes", "lots", "--no-measure", cwd=tmp_path)
    assert bad.returncode == 2 and "--sizes" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_the_in_process_lru_is_sized_in_entries_and_holds() -> None:
    """memory://?max_entries: an LRU of entries whose expired entries keep their place until read."""
    r = rq.generate(requests=60_000, objects=20_000, rate=10_000, seed=4)
    sized = size_server(r, "memory", target=0.6, policies=())
    assert sized.param == "max_entries" and sized.spawn_url == f"memory://?max_entries={sized.setting}"
    check = verify(sized, r)
    assert check.within, (check.summary(), check.notes)
