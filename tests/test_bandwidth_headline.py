"""Preset 001 (redis-bandwidth-sweep) through the real command line: its headline is the
reference's own table (per value size: Mbps out p90/p70, server CPU % p90/p50, ops/s), every
printed figure is the saved results' arithmetic, and ``cachemark thresholds`` counts bytes out
by default and warns when its maximum came from a cache that evicted or mostly missed.

Real spawned redis-servers driven by the native engine; small scale (two sweep points, 1–2 s).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cachemark.report.blocks import to_markdown
from cachemark.report.data import LOW_SAMPLES_MARK, phase_rows
from cachemark.report.thresholds import LOW_HIT_RATIO, bandwidth_headline, compute
from cachemark.results import as_model

pytestmark = pytest.mark.alone  # timed: runs alone (conftest.py)

pytest_plugins = ["report_fixtures"]
TITLE = "Bandwidth and server CPU by value size (B) (reference 001)"
SIZES = ("1024", "100000")


@pytest.fixture(scope="module")
def preset_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    from conftest import run_cli

    cwd = tmp_path_factory.mktemp("bw")
    result = run_cli("run", "redis-bandwidth-sweep", "--sweep", f"value_size={','.join(SIZES)}",
                     "--network", "same-host", "--duration", "2s", "--warmup", "0", "--keys", "1000",
                     "--no-calibrate", "-o", "bw.json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return cwd, result.stdout, json.loads((cwd / "bw.json").read_text())


def _headline_rows(stdout: str) -> dict[str, list[str]]:
    """The headline table's rows as printed: value size → [Mbps p90, Mbps p70, CPU p90, CPU p50, ops/s]."""
    head, _, _ = stdout.partition("cachemark: redis-bandwidth-sweep")  # the headline comes first
    rows = {}
    for line in head.splitlines():
        match = re.match(r"^\s+local-redis\s+(\d+)\s+(.*)$", line)
        if match:
            cells = re.findall(r"[\d,.]+(?: " + LOW_SAMPLES_MARK + ")?", match.group(2))
            rows[match.group(1)] = cells
    return rows


def _mbps(value: float) -> str:
    return f"{value:,.1f}"


def test_preset_prints_the_reference_table_first(preset_run):
    _, stdout, document = preset_run
    assert document["experiment"]["headline"] == "bandwidth"
    assert stdout.index(TITLE) < stdout.index("cachemark: redis-bandwidth-sweep")  # before the generic table
    for column in ("value size (B)", "Mbps out p90", "Mbps out p70", "CPU % p90", "CPU % p50", "ops/s"):
        assert column in stdout
    rows = _headline_rows(stdout)
    assert list(rows) == list(SIZES)  # one row per sweep point, in size order
    assert all(len(cells) == 5 for cells in rows.values())
    assert "alarm thresholds at 100/90/80 %" in stdout
    assert "warning:" not in stdout.partition("cachemark: redis-bandwidth-sweep")[0]  # prefilled, fits: none


def test_headline_figures_are_the_results_arithmetic(preset_run):
    _, stdout, document = preset_run
    rows = _headline_rows(stdout)
    for run in document["runs"]:
        assert run["status"] == "ok"
        (phase,) = run["phases"]
        server = phase["server"]
        size = run["sweep"]["value_size"]
        mark = f" {LOW_SAMPLES_MARK}" if server["low_samples"] else ""
        p90, p70, cpu90, cpu50, ops = rows[size]
        # bytes out only (reference 001's NetworkBytesOut), not in + out
        assert p90 == _mbps(server["net_out_mbps_p90"]) + mark
        assert p70 == _mbps(server["net_out_mbps_p70"]) + mark
        assert server["net_out_mbps_p70"] <= server["net_out_mbps_p90"] < server["net_mbps_p90"]
        assert cpu90 == f"{server['cpu_pct_p90']:.1f}{mark}"
        assert cpu50 == f"{server['cpu_pct_p50']:.1f}{mark}"
        assert server["cpu_pct_p50"] <= server["cpu_pct_p90"]
        count = sum(op["count"] for op in phase["ops"].values())
        assert ops == f"{count / phase['wall_s']:,.0f}"  # ops/s = count ÷ wall
        # the per-second figures are percentiles of the server's own 1-s intervals
        full = [s["net_out_mbps"] for a, s in zip(server["samples"], server["samples"][1:], strict=False)
                if s["t"] - a["t"] >= 0.5 and "net_out_mbps" in s]
        assert min(full) <= server["net_out_mbps_p90"] <= max(full)
    # bigger values move more bytes out per second
    assert float(rows["100000"][0].split()[0].replace(",", "")) > float(rows["1024"][0].split()[0].replace(",", ""))


