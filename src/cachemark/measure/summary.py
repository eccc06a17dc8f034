"""Merging per-worker op results and summarising them (ops/s, hit ratio, percentiles)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .histogram import Histogram

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
_LATENCY_OUTCOMES = ("hit", "miss", "ok")


def merge_ops(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge the ``ops`` dicts of several workers (same phase) into one."""
    merged: dict[str, Any] = {}
    for part in parts:
        for name, op in part.items():
            into = merged.setdefault(name, {
                "count": 0, "hits": 0, "misses": 0, "errors": Counter(), "bytes_out": 0, "bytes_in": 0,
                "_hist": {}, "_hist_u": {},
            })
            for field in ("count", "hits", "misses", "bytes_out", "bytes_in"):
                into[field] += op[field]
            into["errors"].update(op["errors"])
            for key, store in (("histograms", "_hist"), ("histograms_uncorrected", "_hist_u")):
                for outcome, encoded in op.get(key, {}).items():
                    hist = Histogram.decode(encoded)
                    if outcome in into[store]:
                        into[store][outcome].add(hist)
                    else:
                        into[store][outcome] = hist
    for op in merged.values():
        hist, hist_u = op.pop("_hist"), op.pop("_hist_u")
        op["errors"] = dict(op["errors"])
        op["histograms"] = {k: v.encode() for k, v in sorted(hist.items())}
        if hist_u:
            op["histograms_uncorrected"] = {k: v.encode() for k, v in sorted(hist_u.items())}
        op["_merged"] = (hist, hist_u)
    return merged


def latency_histogram(histograms: dict[str, Histogram]) -> Histogram:
    """Successful outcomes together (errors are reported apart); errors only if nothing else."""
    total = Histogram()
    found = False
    for outcome in _LATENCY_OUTCOMES:
        if outcome in histograms:
            total.add(histograms[outcome])
            found = True
    if not found and "error" in histograms:
        total.add(histograms["error"])
    return total


def summarize(op: dict[str, Any], wall_s: float, histograms: dict[str, Histogram]) -> dict[str, Any]:
    hist = latency_histogram(histograms)
    p50, p90, p99, p999 = hist.percentiles(PERCENTILES)
    hits, misses = op.get("hits", 0), op.get("misses", 0)
    reads = hits + misses
    return {
        "ops_per_s": op["count"] / wall_s if wall_s > 0 else 0.0,
        "hit_ratio": hits / reads if reads else None,
        "error_count": sum(op.get("errors", {}).values()),
        "p50_us": p50 / 1000, "p90_us": p90 / 1000, "p99_us": p99 / 1000, "p999_us": p999 / 1000,
        "max_us": hist.max / 1000, "mean_us": hist.mean / 1000,
        # count ÷ Σ latency (Mollenhour's cache-benchmark "ops/s"): what one client doing nothing else gets
        "ops_per_latency_s": 1e9 / hist.mean if hist.mean else 0.0,
    }


def summarize_ops(merged: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """Attach a ``summary`` (and ``summary_uncorrected`` in open loop) to each merged op."""
    for op in merged.values():
        hist, hist_u = op.pop("_merged")
        op["summary"] = summarize(op, wall_s, hist)
        if hist_u:
            op["summary_uncorrected"] = summarize(op, wall_s, hist_u)
    return merged


def summary_from_result(op: dict[str, Any], wall_s: float, corrected: bool = True) -> dict[str, Any]:
    """Recompute a summary from a saved op result (e.g. after loading a results file)."""
    key = "histograms" if corrected else "histograms_uncorrected"
    hists = {k: Histogram.decode(v) for k, v in op.get(key, {}).items()}
    return summarize(op, wall_s, hists)


def merge_timeseries(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Merge per-worker per-second entries by second: ops and errors add, histograms merge. Each
    second keeps its slowest op (``max_us``): where in the phase a stall happened (report/verdict.py)."""
    seconds: dict[int, dict[str, Any]] = {}
    for series in parts:
        for entry in series:
            into = seconds.setdefault(entry["t"], {"t": entry["t"], "ops": 0, "errors": 0, "_h": Histogram()})
            into["ops"] += entry["ops"]
            into["errors"] += entry["errors"]
            into["_h"].add(Histogram.decode(entry["histogram"]))
    out = []
    for t in sorted(seconds):
        entry = seconds[t]
        hist = entry.pop("_h")
        p50, p99 = hist.percentiles((50.0, 99.0))
        out.append({**entry, "p50_us": p50 / 1000, "p99_us": p99 / 1000, "max_us": hist.max / 1000})
    return out
