"""Capacity thresholds: from measured maxima to alarm levels (reference 001, generalised).

Owns :func:`compute` (per target label, the measured maximum of a metric over all its
runs and sweep points — a bandwidth's over the link-capped network profile's alone when the runs
played one beside loopback, the node the reference measured — and the alarm levels at given
percentages of it) and the three renderings: JSON, a CloudFormation ``Mappings`` block in the shape of reference 001
(``{label: {"100": v, "90": v, "80": v}}``; YAML, or JSON when the output file ends in
``.json``), and Prometheus alerting rules. Also owns :func:`bandwidth_headline`, the
headline figure of the ``redis-bandwidth-sweep`` preset (reference 001's own table: per
value size, network Mbps p90/p70 of bytes out, server CPU % p90/p50, ops/s, and the
mapping it turns into).

Metrics and units:

- ``bandwidth``: bytes per second, from the server's network Mbps p90 over 1-s samples
  when the run sampled the server, else from the client's payload bytes per second. By
  default bytes **out** of the server only (``phase.server.net_out_mbps_p90``; the
  client's received values as the fallback), like reference 001's CloudWatch
  ``NetworkBytesOut``; ``direction="both"`` takes in + out (``net_mbps_p90``; keys and
  values both ways). Like reference 001, the p90 of the per-second figures is taken as
  the most the target should be expected to move.
- ``ops``: operations per second, all ops of a phase together (client side).
- ``cpu``: server CPU, percent of one core, p90 over 1-s samples (needs server sampling).

A maximum measured where the server evicted keys, or where gets mostly missed (hit
ratio under :data:`LOW_HIT_RATIO`), is not the steady state of a warm cache: each such
maximum carries a one-line warning (``result["warnings"]``), printed with every output.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from ..results import Phase, ResultsDocument
from ..textfile import one_line
from .blocks import Block
from .data import LOW_SAMPLES_MARK, LOW_SAMPLES_NOTE, PhaseRow, SweepPoint, phase_rows

METRICS = ("bandwidth", "ops", "cpu")
DIRECTIONS = ("out", "both")
# below this get hit ratio a maximum is a mostly-missing cache's, not a warm one's
LOW_HIT_RATIO = 0.9
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
    ("redis", "bandwidth_out"): "rate(redis_net_output_bytes_total{sel}[1m])",
    ("memcached", "bandwidth_out"): "rate(memcached_written_bytes_total{sel}[1m])",
    ("", "bandwidth_out"): "rate(node_network_transmit_bytes_total{sel}[1m])",
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


def parse_direction(text: str) -> str:
    """``out`` (bytes out of the server only, the default) or ``both`` (in + out; ``in+out`` too)."""
    value = text.strip().lower().replace(" ", "")
    value = {"in+out": "both", "inout": "both", "in-out": "both"}.get(value, value)
    if value not in DIRECTIONS:
        raise UserError(f"--direction {one_line(repr(text), 40)}: expected out or both (in + out)")
    return value


def _received_mbps(row: PhaseRow) -> float:
    """The client's received payload (values) in Mbps: the server's bytes out, seen from the client."""
    wall = row.wall_s
    received = sum(op.bytes_in for op in row.phase.ops.values())
    return received * 8 / wall / 1e6 if wall > 0 else 0.0


def hit_ratio(phase: Phase) -> float | None:
    """Hits ÷ (hits + misses) of the phase's gets (``get``, ``get_many``, ``exists+get``…; any op
    that counted hits when none is a get); None when nothing read."""
    ops = phase.ops
    gets = {name: op for name, op in ops.items() if "get" in name and op.hits + op.misses}
    chosen = (gets or ops).values()
    hits = sum(op.hits for op in chosen)
    misses = sum(op.misses for op in chosen)
    return hits / (hits + misses) if hits + misses else None


@dataclass(frozen=True, eq=False)
class _Point:
    """A phase a maximum may come from, with the two figures thresholds add to its row."""

    row: PhaseRow
    received_mbps: float
    hit_ratio: float | None

    @classmethod
    def of(cls, row: PhaseRow) -> _Point:
        return cls(row, _received_mbps(row), hit_ratio(row.phase))


def _value(point: _Point, metric: str, use_server: bool, direction: str) -> float | None:
    row = point.row
    if metric == "ops":
        return row.ops_per_s
    if metric == "cpu":
        return row.server.cpu_pct_p90
    if use_server:
        mbps = row.server.net_out_mbps_p90 if direction == "out" else row.server.net_mbps_p90
        return None if mbps is None else mbps * 1e6 / 8
    mbps = point.received_mbps if direction == "out" else row.payload_mbps
    return mbps * 1e6 / 8


def _source(metric: str, use_server: bool, direction: str) -> str:
    if metric == "ops":
        return "client ops/s"
    if metric == "cpu":
        return "server CPU % p90 over 1-s samples"
    if use_server:
        return ("server net out Mbps p90 over 1-s samples (bytes out only, like CloudWatch NetworkBytesOut)"
                if direction == "out" else "server net Mbps p90 over 1-s samples (in + out)")
    return ("client payload bytes/s received (values: the server's bytes out)" if direction == "out"
            else "client payload bytes/s (keys + values)")


def point_warnings(evicted: float | None, ratio: float | None, where: str) -> list[str]:
    """Why a point's figures may not be a warm cache's: evictions, or mostly-missing gets."""
    out = []
    if evicted:
        out.append(f"{where}: the server evicted {evicted:,.0f} keys (its memory limit was reached): these are "
                   "the figures of a full cache evicting as it writes, not of one the data fits in")
    if ratio is not None and ratio < LOW_HIT_RATIO:
        out.append(f"{where}: get hit ratio {ratio:.0%} (< {LOW_HIT_RATIO:.0%}): a miss returns no value, so "
                   "bytes out (and the work per get) are below a warm cache's")
    return out


@dataclass(frozen=True)
class TargetThresholds:
    """One target's measured maximum, where it came from, and the alarm level at each percentage."""

    max: float
    source: str  # which figure the maximum is (client ops/s, server net out Mbps p90, …)
    points: int  # the phases it is the maximum over
    max_at: MaxAt
    server_kind: str  # picks the exporter metric a Prometheus rule watches
    thresholds: dict[str, int | float]  # level (a percentage, as text) → value
    network: str = ""  # the network profile of the maximum's run
    note: str = ""  # what was left out (loopback beside a link-capped profile)
    max_mbps: float | None = None  # bandwidth: the maximum in Mbps too
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:  # Any: an object of the JSON output
        """As ``thresholds -f json`` writes it: a field a target lacks is left out."""
        at = self.max_at
        out = {"max": self.max, "source": self.source, "points": self.points,
               "max_at": {"run": at.run, "phase": at.phase, "sweep": at.sweep}, "server_kind": self.server_kind,
               "thresholds": self.thresholds}
        if self.network:
            out["network"] = self.network
        if self.note:
            out["note"] = self.note
        if self.max_mbps is not None:
            out["max_mbps"] = self.max_mbps
        if self.warnings:
            out["warnings"] = self.warnings
        return out


