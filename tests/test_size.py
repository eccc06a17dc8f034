"""How big must the cache be: miss-ratio curves against analytic truth and the field's reference simulator.

Ground truth: Che's approximation for LRU under independent Zipf requests (the issue's table of
hit ratios), libCacheSim's LRU / FIFO / SIEVE on the same request stream, a plain LRU for
SHARDS at scale, and the servers' own memory accounting for bytes per item.
"""

from __future__ import annotations

import numpy as np
import pytest

from cachemark.analysis.che import lru_hit_ratio, zipf_popularity
from cachemark.analysis.mrc import lru_curves, policy_curve, workload_stream
from cachemark.analysis.sizing import answers, mixed_latency
from cachemark.measure.histogram import Histogram

# (α, share of 100,000 keys) -> LRU hit ratio, from the issue
CHE_TABLE = {(0.8, 0.01): 0.204, (0.8, 0.10): 0.469, (0.99, 0.01): 0.489, (0.99, 0.10): 0.725,
             (1.2, 0.01): 0.795, (1.2, 0.10): 0.918}


@pytest.mark.parametrize(("alpha", "share"), sorted(CHE_TABLE))
def test_che_approximation_reproduces_the_published_hit_ratios(alpha, share) -> None:
    got = lru_hit_ratio(zipf_popularity(100_000, alpha), 100_000 * share)
    assert got == pytest.approx(CHE_TABLE[(alpha, share)], abs=0.0006)


