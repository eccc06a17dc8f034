"""compare(): ratios and directions per label × op, and noise from repeats, on real runs."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from cachemark.cli.report_commands import compare as compare_cmd
from cachemark.errors import UserError
from cachemark.report.compare import METRICS, compare, to_markdown, unmatched
from cachemark.report.data import op_rows
from cachemark.results import write_atomic

pytest_plugins = ["report_fixtures"]


def test_a_document_against_itself_is_all_same_and_within_noise(report_doc):
    rows = compare(report_doc, [report_doc])
    keys = {(r["label"], r["sweep"], r["phase"], r["op"]) for r in op_rows(report_doc)}
    assert len(rows) == len(keys)
    for row in rows:
        for metric in METRICS:
            assert row[f"{metric}_ratio"] == pytest.approx(1.0)
            assert row[f"{metric}_direction"] == "same"
        if row["label"] == "memory":  # three repeats: a noise estimate exists
            assert row["base_repeats"] == 3
            assert row["ops_per_s_noise"] is not None and row["ops_per_s_within_noise"] is True
        else:  # the redis sweep has no repeats: no noise estimate, no flag
            assert row["ops_per_s_noise"] is None and row["ops_per_s_within_noise"] is None


def test_noise_is_the_spread_across_repeats(report_doc):
    rows = compare(report_doc, [report_doc])
    memory_get = next(r for r in rows if r["label"] == "memory" and r["op"] == "get")
    values = [r["ops_per_s"] for r in op_rows(report_doc) if r["label"] == "memory" and r["op"] == "get"]
    mean = sum(values) / len(values)
    assert memory_get["base_ops_per_s"] == pytest.approx(mean)
    assert memory_get["ops_per_s_noise"] == pytest.approx((max(values) - min(values)) / mean)


def test_a_real_slowdown_is_worse_and_not_noise(report_doc, slower_doc):
    # "memory" in slower_doc really went to redis over loopback: far slower than in-process memory
    rows = [r for r in compare(report_doc, [slower_doc]) if r["label"] == "memory"]
    assert {r["op"] for r in rows} == {"get", "set", "delete"}
    for row in rows:
        assert row["ops_per_s_ratio"] < 0.5 and row["ops_per_s_direction"] == "worse"
        assert row["p50_us_ratio"] > 2 and row["p50_us_direction"] == "worse"
        assert row["ops_per_s_within_noise"] is False
    # and the other way round it is better
    back = [r for r in compare(slower_doc, [report_doc]) if r["label"] == "memory"]
    assert all(r["ops_per_s_direction"] == "better" and r["p50_us_direction"] == "better" for r in back)
    assert any("redis" in name for name in unmatched(report_doc, [slower_doc]))
    assert "worse" in to_markdown(rows)


def test_compare_command(report_doc, slower_doc, tmp_path):
    base = write_atomic(tmp_path / "base.json", report_doc)
    new = write_atomic(tmp_path / "new.json", slower_doc)
    app = typer.Typer()
    app.command("compare")(compare_cmd)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(app, ["compare", str(base), str(new)])
    assert result.exit_code == 0, result.output
    assert "worse" in result.output and "memory" in result.output
    result = CliRunner().invoke(app, ["compare", str(base), str(new), "-f", "json", "-o", str(tmp_path / "c.json")])
    assert result.exit_code == 0 and (tmp_path / "c.json").exists()
    with pytest.raises(UserError, match="unknown format"):
        compare_cmd(base, [new], "xml", None)
    other = dict(slower_doc, runs=[dict(slower_doc["runs"][0], label="other")])
    with pytest.raises(UserError, match="nothing to compare"):
        compare_cmd(base, [write_atomic(tmp_path / "other.json", other)], "table", None)
