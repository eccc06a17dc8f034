"""Facebook's ETC workload (workload/etc.py): 10⁶ draws against the fitted distributions' analytic
means and quantiles (the issue's figures: key size mean ≈ 36.2 B, value tail mean ≈ 344 B, gap mean
≈ 18.97 µs), and a run that uses it end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cachemark.engine import run_load
from cachemark.run.worker import arrival_gaps, key_table
from cachemark.workload import etc
from cachemark.workload.keys import key_lengths, key_name, length_index, parse_key_size
from cachemark.workload.values import ValueSizes
from conftest import run_cli

N = 1_000_000
QUANTILES = (0.1, 0.5, 0.9, 0.99)


def test_the_fitted_means_are_the_issues():
    assert etc.gev_mean(*etc.KEY_GEV) == pytest.approx(36.2, abs=0.05)
    assert etc.gp_mean(*etc.VALUE_TAIL_GP) == pytest.approx(344.07, abs=0.01)
    assert etc.gp_mean(*etc.GAP_GP_US) == pytest.approx(18.97, abs=0.01)


def test_key_sizes_match_the_gev_within_1_percent():
    drawn = etc.key_sizes(np.random.default_rng(1), N)
    assert drawn.mean() == pytest.approx(etc.gev_mean(*etc.KEY_GEV), rel=0.01)
    for q in QUANTILES:
        assert np.quantile(drawn, q) == pytest.approx(etc.gev_quantile(q, *etc.KEY_GEV), rel=0.01, abs=0.5)


def test_value_sizes_have_the_measured_head_and_the_pareto_tail():
    sizes = ValueSizes.parse("etc")
    assert str(sizes) == "etc" and sizes.allows(2) and sizes.allows(15) and not sizes.allows(-1)
    drawn = sizes.draw(np.random.default_rng(2), N)
    head = drawn < 15
    assert head.mean() == pytest.approx(sum(etc.VALUE_HEAD), abs=0.002)
    for size, p in enumerate(etc.VALUE_HEAD):
        assert (drawn == size).mean() == pytest.approx(p, abs=0.0015)
    tail = drawn[~head]
    assert tail.mean() == pytest.approx(etc.gp_mean(*etc.VALUE_TAIL_GP), rel=0.01)
    for q in QUANTILES:
        assert np.quantile(tail, q) == pytest.approx(etc.gp_quantile(q, *etc.VALUE_TAIL_GP), rel=0.01, abs=0.5)
    assert drawn.mean() == pytest.approx(etc.value_mean(), rel=0.01)


def test_gaps_have_the_pareto_shape_at_the_runs_rate():
    gaps = np.fromiter(arrival_gaps("etc", 18_969, np.random.default_rng(3)), dtype=np.int64, count=N) / 1000
    assert gaps.mean() == pytest.approx(etc.gp_mean(*etc.GAP_GP_US), rel=0.01)
    for q in QUANTILES:
        assert np.quantile(gaps, q) == pytest.approx(etc.gp_quantile(q, *etc.GAP_GP_US), rel=0.01)


def test_the_preset_runs_on_memcached_with_etc_sizes_and_gaps(tmp_path):
    result = run_cli("run", "facebook-etc", "--duration", "1s", "--warmup", "0", "--no-calibrate", "-o", "out.json",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads((tmp_path / "out.json").read_text())
    assert document["experiment"]["workload"]["value_size"] == "etc"
    assert document["experiment"]["workload"]["key_size"] == "etc"
    assert ("10,000 keys (uniform), key sizes as Facebook's ETC pool's, values as Facebook's ETC pool's (Atikoglu "
            "et al., SIGMETRICS 2012)") in " ".join(result.stdout.split())  # not "key sizes etc, values etc"
    for run in document["runs"]:
        assert run["status"] == "ok", run.get("reason")
        phase = run["phases"][0]
        assert phase["mode"] == "open"
        ops = phase["ops"]
        assert ops["get"]["count"] / ops["set"]["count"] == pytest.approx(30, rel=0.35)
        assert not ops["get"]["errors"] and not ops["set"]["errors"]  # every value verified, none refused


def test_keys_take_etc_sizes_from_one_table_both_paths_share():
    lengths = key_lengths("etc")
    assert len(lengths) == 4096
    drawn = np.array([lengths[length_index(i, len(lengths))] for i in range(N)])
    assert drawn.mean() == pytest.approx(etc.gev_mean(*etc.KEY_GEV), rel=0.01)  # ≈ 36.2 B
    for q in QUANTILES:
        assert np.quantile(drawn, q) == pytest.approx(etc.gev_quantile(q, *etc.KEY_GEV), rel=0.01, abs=0.5)
    # the vectors keyspace.rs tests too: key i is prefix + i, then "_" up to its length
    table = (3, 12, 20, 40)
    assert key_name("cm:x:", 0, table) == "cm:x:0" + "_" * 34
    assert key_name("cm:x:", 7, table) == "cm:x:7______"
    assert key_name("cm:x:", 123456789, table) == "cm:x:123456789"  # already longer: as it is
    assert length_index(2**64 - 1, 4096) == 3661
    assert list(key_table("p:", 50, (30,))) == [key_name("p:", i, (30,)) for i in range(50)]
    assert all(len(k) == 30 for k in key_table("p:", 50, (30,)))
    assert parse_key_size(None) is None and parse_key_size(" 64 ") == "64" and parse_key_size("ETC") == "etc"
    for bad in ("0", "251", "-3", "big"):
        with pytest.raises(Exception, match="key_size"):
            parse_key_size(bad)


def test_the_engine_writes_the_very_keys_the_python_workers_name(redis_server):
    import redis

    prefix, count, lengths = "cm:keysize-test:", 500, key_lengths("etc")
    result = run_load({"protocol": "resp2", "servers": [f"127.0.0.1:{redis_server.port}"], "connections": 2,
                       "keys": {"count": count, "prefix": prefix, "lengths": list(lengths)},
                       "values": {"sizes": [[20, 1]]}, "mix": [{"op": "get"}], "ops": 200, "prefill": True})
    client = redis.Redis(port=redis_server.port)
    try:
        written = {k.decode() for k in client.scan_iter(match=f"{prefix}*", count=1000)}
        assert written == {key_name(prefix, i, lengths) for i in range(count)}
        assert result["ops"]["get"]["hits"] == 200  # and the reads found them under the same names
    finally:
        client.delete(*[key_name(prefix, i, lengths) for i in range(count)])


def test_drivers_refuse_key_sizes_in_one_line(tmp_path):
    result = run_cli("run", "-t", "spawn:redis?client=node-ioredis", "--key-size", "40", "--ops", "10",
                     "--no-calibrate", cwd=tmp_path)
    assert result.returncode == 2 and "does not pad keys (key_size)" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    bad = run_cli("run", "-t", "memory://", "--key-size", "300", "--ops", "10", "--no-calibrate", cwd=tmp_path)
    assert bad.returncode == 2 and "key_size" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
