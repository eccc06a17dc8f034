"""Flattening a results document into rows every report reads the same way.

Owns :func:`op_rows` (one dict per run × phase × op, with every summary figure and the
phase's server figures) and :func:`phase_rows` (one per run × phase: total ops/s, payload
bandwidth, server figures). Export, compare, thresholds and the HTML report all start
here, so a figure means the same thing in every output. Summaries missing from an older
file are recomputed from the histograms.

Every function reads the typed document (:mod:`cachemark.results.schema`), as ``results.read``
returns it: never the file's dict.
"""

from __future__ import annotations

from typing import Any

from ..backends.base import PSEUDO_OPS
from ..errors import UserError
from ..results import OpResult, OpSummary, Phase, ResultsDocument
from ..results.names import run_name, sweep_key  # noqa: F401 (re-exported: reports name runs through here)
from ..results.schema import ClusterFigures, ServerFigures
from ..textfile import one_line
from .figures import fmt_percent

SUMMARY_FIELDS = ("ops_per_s", "hit_ratio", "error_count", "p50_us", "p90_us", "p99_us", "p999_us",
                  "max_us", "mean_us", "ops_per_latency_s")
LATENCY_FIELDS = ("p50_us", "p90_us", "p99_us", "p999_us", "max_us")
SERVER_FIELDS = ("cpu_us_per_op", "bytes_in_per_op", "bytes_out_per_op", "net_mbps_p90", "net_mbps_p70",
                 "net_in_mbps_p90", "net_out_mbps_p90", "net_out_mbps_p70", "cpu_pct_p90", "cpu_pct_p50",
                 "used_memory_bytes", "evictions")
# the mark on a per-second server figure that rests on fewer than two full intervals, and its footnote
LOW_SAMPLES_MARK = "†"
LOW_SAMPLES_NOTE = ("from fewer than two full 1-s intervals (a short phase): the rate over what there was, "
                    "not a percentile of seconds.")


def op_summary(op: OpResult, wall_s: float, uncorrected: bool = False) -> OpSummary:
    """The op's summary (``OpResult.summary_for``): saved, or recomputed from its histograms."""
    return op.summary_for(wall_s, uncorrected)


def _server(phase: Phase) -> dict[str, Any]:
    server = phase.server or _NO_SERVER
    return {f"server_{k}": getattr(server, k) for k in SERVER_FIELDS}


_NO_SERVER = ServerFigures()


def op_rows(document: ResultsDocument, include_failed: bool = False) -> list[dict[str, Any]]:
    """One row per (run, phase, op) with every figure; runs without phases are left out."""
    rows: list[dict[str, Any]] = []
    for index, run in enumerate(document.runs):
        if not run.measured and not include_failed:
            continue
        shown, sweep = run.name, run.sweep_key
        for phase in run.phases:
            wall = phase.wall_s or 0.0
            for name, op in phase.ops.items():
                summary = op.summary_for(wall)
                rows.append({
                    "run": index, "label": run.label, "name": shown,
                    "target": run.target,
                    "status": run.status, "sweep": sweep, "repeat": run.repeat,
                    "phase": phase.name, "mode": phase.mode,
                    "workers": phase.workers, "wall_s": wall,
                    "client_cpu_s": phase.client_cpu_s,
                    "op": name, "count": op.count, "hits": op.hits,
                    "misses": op.misses, "bytes_in": op.bytes_in,
                    "bytes_out": op.bytes_out,
                    "errors": op.error_total,
                    **{k: getattr(summary, k) for k in SUMMARY_FIELDS},
                    **_server(phase),
                })
    return rows


def phase_rows(document: ResultsDocument) -> list[dict[str, Any]]:
    """One row per (run, phase): totals over its ops, plus the server figures."""
    rows: list[dict[str, Any]] = []
    for index, run in enumerate(document.runs):
        if not run.measured:
            continue
        shown, sweep = run.name, run.sweep_key
        for phase in run.phases:
            wall = phase.wall_s or 0.0
            ops = phase.ops
            count = sum(op.count for name, op in ops.items() if name not in PSEUDO_OPS)
            payload = sum(op.bytes_in + op.bytes_out for op in ops.values())
            p99 = [op.summary_for(wall).p99_us or 0.0 for op in ops.values()]
            server = phase.server or _NO_SERVER
            rows.append({
                "run": index, "label": run.label, "name": shown, "sweep": sweep,
                "sweep_values": dict(run.sweep or {}), "repeat": run.repeat,
                "network": run.profile or "",
                "phase": phase.name, "wall_s": wall, "count": count,
                "ops_per_s": count / wall if wall > 0 else 0.0,
                "payload_mbps": payload * 8 / wall / 1e6 if wall > 0 else 0.0,
                "p99_us_max": max(p99) if p99 else None,
                "server_kind": (run.server.kind if run.server is not None else None) or run.scheme,
                **_server(phase),
                "has_server": bool(server.samples),
                # per-second figures (Mbps, CPU %) from fewer than two full intervals: marked in tables
                "server_low_samples": server.low_samples,
            })
    return rows