@dataclass(frozen=True)
class MaxAt:
    """The run, phase and sweep point a maximum was measured at."""

    run: str
    phase: str
    sweep: SweepPoint


@dataclass(frozen=True)
class Thresholds:
    """What :func:`compute` finds: per target label its maximum and alarm levels, and every warning."""

    metric: str
    unit: str
    levels: list[int]
    direction: str | None  # bandwidth: "out" or "in + out"
    targets: dict[str, TargetThresholds]
    warnings: list[str]

    def to_json(self) -> dict[str, Any]:  # Any: the JSON output
        """The document ``thresholds -f json`` writes, in its order."""
        out = {"metric": self.metric, "unit": self.unit, "levels": self.levels}
        if self.direction is not None:
            out["direction"] = self.direction
        out["targets"] = {name: target.to_json() for name, target in self.targets.items()}
        out["warnings"] = self.warnings
        return out


def compute(documents: list[ResultsDocument], metric: str, levels: list[int],
            labels: list[str] | None = None, direction: str = "out") -> Thresholds:
    """Per target label: the maximum of ``metric`` and the alarm level at each percentage.

    ``labels``, when given, names the target each document measured (one per document,
    e.g. the instance type), replacing the run labels in it. ``direction`` (bandwidth
    only): ``out``, bytes out of the server, or ``both``, in + out.
    """
    if metric not in METRICS:
        raise UserError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    direction = parse_direction(direction)
    if labels and len(labels) != len(documents):
        raise UserError(f"{len(labels)} --label values for {len(documents)} results files: give one per file")
    per_label: dict[str, list[_Point]] = {}
    for i, document in enumerate(documents):
        for row in phase_rows(document):
            per_label.setdefault(labels[i] if labels else row.label, []).append(_Point.of(row))
    out_only = metric == "bandwidth" and direction == "out"
    targets: dict[str, TargetThresholds] = {}
    warnings: list[str] = []
    notes: dict[str, str] = {}
    for name, points in list(per_label.items()):
        points, note = _nic_points(points, metric)
        per_label[name] = points
        if note:
            notes[name] = note
    for name, points in per_label.items():
        use_server = metric == "bandwidth" and any(
            (p.row.server.net_out_mbps_p90 if out_only else p.row.server.net_mbps_p90) is not None for p in points)
        measured = [(v, p) for p in points if (v := _value(p, metric, use_server, direction)) is not None]
        if not measured:
            continue
        best, point = max(measured, key=lambda item: item[0])
        row = point.row
        found = point_warnings(row.server.evictions, point.hit_ratio, f"{name}: the maximum came from {row.name}")
        targets[name] = TargetThresholds(
            max=best, source=_source(metric, use_server, direction), points=len(measured),
            max_at=MaxAt(row.name, row.phase.name, row.sweep_values), server_kind=row.server_kind or "",
            thresholds={str(level): _level(best, level, metric) for level in levels}, network=row.network,
            note=notes.get(name, ""), max_mbps=best * 8 / 1e6 if metric == "bandwidth" else None, warnings=found)
        warnings += found
    if not targets:
        need = "server CPU samples (run with server sampling)" if metric == "cpu" else "completed runs"
        raise UserError(f"no {metric} figures in the results: they need {need}")
    return Thresholds(metric, UNITS[metric], levels, ("out" if out_only else "in + out") if metric == "bandwidth"
                      else None, targets, warnings)


