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
    fetch = outcome.phases[0].ops["fetch"]
    assert fetch.hits / fetch.count == pytest.approx(CHE_TABLE[(0.99, share)], abs=0.01)


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


SHARES = (0.001, 0.01, 0.05, 0.1, 0.25)


def _zipf_ids(n: int, objects: int, alpha: float, seed: int) -> np.ndarray:
    """``n`` independent Zipf(alpha) requests over ``objects`` ids in a random order of popularity."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(np.arange(1, objects + 1, dtype=np.float64) ** -alpha)
    ranks = np.minimum(np.searchsorted(cdf / cdf[-1], rng.random(n)), objects - 1)
    return rng.permutation(objects).astype(np.uint64)[ranks]


def _scan_mix_ids(n: int, objects: int, seed: int, scan: int = 2_000) -> np.ndarray:
    """Zipf(1.0) requests over ``objects`` (75 %), one-hit wonders (15 %), and scans of ``scan``
    consecutive ids (10 %) from a space of 4 × ``objects``, so that some are scanned again."""
    rng = np.random.default_rng(seed + 1)
    scans = n // 10 // scan
    wonders = n * 15 // 100
    base = np.concatenate([_zipf_ids(n - wonders - scans * scan, objects, 1.0, seed),
                           np.arange(wonders, dtype=np.uint64) + np.uint64(1 << 40)])
    rng.shuffle(base)
    starts = rng.integers(0, 4 * objects - scan, scans)
    cuts = np.sort(rng.integers(0, len(base) + 1, scans))
    pieces = np.split(base, cuts)
    runs = [np.arange(s, s + scan, dtype=np.uint64) + np.uint64(1 << 41) for s in starts]
    return np.concatenate([x for pair in zip(pieces, [*runs, None], strict=True) for x in pair if x is not None])


def _trace(kind: str, n: int) -> np.ndarray:
    objects = n // 10
    return _scan_mix_ids(n, objects, 7) if kind == "mix" else _zipf_ids(n, objects, float(kind[5:]), 7)


def _chunks(ids: np.ndarray) -> list[tuple[np.ndarray, None]]:
    return [(ids[i:i + (1 << 20)], None) for i in range(0, len(ids), 1 << 20)]


def _shards_against_exact(ids: np.ndarray, rates: tuple[float, ...], **stacks: int) -> dict[float, list]:
    """Per rate: (share, size, sampled hit ratio or None, exact hit ratio, standard error) at SHARES."""
    from cachemark._engine import StackDistances

    exact = StackDistances(1.0)
    for chunk, _ in _chunks(ids):
        exact.feed(chunk.astype("<u8").tobytes())
    out = {}
    for rate in rates:
        curve, _ = lru_curves(_chunks(ids), sample_rate=rate, seed=11, shares=SHARES, **stacks)
        assert not curve.objects_exact and curve.objects == pytest.approx(exact.objects, rel=0.03)
        sizes = [max(1.0, float(round(curve.objects * share))) for share in SHARES]
        truth = [1 - m for m in exact.miss_ratios_by_objects(sizes)]
        out[rate] = [(share, size, curve.hit_ratio_at(size), t, curve.error_at(size))
                     for share, size, t in zip(SHARES, sizes, truth, strict=True)]
    return out


@pytest.mark.parametrize(("kind", "requests"), [("zipf:0.8", 10**6), ("zipf:1.0", 10**6), ("zipf:1.2", 10**6),
                                                ("mix", 10**6), ("zipf:0.8", 10**7), ("mix", 10**7)])
def test_shards_is_within_001_of_exact_at_every_share_or_says_not_resolved(kind, requests) -> None:
    """Sampled at the rates ``size --sample-rate`` is used with, the LRU hit ratio at 0.1 %, 1 %, 5 %,
    10 % and 25 % of the objects is within 0.01 of the exact curve's, or is None ("not resolved")."""
    checked = _shards_against_exact(_trace(kind, requests), (0.1, 0.01, 0.001))
    for rate, points in checked.items():
        for share, size, hit, truth, error in points:
            if hit is not None:
                assert hit == pytest.approx(truth, abs=0.01), (rate, share, size, error)
        # the exact stack answers the smallest sizes (0.1 %: 100 or 3,000 objects); here the samples
        # resolve most of the rest (three standard errors within 0.01)
        assert points[0][2] is not None and sum(hit is not None for _, _, hit, _, _ in points) >= 4, (rate, points)