def test_threshold_line_and_markdown_agree_with_the_thresholds_command(preset_run):
    cwd, stdout, document = preset_run
    from conftest import run_cli

    best = max(run["phases"][0]["server"]["net_out_mbps_p90"] for run in document["runs"])
    line = next(x for x in stdout.splitlines() if "alarm thresholds" in x)
    assert f"({_mbps(best)} Mbps at value_size=100000)" in line
    assert f"100 %: {int(best * 1e6 / 8):,} B/s" in line
    # the same block in Markdown (the report renders the same figures)
    (block,) = bandwidth_headline(as_model(document))
    markdown = to_markdown(block)
    assert f"| local-redis | 1024 | {_headline_rows(stdout)['1024'][0]} |" in markdown

    out = run_cli("thresholds", "bw.json", cwd=cwd)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    target = result["targets"]["local-redis"]
    assert result["direction"] == "out" and result["warnings"] == []
    assert target["max"] == pytest.approx(best * 1e6 / 8)
    assert target["thresholds"]["100"] == int(best * 1e6 / 8)
    both = json.loads(run_cli("thresholds", "bw.json", "--direction", "both", cwd=cwd).stdout)
    best_both = max(run["phases"][0]["server"]["net_mbps_p90"] for run in document["runs"])
    assert both["direction"] == "in + out"
    assert both["targets"]["local-redis"]["max"] == pytest.approx(best_both * 1e6 / 8)
    bad = run_cli("thresholds", "bw.json", "--direction", "up", cwd=cwd)
    assert bad.returncode == 2 and "--direction" in bad.stderr


def test_behind_the_reference_nodes_link_bandwidth_plateaus_and_cpu_falls(tmp_path, cachemark):
    # The preset's second profile is a 750 Mbit/s link every connection shares (reference 001's
    # cache.m4.xlarge plateaued at ~735 Mbps): there the 100 kB point sits at the cap, far under
    # loopback's, with the server's CPU lower than at 1 kB — the author's regime, beside loopback's.
    result = cachemark("run", "redis-bandwidth-sweep", "--sweep", f"value_size={','.join(SIZES)}",
                       "--duration", "2s", "--warmup", "0", "--keys", "1000", "--no-calibrate", "-o", "bw.json",
                       cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "bw.json").read_text())
    points = {(run["network"]["profile"], run["sweep"]["value_size"]): run["phases"][0]["server"]
              for run in document["runs"]}
    assert sorted({network for network, _ in points}) == ["0ms,link=750mbit", "same-host"]
    linked, loopback = points[("0ms,link=750mbit", "100000")], points[("same-host", "100000")]
    # at the link, bytes out only (the link is each way): 673-718 Mbps beside the suite's parallel pass, so
    # 450 is 1.5x below and 862 (the link + 15 %) 1.2x above; loopback gave 3,130-7,163, 4.7x and more
    assert 450 < linked["net_out_mbps_p90"] < 750 * 1.15
    assert loopback["net_out_mbps_p90"] > 2 * linked["net_out_mbps_p90"]
    # the server's CPU at the cap: 10.3-11.2 % against 12.9-18.9 % at 1 kB (1.3x at the closest: the test's
    # narrowest margin, and why it runs alone)
    assert linked["cpu_pct_p50"] < points[("0ms,link=750mbit", "1024")]["cpu_pct_p50"]
    (block,) = bandwidth_headline(as_model(document))
    assert block.columns[:3] == ["target", "network", "value size (B)"]
    assert [row[1] for row in block.rows] == ["same-host", "same-host", "0ms,link=750mbit", "0ms,link=750mbit"]
    # 001's thresholds as the author computed them: from the node's maximum (the link-capped profile),
    # not loopback's, which is no NIC's limit; the note says what was left out
    result = compute([as_model(document)], "bandwidth", [100, 90, 80])
    (target,) = result.targets.values()
    assert target.network == "0ms,link=750mbit"
    assert target.max_mbps == pytest.approx(max(p["net_out_mbps_p90"] for (network, _), p in points.items()
                                                   if network == "0ms,link=750mbit"))
    assert "same-host left out (loopback: a level for no NIC)" in target.note
    assert any("0ms,link=750mbit, value_size=" in n and "same-host left out" in n for n in block.notes)
    # the % table: each value size against its own baseline (same-host at that size), under its own column
    from cachemark.report.table import network_baseline_table

    columns, rows, left = network_baseline_table(as_model(document))
    assert columns[:4] == ["backend", "network", "value size (B)", "op"] and left == 4
    assert sum(row[-1] == "baseline" for row in rows) == 2 * len(SIZES)  # get and set at each size