def link_capped(profile: str) -> bool:
    """Whether a network profile caps a link every connection shares (``link=…``): the one that
    stands for a real node's NIC, where loopback (``same-host``, a latency alone) caps nothing."""
    from ..lab.network import parse_network

    try:
        return any(p.link_bps > 0 for p in parse_network(profile))
    except UserError:
        return False


def _nic_points(points: list[_Point], metric: str) -> tuple[list[_Point], str | None]:
    """The points a bandwidth maximum is taken from: those of the link-capped profile where the runs
    played one beside loopback (reference 001 measured a node's NIC, not a host's loopback), with a
    note naming what was left out; the points unchanged otherwise."""
    if metric != "bandwidth":
        return points, None
    is_capped = [link_capped(p.row.network) for p in points]
    capped = [p for p, yes in zip(points, is_capped, strict=True) if yes]
    if not capped or len(capped) == len(points):
        return points, None
    left = sorted({p.row.network or "same-host" for p, yes in zip(points, is_capped, strict=True) if not yes})
    kept = sorted({p.row.network for p in capped})
    return capped, (f"thresholds from the link-capped profile ({', '.join(kept)}), the one standing for a real "
                    f"node; {', '.join(left)} left out (loopback: a level for no NIC)")


def _level(maximum: float, level: int, metric: str) -> int | float:
    value = maximum * level / 100
    # whole units like reference 001 (bytes/s, ops/s); CPU percent keeps one decimal
    return round(value, 1) if metric == "cpu" else int(value)


def to_json(result: Thresholds) -> str:
    return json.dumps(result.to_json(), indent=2, sort_keys=False) + "\n"


def cloudformation_mapping(result: Thresholds) -> dict[str, dict[str, dict[str, dict[str, int | float]]]]:
    """``{"Mappings": {name: {label: {"100": v, ...}}}}`` — the mapping of reference 001."""
    name = MAPPING_NAMES[result.metric]
    return {"Mappings": {name: {label: dict(t.thresholds) for label, t in result.targets.items()}}}


_CFN_KEY = re.compile(r"^[A-Za-z0-9.\-]+$")


def to_cloudformation(result: Thresholds, as_json: bool = False) -> str:
    for label in result.targets:
        if not _CFN_KEY.match(label):
            raise UserError(f"label {one_line(repr(label), 80)} cannot be a CloudFormation mapping key "
                            "(use letters, digits, . and -); rename it with --label")
    mapping = cloudformation_mapping(result)
    if as_json:
        return json.dumps(mapping, indent=2) + "\n"
    import yaml

    name = MAPPING_NAMES[result.metric]
    levels = result.levels
    header = (f"# cachemark thresholds: {result.metric} in {result.unit} at "
              f"{', '.join(f'{lv} %' for lv in levels)} of the measured maximum.\n"
              f"# Use: !FindInMap [{name}, !Ref CacheNodeType, \"{levels[min(1, len(levels) - 1)]}\"]")
    if result.metric == "bandwidth":
        if result.direction == "out":
            header += ("\n# Bytes out of the server only: alarm on CloudWatch NetworkBytesOut, which is per "
                       "period: multiply by the alarm period in seconds.")
        else:
            header += ("\n# In + out: alarm on NetworkBytesIn + NetworkBytesOut (metric math); CloudWatch's are "
                       "per period: multiply by the alarm period in seconds.")
    header += _warning_comments(result)
    return header + "\n" + yaml.safe_dump(mapping, sort_keys=False, default_flow_style=False)