def test_the_rate_asked_for_answers_beyond_the_denser_samples() -> None:
    """With small stacks (an exact one of 1,000 objects, denser samples of 1,000 sampled objects), the
    sample at the rate asked for answers the larger sizes: within 0.01 where it is resolved, "not
    resolved" where its standard error is too wide — as SHARDS alone is on this trace (10,000 of the
    objects sampled at 0.1: a few hundred popular ones carry most of the hits at 5–25 %)."""
    checked = _shards_against_exact(_trace("zipf:0.8", 10**6), (0.1, 0.01, 0.001), near=1_000, level=1_000)
    unresolved = 0
    for rate, points in checked.items():
        for share, size, hit, truth, error in points:
            if hit is None:
                unresolved += 1
                assert error > 0.01 / 3, (rate, share)
            else:
                assert hit == pytest.approx(truth, abs=0.01), (rate, share, size, error)
        assert points[0][2] is not None and points[1][2] is not None  # 100 and 1,000 objects: exact
    assert unresolved > 0


def test_a_sampled_size_the_sample_does_not_resolve_says_so_everywhere() -> None:
    """Terminal, Markdown and JSON: "not resolved" instead of a figure (null with the reason in JSON),
    and estimated counts marked "≈"."""
    import io

    from rich.console import Console

    from cachemark.report.blocks import to_markdown, to_rich
    from cachemark.report.size_report import CURVE_SHARES, answer_block, curve_block, size_document

    ids = _trace("zipf:0.8", 10**5)
    curve, _ = lru_curves(_chunks(ids), sample_rate=0.01, shares=CURVE_SHARES, near=100, level=100)
    sized = answers(curve, [], (0.3, 0.5, 0.7))
    assert any(not a.resolved and a.objects is None for a in sized)
    blocks = [answer_block(curve, sized, [], "generated"), curve_block([curve])]
    console = Console(file=io.StringIO(), width=150)
    for block in blocks:
        to_rich(block, console)
    for text in (console.file.getvalue(), "\n".join(to_markdown(b) for b in blocks)):
        assert "not resolved" in text and "≈" in text
        assert "beyond the 100 objects counted exactly" in text
    document = size_document([curve], sized, [], "generated")
    assert document["objects_estimated"] is True and document["exact_up_to_objects"] == 100
    unresolved = [a for a in document["answers"] if a["objects"] is None]
    assert unresolved and all(a["reason"].startswith("not resolved") for a in unresolved)
    points = [p["lru"] for p in document["curve"]]
    assert any(p["hit_ratio"] is None and p["reason"].startswith("not resolved") for p in points)
    assert points[0]["hit_ratio"] is not None and points[0]["std_error"] == 0  # 0.1 %: 40 objects, exact


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
        # the servers' own memory counters over 3,000 items, not a timing: load cannot move them
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


def test_the_size_command_marks_a_sampled_trace_s_estimates(tmp_path, cachemark) -> None:
    import json

    ids = _zipf_ids(200_000, 60_000, 0.9, 3)
    records = np.zeros(len(ids), dtype=[("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    records["t"], records["id"], records["size"], records["next"] = np.arange(len(ids)), ids, 100, -1
    path = tmp_path / "t.oracleGeneral"
    path.write_bytes(records.tobytes())
    args = ("size", str(path), "--format", "oracle", "--no-measure", "--sample-rate", "0.01", "--hit-ratio", "0.5,0.75")
    result = cachemark(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "requests over ≈ " in result.stdout and "exact up to 16,384 objects" in result.stdout
    result = cachemark(*args, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["objects_estimated"] is True and document["sample_rate"] == 0.01
    exact = lru_curves(_chunks(ids))[0]
    assert document["objects"] == pytest.approx(exact.objects, rel=0.03)
    for point in document["curve"]:
        truth = exact.hit_ratio_at(point["size"])
        lru = point["lru"]
        assert lru["hit_ratio"] is None or lru["hit_ratio"] == pytest.approx(truth, abs=0.01), point
        assert lru["estimated"] is (point["size"] > 16_384)
    at75 = document["answers"][1]  # ~19,000 objects: beyond the exact stack
    assert at75["estimated"] is True and at75["objects"] > 16_384
    assert at75["objects"] == pytest.approx(exact.size_for(0.75), rel=0.05)
