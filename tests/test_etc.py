"""Facebook's ETC workload (workload/etc.py): 10⁶ draws against the fitted distributions' analytic
means and quantiles (the issue's figures: key size mean ≈ 36.2 B, value tail mean ≈ 344 B, gap mean
≈ 18.97 µs), and a run that uses it end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from cachemark.run.worker import arrival_gaps
from cachemark.workload import etc
from cachemark.workload.values import ValueSizes

sys.path.insert(0, str(Path(__file__).parent))
from conftest import run_cli  # noqa: E402

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
    for run in document["runs"]:
        assert run["status"] == "ok", run.get("reason")
        phase = run["phases"][0]
        assert phase["mode"] == "open"
        ops = phase["ops"]
        assert ops["get"]["count"] / ops["set"]["count"] == pytest.approx(30, rel=0.35)
        assert not ops["get"]["errors"] and not ops["set"]["errors"]  # every value verified, none refused