def _warning_comments(result: Thresholds) -> str:
    notes = "".join(f"\n# {label}: {one_line(t.note, 400)}" for label, t in result.targets.items() if t.note)
    return notes + "".join(f"\n# warning: {one_line(w, 400)}" for w in result.warnings)


def _severity(level: int, levels: list[int]) -> str:
    return "critical" if level == max(levels) else "warning"


def prometheus_rules(result: Thresholds, for_duration: str = "5m") -> dict[str, Any]:  # Any: the YAML's tree
    metric = result.metric
    query = "bandwidth_out" if metric == "bandwidth" and result.direction == "out" else metric
    rules = []
    for label, target in result.targets.items():
        kind = target.server_kind if (target.server_kind, query) in _PROMQL else ""
        expr = _PROMQL[(kind, query)].replace("{sel}", '{cache_target="' + label.replace('"', '\\"') + '"}')
        for level, value in target.thresholds.items():
            camel = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", label) if part)
            rules.append({
                "alert": f"Cache{metric.capitalize()}{camel}Above{level}Pct",
                "expr": f"({expr}) > {value}",
                "for": for_duration,
                "labels": {"severity": _severity(int(level), result.levels), "cache_target": label,
                           "threshold_pct": str(level)},
                "annotations": {
                    "summary": f"{label}: {metric} above {level} % of the measured maximum",
                    "description": (f"{metric} is {{{{ $value | humanize }}}} {result.unit}; "
                                    f"cachemark measured at most {target.max:.6g} ({target.source})."),
                },
            })
    return {"groups": [{"name": f"cachemark-{metric}-thresholds", "rules": rules}]}


def to_prometheus(result: Thresholds) -> str:
    import yaml

    header = ("# cachemark thresholds as Prometheus alerting rules. The expressions assume exporter "
              "metrics labelled\n# cache_target=<label> by your scrape config; edit them to match your "
              "setup.")
    header += _warning_comments(result) + "\n"
    body = yaml.safe_dump(prometheus_rules(result), sort_keys=False, default_flow_style=False, width=200)
    return header + body


def render(result: Thresholds, fmt: str, as_json: bool = False) -> str:
    if fmt == "json":
        return to_json(result)
    if fmt == "cloudformation":
        return to_cloudformation(result, as_json=as_json)
    if fmt == "prometheus":
        return to_prometheus(result)
    raise UserError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


# ---- the headline of reference 001: its own table, computed from the results ----------------------------------

