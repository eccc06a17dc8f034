"""Flattening a results document into rows every report reads the same way.

Owns :func:`op_rows` (one dict per run × phase × op, with every summary figure and the
phase's server figures) and :func:`phase_rows` (one per run × phase: total ops/s, payload
bandwidth, server figures). Export, compare, thresholds and the HTML report all start
here, so a figure means the same thing in every output. Summaries missing from an older
file are recomputed from the histograms.
"""

from __future__ import annotations

from typing import Any

from ..backends.base import PSEUDO_OPS
from ..errors import UserError
from ..measure.summary import summary_from_result
from ..results.names import run_name, sweep_key
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


def op_summary(op: dict[str, Any], wall_s: float, uncorrected: bool = False) -> dict[str, Any]:
    if uncorrected and op.get("summary_uncorrected"):
        return op["summary_uncorrected"]
    if op.get("summary"):
        return op["summary"]
    return summary_from_result(op, wall_s, corrected=not uncorrected)


def _server(phase: dict[str, Any]) -> dict[str, Any]:
    server = phase.get("server") or {}
    return {f"server_{k}": server.get(k) for k in SERVER_FIELDS}


def op_rows(document: dict[str, Any], include_failed: bool = False) -> list[dict[str, Any]]:
    """One row per (run, phase, op) with every figure; runs without phases are left out."""
    rows: list[dict[str, Any]] = []
    for index, run in enumerate(document.get("runs", [])):
        if run.get("status") not in ("ok", "interrupted") and not include_failed:
            continue
        for phase in run.get("phases", []):
            wall = phase.get("wall_s") or 0.0
            for name, op in phase.get("ops", {}).items():
                summary = op_summary(op, wall)
                rows.append({
                    "run": index, "label": run["label"], "name": run_name(run),
                    "target": run.get("target", ""),
                    "status": run.get("status", ""), "sweep": sweep_key(run), "repeat": run.get("repeat"),
                    "phase": phase.get("name", "main"), "mode": phase.get("mode", "closed"),
                    "workers": phase.get("workers"), "wall_s": wall,
                    "client_cpu_s": phase.get("client_cpu_s"),
                    "op": name, "count": op.get("count", 0), "hits": op.get("hits", 0),
                    "misses": op.get("misses", 0), "bytes_in": op.get("bytes_in", 0),
                    "bytes_out": op.get("bytes_out", 0),
                    "errors": sum((op.get("errors") or {}).values()),
                    **{k: summary.get(k) for k in SUMMARY_FIELDS},
                    **_server(phase),
                })
    return rows


def phase_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (run, phase): totals over its ops, plus the server figures."""
    rows: list[dict[str, Any]] = []
    for index, run in enumerate(document.get("runs", [])):
        if run.get("status") not in ("ok", "interrupted"):
            continue
        for phase in run.get("phases", []):
            wall = phase.get("wall_s") or 0.0
            ops = phase.get("ops", {})
            count = sum(op.get("count", 0) for name, op in ops.items() if name not in PSEUDO_OPS)
            payload = sum(op.get("bytes_in", 0) + op.get("bytes_out", 0) for op in ops.values())
            p99 = [op_summary(op, wall).get("p99_us") or 0.0 for op in ops.values()]
            server = phase.get("server") or {}
            rows.append({
                "run": index, "label": run["label"], "name": run_name(run), "sweep": sweep_key(run),
                "sweep_values": dict(run.get("sweep") or {}), "repeat": run.get("repeat"),
                "network": (run.get("network") or {}).get("profile") or "",
                "phase": phase.get("name", "main"), "wall_s": wall, "count": count,
                "ops_per_s": count / wall if wall > 0 else 0.0,
                "payload_mbps": payload * 8 / wall / 1e6 if wall > 0 else 0.0,
                "p99_us_max": max(p99) if p99 else None,
                "server_kind": (run.get("server") or {}).get("kind")
                or (run.get("backend") or {}).get("scheme"),
                **_server(phase),
                "has_server": bool(server.get("samples")),
                # per-second figures (Mbps, CPU %) from fewer than two full intervals: marked in tables
                "server_low_samples": bool(server.get("low_samples")),
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


def load_notes(document: dict[str, Any]) -> list[str]:
    """What the load itself could not do, per run and phase: ops of an open-loop schedule
    that fell due but were never sent (the client fell behind its rate), which the latency
    figures cannot show, since they cover only the ops that were sent. And, for a Redis
    Cluster on the engine, the redirects its nodes answered (a slot map that changed under
    the load costs those ops a second round trip)."""
    notes = []
    for run in document.get("runs", []):
        for phase in run.get("phases", []):
            if cluster := phase.get("cluster"):
                notes.append(f"{run_name(run)}: {phase.get('name', 'main')}: {cluster_note(cluster)}")
            missed, share = missed_ops(phase)
            if missed > 0:
                were = "op due was" if missed == 1 else "ops due were"
                notes.append(f"{run_name(run)}: {phase.get('name', 'main')}: the load fell behind its rate: "
                             f"{missed:,} {were} never sent ({fmt_percent(share * 100)} of the schedule); the "
                             "latencies cover the ops that were sent")
    return notes


MISSED_WARNING = 0.01  # a share of the schedule never sent from which the verdict warns: below, a busy moment


def missed_ops(phase: dict[str, Any]) -> tuple[int, float]:
    """An open-loop phase's ops that fell due but were never sent, and their share of its schedule."""
    missed = phase.get("missed") or 0
    sent = sum(op.get("count") or 0 for name, op in (phase.get("ops") or {}).items() if name not in PSEUDO_OPS)
    return missed, missed / max(missed + sent, 1)


def proxy_overhead_note(document: dict[str, Any]) -> str | None:
    """The network proxy's own zero-delay overhead as one line beside every proxied figure,
    or ``None`` when no run went through the proxy.

    The emulated network's figures include what the user-space proxy itself costs (two extra
    loopback hops, and on an idle machine the vCPU wake-ups they need). cachemark measures it
    once per experiment (``environment.proxy_overhead``) so the reader can subtract it: per
    round trip, so an op making several round trips pays it several times.
    """
    runs = document.get("runs", [])
    if not any((run.get("network") or {}).get("proxied") for run in runs):
        return None
    overhead = (document.get("environment") or {}).get("proxy_overhead") or {}
    p50, p99 = overhead.get("added_p50"), overhead.get("added_p99")
    if p50 is None:
        return ("network proxy: its own overhead was not measured with these results; every proxied figure "
                "includes it (30–200 µs per round trip on the machines we measured, see docs/network.md).")
    tail = f", {max(p99, 0):.0f} µs p99" if p99 is not None else ""
    return (f"network proxy: adds {max(p50, 0):.0f} µs p50{tail} per round trip on its own (measured in this "
            f"experiment with no delay configured); every proxied figure includes it — subtract it per round "
            f"trip to compare with a real network.")


def cluster_note(cluster: dict[str, Any]) -> str:
    """``cluster: 3 primaries, 12 MOVED, 4 ASK, 1 node joined (…) (slots moved during the run — …)``."""
    moved, ask = cluster.get("moved", 0), cluster.get("ask", 0)
    # replicas: the engine read from them too (read_from_replicas=1)
    replicas = f" (+{cluster['replicas']} replicas read from)" if "replicas" in cluster else ""
    text = f"cluster: {cluster.get('primaries', 0)} primaries{replicas}, {moved:,} MOVED, {ask:,} ASK"
    if joined := cluster.get("joined"):  # the engine: nodes added to the cluster while it ran, and followed
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