@pytest.mark.parametrize("alpha", [0.8, 0.99, 1.2])
def test_the_simulated_lru_curve_of_a_zipf_workload_matches_che_within_001(alpha) -> None:
    keys, requests = 100_000, 4_000_000
    curve, _ = lru_curves(workload_stream(keys, f"zipf:{alpha}", 100, requests, seed=3), warmup=requests // 2)
    for share in (0.01, 0.10):
        simulated = curve.hit_ratio_at(keys * share)
        assert simulated == pytest.approx(CHE_TABLE[(alpha, share)], abs=0.01), share


def _skewed_ids(n: int, objects: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random(n) ** 3 * objects).astype(np.uint64)


def _libcachesim_miss_ratio(cls, ids: np.ndarray, capacity: int) -> float:
    cache = cls(capacity)
    import libcachesim

    misses = 0
    for obj in ids.tolist():
        request = libcachesim.Request()
        request.obj_id, request.obj_size = obj, 1
        if not cache.get(request):
            misses += 1
    return misses / len(ids)


@pytest.mark.parametrize("share", [0.01, 0.10])
def test_a_live_run_against_an_lru_memory_cache_matches_che_within_001(share) -> None:
    """The measured hit ratio of cache-aside (fetch: a miss writes the key) on ``memory://?max_entries``,
    an LRU of 1 % / 10 % of 100,000 Zipf(0.99) keys, after a warm-up that fills it."""
    from cachemark.run.runner import run_target
    from cachemark.spec import Workload

    workload = Workload(keys=100_000, key_dist="zipf:0.99", value_size=100, mix={"fetch": 1}, origin="fixed:0ms",
                        workers=1, prefill=False, warmup_ops=150_000, ops=150_000, verify_reads=0)
    outcome = run_target(f"memory://?max_entries={int(100_000 * share)}", workload, sample_server=False)
    assert outcome.status == "ok", outcome.reason
    fetch = outcome.phases[0]["ops"]["fetch"]
    assert fetch["hits"] / fetch["count"] == pytest.approx(CHE_TABLE[(0.99, share)], abs=0.01)


def test_lru_fifo_and_sieve_equal_libcachesim_on_the_same_stream() -> None:
    libcachesim = pytest.importorskip("libcachesim")
    ids = _skewed_ids(60_000, 5_000, 1)
    sizes = [50, 500, 2_000]
    from cachemark._engine import StackDistances

    distances = StackDistances(1.0)
    distances.feed(ids.astype("<u8").tobytes())
    ours = distances.miss_ratios_by_objects([float(c) for c in sizes])
    for capacity, mine in zip(sizes, ours, strict=True):
        assert mine == pytest.approx(_libcachesim_miss_ratio(libcachesim.LRU, ids, capacity), abs=1e-12)
    for name, cls in (("fifo", libcachesim.FIFO), ("sieve", libcachesim.Sieve)):
        curve = policy_curve(name, [(ids[:30_000], None), (ids[30_000:], None)], [float(c) for c in sizes])
        for capacity, mine in zip(sizes, curve.miss_ratios, strict=True):
            assert mine == pytest.approx(_libcachesim_miss_ratio(cls, ids, capacity), abs=1e-12), (name, capacity)


def test_shards_at_one_percent_is_within_001_of_exact_on_10m_requests() -> None:
    from cachemark._engine import StackDistances

    exact, sampled = StackDistances(1.0), StackDistances(0.01, 7)
    rng = np.random.default_rng(5)
    for _ in range(10):
        ids = (rng.random(1_000_000) ** 2 * 1_000_000).astype("<u8").tobytes()
        exact.feed(ids)
        sampled.feed(ids)
    sizes = [float(x) for x in np.linspace(25_000, 1_000_000, 40)]
    a = np.array(exact.miss_ratios_by_objects(sizes))
    b = np.array(sampled.miss_ratios_by_objects(sizes))
    assert exact.requests == 10_000_000
    assert float(np.mean(np.abs(a - b))) < 0.01
    assert sampled.objects == pytest.approx(exact.objects, rel=0.1)


def test_answers_turn_a_curve_into_objects_and_bytes() -> None:
    from cachemark.analysis.footprint import Footprint
    from cachemark.analysis.mrc import Curve

    curve = Curve("lru", "objects", [10.0, 100.0, 1000.0], [0.5, 0.2, 0.05], 10_000, 1000.0)
    redis = Footprint("redis", "7", 100, 200.0, 150.0)
    (at80, at95, at99) = answers(curve, [redis], (0.8, 0.95, 0.99))
    assert at80.objects == pytest.approx(100.0)
    assert at95.objects == pytest.approx(1000.0)
    assert at95.bytes_by_server["redis"] == pytest.approx(200_000.0)
    assert at99.objects is None  # 5 % of requests miss even at the largest size


def test_mixed_latency_weights_the_hit_and_miss_histograms() -> None:
    hit = Histogram.of([100_000] * 1000)  # 100 µs
    miss = Histogram.of([1_000_000] * 1000)  # 1 ms
    mixed = mixed_latency(hit, miss, 0.9)
    assert mixed.mean_us == pytest.approx(0.9 * 100 + 0.1 * 1000, rel=0.01)
    assert mixed.p99_us == pytest.approx(1000, rel=0.01)  # 10 % of gets take the miss path
    assert mixed_latency(hit, miss, 0.995).p99_us == pytest.approx(100, rel=0.01)


def test_bytes_per_item_are_measured_on_real_servers() -> None:
    from cachemark.analysis.footprint import memcached_footprint, redis_footprint

    sizes = np.full(100, 1000)
    for measure in (redis_footprint, memcached_footprint):
        fp = measure(sizes, key_size=16, items=3000)
        # the payload is 16 + 1000 B; each server adds tens to a few hundred bytes of its own
        assert fp.payload_per_item == pytest.approx(1016, abs=1)
        assert 20 < fp.overhead_per_item < 400, fp


def test_the_size_command_answers_for_a_synthetic_workload(tmp_path, cachemark) -> None:
    result = cachemark("size", "--keys", "20000", "--key-dist", "zipf:0.99", "--value-size", "1000",
                       "--requests", "1000000", "--policy", "lru,sieve", "--hit-ratio", "0.5,0.9", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "How big must the cache be" in out and "Redis maxmemory" in out and "memcached -m" in out
    assert "Che (LRU)" in out and "SIEVE" in out
    che_at_1pct = lru_hit_ratio(zipf_popularity(20_000, 0.99), 200)
    row = next(line for line in out.splitlines() if line.strip().startswith("200 "))
    lru = float(row.split()[2])
    assert lru == pytest.approx(che_at_1pct, abs=0.015)
    assert f"{che_at_1pct:.3f}" in row


def test_the_size_command_refuses_bad_input_in_one_line(tmp_path, cachemark) -> None:
    for args, message in ((["--hit-ratio", "95"], "between 0 and 1"), (["--policy", "lru,arc"], "choose from"),
                          (["--requests", "0"], "--requests")):
        result = cachemark("size", "--keys", "100", "--no-measure", *args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_size_command_reads_a_trace_and_equals_libcachesim(tmp_path, cachemark) -> None:
    libcachesim = pytest.importorskip("libcachesim")
    ids = _skewed_ids(40_000, 3_000, 9)
    records = np.zeros(len(ids), dtype=[("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    records["t"], records["id"], records["size"], records["next"] = np.arange(len(ids)), ids, 100, -1
    path = tmp_path / "t.oracleGeneral"
    path.write_bytes(records.tobytes())
    result = cachemark("size", str(path), "--format", "oracle", "--no-measure", "--hit-ratio", "0.5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "trace t.oracleGeneral: 40,000 requests" in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.strip().startswith("300 "))
    shown = float(row.split()[2])
    truth = 1 - _libcachesim_miss_ratio(libcachesim.LRU, ids, 300)
    assert shown == pytest.approx(truth, abs=0.0015)  # exact, up to the 3 decimals shown
