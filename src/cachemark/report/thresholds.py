"""Capacity thresholds: from measured maxima to alarm levels (reference 001, generalised).

Owns :func:`compute` (per target label, the measured maximum of a metric over all its
runs and sweep points, and the alarm levels at given percentages of it) and the three
renderings: JSON, a CloudFormation ``Mappings`` block in the shape of reference 001
(``{label: {"100": v, "90": v, "80": v}}``; YAML, or JSON when the output file ends in
``.json``), and Prometheus alerting rules.

Metrics and units:

- ``bandwidth``: bytes per second, from the server's network Mbps p90 over 1-s samples
  (in + out, as ``phase["server"]["net_mbps_p90"]``) when the run sampled the server, else
  from the client's payload bytes (keys + values) per second. Like reference 001, the p90
  of the per-second figures is taken as the most the target should be expected to move.
- ``ops``: operations per second, all ops of a phase together (client side).
- ``cpu``: server CPU, percent of one core, p90 over 1-s samples (needs server sampling).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import UserError
from ..textfile import one_line
from .data import phase_rows

METRICS = ("bandwidth", "ops", "cpu")
FORMATS = ("json", "cloudformation", "prometheus")
UNITS = {"bandwidth": "bytes/s", "ops": "ops/s", "cpu": "percent of one core"}
MAPPING_NAMES = {"bandwidth": "CacheBandwidthThresholds", "ops": "CacheOpsThresholds",
                 "cpu": "CacheCpuThresholds"}

# PromQL per server kind and metric, in the unit above; ``{sel}`` is the label matcher.
# Metric names are those of the common exporters (oliver006/redis_exporter,
# prometheus/memcached_exporter); anything else falls back to the process collector.
_PROMQL = {
    ("redis", "bandwidth"):
        "rate(redis_net_input_bytes_total{sel}[1m]) + rate(redis_net_output_bytes_total{sel}[1m])",
    ("redis", "ops"): "rate(redis_commands_processed_total{sel}[1m])",
    ("redis", "cpu"):
        "100 * (rate(redis_cpu_sys_seconds_total{sel}[1m]) + rate(redis_cpu_user_seconds_total{sel}[1m]))",
    ("memcached", "bandwidth"):
        "rate(memcached_read_bytes_total{sel}[1m]) + rate(memcached_written_bytes_total{sel}[1m])",
    ("memcached", "ops"): "sum without (command, status) (rate(memcached_commands_total{sel}[1m]))",
    ("memcached", "cpu"): "100 * rate(process_cpu_seconds_total{sel}[1m])",
    ("", "bandwidth"):
        "rate(node_network_transmit_bytes_total{sel}[1m]) + rate(node_network_receive_bytes_total{sel}[1m])",
    ("", "ops"): "rate(cache_operations_total{sel}[1m])",
    ("", "cpu"): "100 * rate(process_cpu_seconds_total{sel}[1m])",
}


def parse_levels(text: str) -> list[int]:
    """``100,90,80`` → [100, 90, 80]; each a whole percentage in 1..1000."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--levels {text!r}: expected whole percentages, e.g. 100,90,80") from None
    if not levels or any(not 1 <= level <= 1000 for level in levels):
        raise UserError(f"--levels {text!r}: expected percentages between 1 and 1000, e.g. 100,90,80")
    return sorted(set(levels), reverse=True)


def _value(row: dict[str, Any], metric: str, use_server: bool) -> float | None:
    if metric == "ops":
        return row["ops_per_s"]
    if metric == "cpu":
        return row["server_cpu_pct_p90"]
    if use_server:
        mbps = row["server_net_mbps_p90"]
        return None if mbps is None else mbps * 1e6 / 8
    return row["payload_mbps"] * 1e6 / 8


def compute(documents: list[dict[str, Any]], metric: str, levels: list[int],
            labels: list[str] | None = None) -> dict[str, Any]:
    """Per target label: the maximum of ``metric`` and the alarm level at each percentage.

    ``labels``, when given, names the target each document measured (one per document,
    e.g. the instance type), replacing the run labels in it.
    """
    if metric not in METRICS:
        raise UserError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    if labels and len(labels) != len(documents):
        raise UserError(f"{len(labels)} --label values for {len(documents)} results files: give one per file")
    per_label: dict[str, list[dict[str, Any]]] = {}
    for i, document in enumerate(documents):
        for row in phase_rows(document):
            name = labels[i] if labels else row["label"]
            per_label.setdefault(name, []).append(row)
    targets: dict[str, Any] = {}
    for name, rows in per_label.items():
        use_server = metric == "bandwidth" and any(r["server_net_mbps_p90"] is not None for r in rows)
        measured = [(v, r) for r in rows if (v := _value(r, metric, use_server)) is not None]
        if not measured:
            continue
        best, row = max(measured, key=lambda item: item[0])
        source = {"ops": "client ops/s", "cpu": "server CPU % p90 over 1-s samples",
                  "bandwidth": "server net Mbps p90 over 1-s samples (in + out)" if use_server
                  else "client payload bytes/s (keys + values)"}[metric]
        entry: dict[str, Any] = {
            "max": best, "source": source, "points": len(measured),
            "max_at": {"run": row["name"], "phase": row["phase"], "sweep": row["sweep_values"]},
            "server_kind": row["server_kind"] or "",
            "thresholds": {str(level): _level(best, level, metric) for level in levels},
        }
        if metric == "bandwidth":
            entry["max_mbps"] = best * 8 / 1e6
        targets[name] = entry
    if not targets:
        need = "server CPU samples (run with server sampling)" if metric == "cpu" else "completed runs"
        raise UserError(f"no {metric} figures in the results: they need {need}")
    return {"metric": metric, "unit": UNITS[metric], "levels": levels, "targets": targets}