def test_html_has_cpu_and_bytes_out_charts_against_value_size(preset_run):
    _, _, document = preset_run
    from cachemark.report.html import render_html

    html = render_html(as_model(document))
    assert TITLE in html
    assert "sweep server net out Mbps p90 (bytes out) vs value_size" in html
    assert "sweep server CPU % p90 (of one core) vs value_size" in html
    assert html.count('id="server-sweep-') == 2


def test_thresholds_warn_when_the_maximum_evicted_and_missed(tmp_path, cachemark):
    # a real server too small for the larger values: 2,000 × 10 kB does not fit in 12 MB
    (tmp_path / "e.toml").write_text("""
name = "bw-evict"
targets = ["spawn:redis?client=engine&connections=8&maxmemory=12mb"]
labels = ["small-redis"]
headline = "bandwidth"
[sweep]
value_size = [1024, 10000]
[workload]
keys = 2000
key_dist = "uniform"
mix = { get = 50, set = 50 }
warmup = 0
duration = "1s"
""")
    result = cachemark("run", "e.toml", "--no-calibrate", "-o", "ev.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "ev.json").read_text())
    servers = {r["sweep"]["value_size"]: r["phases"][0]["server"] for r in document["runs"]}
    assert servers["1024"]["evictions"] == 0 and servers["10000"]["evictions"] > 0
    head = result.stdout.partition("cachemark: bw-evict")[0]
    assert "warning: small-redis [value_size=10000]: the server evicted" in head
    assert "warning: small-redis [value_size=1024]" not in head

    out = cachemark("thresholds", "ev.json", "-f", "cloudformation", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    warnings = [x for x in out.stdout.splitlines() if x.startswith("# warning:")]
    assert any("the maximum came from small-redis [value_size=10000]" in w and "evicted" in w for w in warnings)
    assert all("\n" not in w for w in warnings)
    assert yaml.safe_load(out.stdout)["Mappings"]["CacheBandwidthThresholds"]["small-redis"]["100"] > 0
    # written to a file, the warnings still reach the user (stderr), one line each
    to_file = cachemark("thresholds", "ev.json", "-o", "t.json", cwd=tmp_path)
    assert to_file.returncode == 0
    assert sum(line.startswith("warning:") for line in to_file.stderr.splitlines()) == \
        len(json.loads((tmp_path / "t.json").read_text())["warnings"]) >= 1


def test_warning_logic_on_a_real_run_with_edited_fields(report_doc):
    """The checked-in real sweep (tests/data/report-doc.json, not prefilled), then its maximum's point edited."""
    real = compute([as_model(report_doc)], "bandwidth", [100, 90, 80])
    at = real.targets["redis"].max_at.sweep["value_size"]
    doc = copy.deepcopy(report_doc)
    run = next(r for r in doc["runs"] if r["label"] == "redis" and r["sweep"]["value_size"] == at)
    phase = run["phases"][0]
    get = phase["ops"]["get"]
    reads = get["hits"] + get["misses"]
    # as measured: no evictions, but half the gets missed (nothing was prefilled), and that is said
    assert phase["server"]["evictions"] == 0 and get["hits"] / reads < LOW_HIT_RATIO
    (warning,) = real.targets["redis"].warnings
    assert warning.startswith(f"redis: the maximum came from redis [value_size={at}]: get hit ratio ")
    assert warning in real.warnings
    # every get a hit: nothing to say
    get["hits"], get["misses"] = reads, 0
    assert "warnings" not in compute([as_model(doc)], "bandwidth", [100]).targets["redis"].to_json()
    # the server evicted: said, with the count
    phase["server"]["evictions"] = 17
    (evicted,) = compute([as_model(doc)], "bandwidth", [100]).targets["redis"].warnings
    assert "evicted 17 keys" in evicted and f"value_size={at}" in evicted
    # both at once: two lines
    get["hits"], get["misses"] = reads // 2, reads - reads // 2
    both = compute([as_model(doc)], "bandwidth", [100]).targets["redis"].warnings
    assert len(both) == 2 and "evicted 17 keys" in both[0] and f"< {LOW_HIT_RATIO:.0%}" in both[1]
    # a hit ratio at the line is not low
    phase["server"]["evictions"] = 0
    hits = -(-reads * 9 // 10)  # ceil(0.9 × reads)
    get["hits"], get["misses"] = hits, reads - hits
    assert not compute([as_model(doc)], "bandwidth", [100]).targets["redis"].warnings
    # a metric whose maximum is at another point gets that point's warnings, not this one's
    phase["server"]["evictions"] = 17
    best_ops = max((p for p in phase_rows(as_model(doc)) if p.label == "redis"), key=lambda p: p.ops_per_s)
    ops = compute([as_model(doc)], "ops", [100]).targets["redis"]
    assert ops.max_at.sweep == best_ops.sweep_values
    if best_ops.sweep_values["value_size"] != at:
        assert not any("evicted" in w for w in ops.warnings)


def test_server_summary_has_out_p70_and_cpu_p50():
    """The two figures the headline needs, from the server's per-interval rates (no server: the arithmetic)."""
    from cachemark.measure.server_stats import summarize

    # five 1-s intervals; CPU 10, 20, 30, 40, 50 % of a core; bytes out 1, 2, 3, 4, 5 MB/s
    samples, cpu, out = [], 0.0, 0
    for t in range(6):
        samples.append({"t": float(t), "cpu_user_s": cpu, "cpu_sys_s": 0.0, "net_in_bytes": 100 * t,
                        "net_out_bytes": out, "link": 1, "commands": 1000 * t})
        cpu += 0.1 * (t + 1)
        out += 1_000_000 * (t + 1)
    server = summarize(samples, total_ops=5000, kind="redis")
    assert server["cpu_pct_p50"] == pytest.approx(30.0)
    assert server["cpu_pct_p90"] == pytest.approx(46.0)
    assert server["net_out_mbps_p70"] == pytest.approx(8 * 3.8)  # 70th percentile of 8, 16, 24, 32, 40 Mbps
    assert server["net_out_mbps_p90"] == pytest.approx(8 * 4.6)
    assert not server["low_samples"]
    empty = summarize(samples[:1], total_ops=0, kind="redis")
    assert empty["cpu_pct_p50"] is None and empty["net_out_mbps_p70"] is None