def _number(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _cell(value: float | None, fmt: str, low: bool) -> str:
    if value is None:
        return "-"
    text = format(value, fmt)
    return f"{text} {LOW_SAMPLES_MARK}" if low else text


@dataclass(frozen=True)
class BandwidthPoint:
    """One (target label, network profile, phase, sweep point) of reference 001's table: its figures,
    repeats averaged, with the flags and warnings of the point."""

    label: str
    network: str
    phase: str
    sweep: SweepPoint
    runs: int  # the repeats averaged
    net_out_mbps_p90: float | None
    net_out_mbps_p70: float | None
    cpu_pct_p90: float | None
    cpu_pct_p50: float | None
    ops_per_s: float | None
    evictions: float
    hit_ratio: float | None
    low_samples: bool  # a per-second figure rests on fewer than two full intervals
    has_server: bool
    warnings: list[str]


def bandwidth_points(document: ResultsDocument) -> list[BandwidthPoint]:
    """One entry per (target label, network profile, phase, sweep point): the headline's figures,
    repeats averaged (as reference 001 averaged its test passes), with the flags and warnings of
    the point. Two profiles are two experiments (loopback, and a capped link): never averaged."""
    groups: dict[tuple[str, str, str, str], list[PhaseRow]] = {}
    for row in phase_rows(document):
        groups.setdefault((row.label, row.network, row.phase.name, row.sweep), []).append(row)
    labels = list(dict.fromkeys(k[0] for k in groups))
    networks = list(dict.fromkeys(k[1] for k in groups))
    phases = list(dict.fromkeys(k[2] for k in groups))
    points = []
    for (label, network, phase, _), rows in groups.items():
        first = rows[0]
        servers = [r.server for r in rows]
        evictions = sum(server.evictions or 0 for server in servers)
        ratio = _mean([hit_ratio(r.phase) for r in rows])
        points.append(BandwidthPoint(
            label, network, phase, first.sweep_values, len(rows),
            net_out_mbps_p90=_mean([server.net_out_mbps_p90 for server in servers]),
            net_out_mbps_p70=_mean([server.net_out_mbps_p70 for server in servers]),
            cpu_pct_p90=_mean([server.cpu_pct_p90 for server in servers]),
            cpu_pct_p50=_mean([server.cpu_pct_p50 for server in servers]),
            ops_per_s=_mean([r.ops_per_s for r in rows]), evictions=evictions, hit_ratio=ratio,
            low_samples=any(r.low_samples for r in rows),
            has_server=any(server.net_out_mbps_p90 is not None for server in servers),
            warnings=point_warnings(evictions, ratio, first.name if len(rows) == 1 else f"{label} [{first.sweep}]"),
        ))

    def order(p: BandwidthPoint) -> tuple[int, int, int, tuple[tuple[bool, float, str], ...]]:
        values = [p.sweep[f] for f in sorted(p.sweep)]
        numbers = tuple((_number(v) is None, _number(v) or 0.0, v) for v in values)
        return labels.index(p.label), networks.index(p.network), phases.index(p.phase), numbers

    return sorted(points, key=order)


def bandwidth_headline(document: ResultsDocument) -> list[Block]:
    """Reference 001's table: per value size (sweep point), network Mbps p90 and p70 of bytes
    out, server CPU % p90 and p50, ops/s; then the alarm thresholds it turns into."""
    points = bandwidth_points(document)
    if not points:
        return []
    fields = sorted({f for p in points for f in p.sweep})
    many_phases = len({p.phase for p in points}) > 1
    many_networks = len({p.network for p in points}) > 1
    repeats = any(p.runs > 1 for p in points)
    sweep_heads = ["value size (B)" if f == "value_size" else f for f in fields]
    columns = ["target", *(["network"] if many_networks else []), *(["phase"] if many_phases else []),
               *sweep_heads, "Mbps out p90", "Mbps out p70", "CPU % p90", "CPU % p50", "ops/s",
               *(["runs"] if repeats else [])]
    rows = []
    for p in points:
        low = p.low_samples
        rows.append([
            p.label, *([p.network] if many_networks else []), *([p.phase] if many_phases else []),
            *(str(p.sweep.get(f, "-")) for f in fields),
            _cell(p.net_out_mbps_p90, ",.1f", low), _cell(p.net_out_mbps_p70, ",.1f", low),
            _cell(p.cpu_pct_p90, ".1f", low), _cell(p.cpu_pct_p50, ".1f", low),
            _cell(p.ops_per_s, ",.0f", False), *([str(p.runs)] if repeats else []),
        ])
    by = " × ".join(sweep_heads) if fields else ""
    title = f"Bandwidth and server CPU by {by} (reference 001)" if by else "Bandwidth and server CPU (reference 001)"
    lines = ["Network Mbps (10^6 bit/s) of bytes out of the server (CloudWatch's NetworkBytesOut) and server "
             "CPU (% of one core), percentiles over 1-s intervals; ops/s = all ops ÷ wall time."]
    notes: list[str] = []
    if repeats:
        notes.append("Repeats of a point are averaged, as the reference averaged its test passes.")
    if any(p.low_samples for p in points if p.has_server):
        notes.append(f"{LOW_SAMPLES_MARK} {LOW_SAMPLES_NOTE}")
    if not all(p.has_server for p in points):
        missing = sorted({p.label for p in points if not p.has_server})
        notes.append(f"no server figures for {', '.join(missing)}: the server was not sampled "
                     "(no stats source for its scheme)")
    try:
        result = compute([document], "bandwidth", [100, 90, 80], direction="out")
    except UserError:
        result = None
    if result is not None:
        for label, target in result.targets.items():
            at = ",".join(f"{k}={v}" for k, v in sorted(target.max_at.sweep.items())) or target.max_at.run
            levels = " · ".join(f"{level} %: {value:,} B/s" for level, value in target.thresholds.items())
            what = ("the largest Mbps out p90" if target.source.startswith("server")
                    else "the largest client-received payload Mbps")
            where = f"{target.network}, {at}" if many_networks and target.network else at
            notes.append(f"{label}: alarm thresholds at 100/90/80 % of {what} "
                         f"({target.max_mbps or 0:,.1f} Mbps at {where}): {levels} "
                         "(cachemark thresholds writes them as a CloudFormation mapping)"
                         + (f"; {target.note}." if target.note else "."))
    notes += [f"warning: {w}" for p in points for w in p.warnings]
    return [Block(title=title, lines=lines, columns=columns, rows=rows, notes=notes,
                  left=1 + int(many_networks) + int(many_phases) + len(fields))]