def _level(maximum: float, level: int, metric: str) -> int | float:
    value = maximum * level / 100
    # whole units like reference 001 (bytes/s, ops/s); CPU percent keeps one decimal
    return round(value, 1) if metric == "cpu" else int(value)


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, sort_keys=False) + "\n"


def cloudformation_mapping(result: dict[str, Any]) -> dict[str, Any]:
    """``{"Mappings": {name: {label: {"100": v, ...}}}}`` — the mapping of reference 001."""
    name = MAPPING_NAMES[result["metric"]]
    return {"Mappings": {name: {label: dict(t["thresholds"]) for label, t in result["targets"].items()}}}


_CFN_KEY = re.compile(r"^[A-Za-z0-9.\-]+$")


def to_cloudformation(result: dict[str, Any], as_json: bool = False) -> str:
    for label in result["targets"]:
        if not _CFN_KEY.match(label):
            raise UserError(f"label {one_line(repr(label), 80)} cannot be a CloudFormation mapping key "
                            "(use letters, digits, . and -); rename it with --label")
    mapping = cloudformation_mapping(result)
    if as_json:
        return json.dumps(mapping, indent=2) + "\n"
    import yaml

    name = MAPPING_NAMES[result["metric"]]
    levels = result["levels"]
    header = (f"# cachemark thresholds: {result['metric']} in {result['unit']} at "
              f"{', '.join(f'{lv} %' for lv in levels)} of the measured maximum.\n"
              f"# Use: !FindInMap [{name}, !Ref CacheNodeType, \"{levels[min(1, len(levels) - 1)]}\"]")
    if result["metric"] == "bandwidth":
        header += "\n# CloudWatch NetworkBytesIn/Out are per period: multiply by the alarm period in seconds."
    return header + "\n" + yaml.safe_dump(mapping, sort_keys=False, default_flow_style=False)


def _severity(level: int, levels: list[int]) -> str:
    return "critical" if level == max(levels) else "warning"


def prometheus_rules(result: dict[str, Any], for_duration: str = "5m") -> dict[str, Any]:
    metric = result["metric"]
    rules = []
    for label, target in result["targets"].items():
        kind = target["server_kind"] if (target["server_kind"], metric) in _PROMQL else ""
        expr = _PROMQL[(kind, metric)].replace("{sel}", '{cache_target="' + label.replace('"', '\\"') + '"}')
        for level, value in target["thresholds"].items():
            camel = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", label) if part)
            rules.append({
                "alert": f"Cache{metric.capitalize()}{camel}Above{level}Pct",
                "expr": f"({expr}) > {value}",
                "for": for_duration,
                "labels": {"severity": _severity(int(level), result["levels"]), "cache_target": label,
                           "threshold_pct": str(level)},
                "annotations": {
                    "summary": f"{label}: {metric} above {level} % of the measured maximum",
                    "description": (f"{metric} is {{{{ $value | humanize }}}} {result['unit']}; "
                                    f"cachemark measured at most {target['max']:.6g} ({target['source']})."),
                },
            })
    return {"groups": [{"name": f"cachemark-{metric}-thresholds", "rules": rules}]}


def to_prometheus(result: dict[str, Any]) -> str:
    import yaml

    header = ("# cachemark thresholds as Prometheus alerting rules. The expressions assume exporter "
              "metrics labelled\n# cache_target=<label> by your scrape config; edit them to match your "
              "setup.\n")
    body = yaml.safe_dump(prometheus_rules(result), sort_keys=False, default_flow_style=False, width=200)
    return header + body


def render(result: dict[str, Any], fmt: str, as_json: bool = False) -> str:
    if fmt == "json":
        return to_json(result)
    if fmt == "cloudformation":
        return to_cloudformation(result, as_json=as_json)
    if fmt == "prometheus":
        return to_prometheus(result)
    raise UserError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
