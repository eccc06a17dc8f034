"""The saturation point of a load sweep (workers, rate, connections, pipeline): the first
point after which throughput stops rising while p99 latency climbs."""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from ..sweep import LOAD_PARAMS


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def find_saturation(points: list[tuple[Any, float, float]], gain: float = 0.05, climb: float = 0.25) -> Any | None:
    """The swept value where throughput stopped rising (< ``gain``) while p99 rose (> ``climb``).

    ``points`` are (swept value, ops/s, p99 µs) in sweep order. Returns the last value
    before the flat-and-slower step, or None when throughput kept rising.
    """
    ordered = sorted(points, key=lambda p: (_number(p[0]) is None, _number(p[0]) or 0.0))
    for (value, ops, p99), (_, next_ops, next_p99) in itertools.pairwise(ordered):
        if ops > 0 and next_ops < ops * (1 + gain) and next_p99 > p99 * (1 + climb):
            return value
    return None


def saturation_summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per target label and load parameter: the saturation point of the main op, if any."""
    out = []
    groups: dict[tuple[str, str], list[tuple[Any, float, float]]] = {}
    for run in runs:
        sweep = run.get("sweep") or {}
        if run["status"] != "ok" or not run["phases"]:
            continue
        for param in LOAD_PARAMS:
            if param in sweep and len(sweep) == 1:
                ops = run["phases"][-1]["ops"]
                total = sum(op["summary"]["ops_per_s"] for op in ops.values())
                p99 = max(op["summary"]["p99_us"] for op in ops.values())
                groups.setdefault((run["label"], param), []).append((sweep[param], total, p99))
    for (label, param), raw in groups.items():
        by_value: dict[Any, list[tuple[float, float]]] = {}
        for value, ops, p99 in raw:  # repeats of one point count once, at their median
            by_value.setdefault(value, []).append((ops, p99))
        points = [(v, statistics.median(o for o, _ in m), statistics.median(p for _, p in m))
                  for v, m in by_value.items()]
        if len(points) >= 3:
            out.append({"label": label, "param": param, "saturation": find_saturation(points),
                        "points": [{"value": v, "ops_per_s": o, "p99_us": p} for v, o, p in points]})
    return out
