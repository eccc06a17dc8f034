"""Thresholds from real runs: maxima, levels, and CloudFormation / Prometheus output that parses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cachemark.cli.report_commands import thresholds as thresholds_cmd
from cachemark.errors import UserError
from cachemark.report.data import phase_rows
from cachemark.report.thresholds import compute, parse_levels, prometheus_rules, render, to_cloudformation
from cachemark.results import as_model, write_atomic

pytest_plugins = ["report_fixtures"]
LEVELS = [100, 90, 80]


def test_bandwidth_max_is_the_best_server_out_p90_over_the_sweep(report_doc):
    # the default is bytes out only, reference 001's NetworkBytesOut
    result = compute([as_model(report_doc)], "bandwidth", LEVELS)
    assert result.direction == "out"
    phases = phase_rows(as_model(report_doc))
    redis_best = max(p.server.net_out_mbps_p90 for p in phases if p.label == "redis") * 1e6 / 8
    redis = result.targets["redis"]
    assert redis.max == pytest.approx(redis_best)
    assert redis.source.startswith("server net out Mbps p90") and redis.points == 3
    assert redis.thresholds == {str(level): int(redis_best * level / 100) for level in LEVELS}
    assert redis.max_at.sweep["value_size"] in ("100", "1000", "10000")
    # no server sampled for memory://: the values the client received (the server's bytes out) stand in
    memory_best = max(
        sum(op["bytes_in"] for op in run["phases"][0]["ops"].values()) / run["phases"][0]["wall_s"]
        for run in report_doc["runs"] if run["label"] == "memory")
    assert result.targets["memory"].max == pytest.approx(memory_best)
    assert result.targets["memory"].source.startswith("client payload bytes/s received")


def test_bandwidth_in_and_out_is_an_option(report_doc):
    result = compute([as_model(report_doc)], "bandwidth", LEVELS, direction="both")
    assert result.direction == "in + out"
    phases = phase_rows(as_model(report_doc))
    redis_best = max(p.server.net_mbps_p90 for p in phases if p.label == "redis") * 1e6 / 8
    redis = result.targets["redis"]
    assert redis.max == pytest.approx(redis_best)
    assert redis.source.startswith("server net Mbps p90") and "in + out" in redis.source
    out_only = compute([as_model(report_doc)], "bandwidth", LEVELS).targets["redis"].max
    assert out_only < redis.max  # in + out is more than out alone
    memory_best = max(p.payload_mbps for p in phases if p.label == "memory") * 1e6 / 8
    assert result.targets["memory"].max == pytest.approx(memory_best)
    assert result.targets["memory"].source.startswith("client payload bytes/s (keys + values)")
    # the rules watch what the thresholds measured
    rules = prometheus_rules(result)["groups"][0]["rules"]
    redis_rule = next(r for r in rules if r["labels"]["cache_target"] == "redis")
    assert "redis_net_input_bytes_total" in redis_rule["expr"]
    with pytest.raises(UserError, match="--direction"):
        compute([as_model(report_doc)], "bandwidth", LEVELS, direction="sideways")


def test_ops_and_cpu(report_doc):
    ops = compute([as_model(report_doc)], "ops", LEVELS)
    best = max(p.ops_per_s for p in phase_rows(as_model(report_doc)) if p.label == "memory")
    assert ops.targets["memory"].max == pytest.approx(best)
    cpu = compute([as_model(report_doc)], "cpu", LEVELS)
    assert list(cpu.targets) == ["redis"]  # only the sampled server has CPU figures
    assert cpu.targets["redis"].max > 0


def test_labels_name_each_file(report_doc, slower_doc):
    result = compute([as_model(report_doc), as_model(slower_doc)], "ops", LEVELS,
                     labels=["cache.m4.xlarge", "cache.r4.large"])
    assert list(result.targets) == ["cache.m4.xlarge", "cache.r4.large"]
    with pytest.raises(UserError, match="one per file"):
        compute([as_model(report_doc)], "ops", LEVELS, labels=["a", "b"])


def test_cloudformation_yaml_and_json_have_the_reference_shape(report_doc):
    result = compute([as_model(report_doc)], "bandwidth", LEVELS)
    from_yaml = yaml.safe_load(render(result, "cloudformation"))
    from_json = json.loads(to_cloudformation(result, as_json=True))
    assert from_yaml == from_json
    mapping = from_yaml["Mappings"]["CacheBandwidthThresholds"]
    assert set(mapping) == {"memory", "redis"}
    for label, levels in mapping.items():
        assert list(levels) == ["100", "90", "80"]  # string keys, as !FindInMap needs
        assert all(isinstance(v, int) for v in levels.values())
        assert levels["100"] == int(result.targets[label].max)


def test_cloudformation_template_passes_cfn_lint(report_doc, tmp_path):
    if shutil.which("cfn-lint") is None and not (Path(sys.executable).parent / "cfn-lint").exists():
        pytest.skip("cfn-lint is not installed")
    result = compute([as_model(report_doc)], "bandwidth", LEVELS, labels=["cache.m4.xlarge"])
    template = yaml.safe_load(render(result, "cloudformation"))
    template.update({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Parameters": {"CacheNodeType": {"Type": "String", "Default": "cache.m4.xlarge"}},
        "Resources": {"Alarm": {"Type": "AWS::CloudWatch::Alarm", "Properties": {
            "Namespace": "AWS/ElastiCache", "MetricName": "NetworkBytesOut", "Statistic": "Average",
            "Period": 60, "EvaluationPeriods": 5, "ComparisonOperator": "GreaterThanThreshold",
            "Threshold": {"Fn::FindInMap": ["CacheBandwidthThresholds", {"Ref": "CacheNodeType"}, "90"]}}}},
    })
    path = tmp_path / "template.yaml"
    path.write_text(yaml.safe_dump(template))
    linter = shutil.which("cfn-lint") or str(Path(sys.executable).parent / "cfn-lint")
    done = subprocess.run([linter, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheus_rules_structure(report_doc):
    result = compute([as_model(report_doc)], "bandwidth", LEVELS)
    doc = yaml.safe_load(render(result, "prometheus"))
    assert doc == prometheus_rules(result)
    (group,) = doc["groups"]
    assert group["name"] == "cachemark-bandwidth-thresholds"
    assert len(group["rules"]) == len(result.targets) * len(LEVELS)
    alerts = set()
    for rule in group["rules"]:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}
        assert rule["alert"].isidentifier() and rule["alert"] not in alerts
        alerts.add(rule["alert"])
        label, level = rule["labels"]["cache_target"], rule["labels"]["threshold_pct"]
        assert rule["expr"].endswith(f"> {result.targets[label].thresholds[level]}")
        assert rule["expr"].count("(") == rule["expr"].count(")")
        assert rule["labels"]["severity"] == ("critical" if level == "100" else "warning")
    redis_rule = next(r for r in group["rules"] if r["labels"]["cache_target"] == "redis")
    # bytes out only, by default
    assert "redis_net_output_bytes_total" in redis_rule["expr"] and "input" not in redis_rule["expr"]


def test_bad_input(report_doc, tmp_path):
    with pytest.raises(UserError, match="--levels"):
        parse_levels("100,ninety")
    with pytest.raises(UserError, match="--levels"):
        parse_levels("0")
    assert parse_levels("80,100,90") == [100, 90, 80]
    path = write_atomic(tmp_path / "r.json", report_doc)
    with pytest.raises(UserError, match="unknown metric"):
        thresholds_cmd([path], "100", "latency", "json", None, None)
    with pytest.raises(UserError, match="unknown format"):
        thresholds_cmd([path], "100", "ops", "terraform", None, None)
    with pytest.raises(UserError, match="no such results file"):
        thresholds_cmd([tmp_path / "missing.json"], "100", "ops", "json", None, None)
    with pytest.raises(UserError, match="CloudFormation mapping key"):
        thresholds_cmd([path], "100", "ops", "cloudformation", ["bad label!"], None)


def test_command_writes_outputs(report_doc, tmp_path):
    path = write_atomic(tmp_path / "r.json", report_doc)
    thresholds_cmd([path], "100,90,80", "bandwidth", "cloudformation", None, tmp_path / "map.json")
    thresholds_cmd([path], "100,90,80", "bandwidth", "cloudformation", None, tmp_path / "map.yaml")
    assert json.loads((tmp_path / "map.json").read_text()) == yaml.safe_load((tmp_path / "map.yaml").read_text())
    thresholds_cmd([path], "100,90,80", "ops", "json", None, tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["metric"] == "ops"