def fmt_value(value: Any, digits: int = 4) -> str:
    """Plain numbers for machine-facing outputs: ints as ints, floats to ``digits`` significant."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e15 else f"{value:.0f}"
    return str(value)


def load_notes(document: ResultsDocument) -> list[str]:
    """What the load itself could not do, per run and phase: ops of an open-loop schedule
    that fell due but were never sent (the client fell behind its rate), which the latency
    figures cannot show, since they cover only the ops that were sent. And, for a Redis
    Cluster on the engine, the redirects its nodes answered (a slot map that changed under
    the load costs those ops a second round trip)."""
    notes = []
    for run in document.runs:
        for phase in run.phases:
            if phase.cluster is not None and not phase.cluster.is_empty:
                notes.append(f"{run.name}: {phase.name}: {cluster_note(phase.cluster)}")
            missed, share = missed_ops(phase)
            if missed > 0:
                were = "op due was" if missed == 1 else "ops due were"
                notes.append(f"{run.name}: {phase.name}: the load fell behind its rate: "
                             f"{missed:,} {were} never sent ({fmt_percent(share * 100)} of the schedule); the "
                             "latencies cover the ops that were sent")
    return notes


MISSED_WARNING = 0.01  # a share of the schedule never sent from which the verdict warns: below, a busy moment


def missed_ops(phase: Phase) -> tuple[int, float]:
    """An open-loop phase's ops that fell due but were never sent, and their share of its schedule."""
    missed = phase.missed or 0
    sent = sum(op.count for name, op in phase.ops.items() if name not in PSEUDO_OPS)
    return missed, missed / max(missed + sent, 1)


def proxy_overhead_note(document: ResultsDocument) -> str | None:
    """The network proxy's own zero-delay overhead as one line beside every proxied figure,
    or ``None`` when no run went through the proxy.

    The emulated network's figures include what the user-space proxy itself costs (two extra
    loopback hops, and on an idle machine the vCPU wake-ups they need). cachemark measures it
    once per experiment (``environment.proxy_overhead``) so the reader can subtract it: per
    round trip, so an op making several round trips pays it several times.
    """
    if not any(run.network is not None and run.network.proxied for run in document.runs):
        return None
    overhead = document.environment.proxy_overhead
    p50, p99 = (overhead.added_p50, overhead.added_p99) if overhead is not None else (None, None)
    if p50 is None:
        return ("network proxy: its own overhead was not measured with these results; every proxied figure "
                "includes it (30–200 µs per round trip on the machines we measured, see docs/network.md).")
    tail = f", {max(p99, 0):.0f} µs p99" if p99 is not None else ""
    return (f"network proxy: adds {max(p50, 0):.0f} µs p50{tail} per round trip on its own (measured in this "
            f"experiment with no delay configured); every proxied figure includes it — subtract it per round "
            f"trip to compare with a real network.")


def cluster_note(cluster: ClusterFigures | dict[str, Any]) -> str:
    """``cluster: 3 primaries, 12 MOVED, 4 ASK, 1 node joined (…) (slots moved during the run — …)``."""
    if isinstance(cluster, dict):  # as a run reports it (measure/server_stats.py)
        cluster = ClusterFigures.model_validate(cluster)
    moved, ask = cluster.moved, cluster.ask
    # replicas: the engine read from them too (read_from_replicas=1)
    replicas = f" (+{cluster.replicas} replicas read from)" if "replicas" in cluster.model_fields_set else ""
    text = f"cluster: {cluster.primaries} primaries{replicas}, {moved:,} MOVED, {ask:,} ASK"
    if joined := cluster.joined:  # the engine: nodes added to the cluster while it ran, and followed
        text += f", {len(joined)} node{'s' if len(joined) > 1 else ''} joined ({', '.join(joined)})"
    if moved or ask:
        text += (" (slots moved during the run — resharding or a failover; each redirected op "
                 "includes its second round trip)")
    return text


def pct_of(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return fmt_percent(value / base * 100)


def baseline_rows(rows: list[dict[str, Any]], baseline: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The baseline label's row per (sweep point, phase, op); the first repeat stands for the others."""
    chosen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in rows:
        if row["label"] == baseline:
            chosen.setdefault((row["sweep"], row["phase"], row["op"]), row)
            # for rows of another sweep point (or none), the baseline's first point stands in
            chosen.setdefault(("*", row["phase"], row["op"]), row)
    if not chosen:
        labels = sorted({r["label"] for r in rows})
        raise UserError(f"baseline {one_line(repr(baseline), 80)} is not a label in the results; "
                        f"labels: {one_line(', '.join(labels), 300)}")
    return chosen


def baseline_for(base: dict[tuple[str, str, str], dict[str, Any]], row: dict[str, Any]) -> dict[str, Any] | None:
    return base.get((row["sweep"], row["phase"], row["op"])) or base.get(("*", row["phase"], row["op"]))


# A tail percentile from a handful of ops is one sample, not a tail: marked in every table.
FEW_SAMPLES_MARK = "*"
FEW_FOR = {"p99_us": 30, "p999_us": 300}  # fewer ops than this: the percentile is marked
FEW_SAMPLES_NOTE = ("* from fewer than 30 ops (p99) or 300 ops (p99.9): the tail rests on one or two samples; "
                    "a single op has no percentile at all (-), only its own latency (max).")


def latency_cell(count: int, field: str, value: float | None, fmt: Any) -> str:
    """A latency figure as shown: '-' for a percentile of a single op, marked when the op count
    is too small for it (``FEW_FOR``), plain otherwise."""
    if count == 1 and field != "max_us":
        return "-"
    text = fmt(value)
    return text + FEW_SAMPLES_MARK if value is not None and count < FEW_FOR.get(field, 0) else text


def has_few_samples(counts: list[int]) -> bool:
    return any(0 < c < FEW_FOR["p999_us"] for c in counts)
