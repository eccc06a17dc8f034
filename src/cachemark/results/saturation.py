"""A load sweep's saturation per target (the results document's ``saturation``), read from its runs."""

from __future__ import annotations

import statistics
from typing import Any

from ..measure.saturation import find_saturation
from ..sweep import LOAD_PARAMS
from .schema import Run


def saturation_summary(runs: list[Run]) -> list[dict[str, Any]]:
    """Per target label and load parameter swept alone over three points or more: the main
    phase's ops/s (all ops) and p99 (the slowest op's) at each point, and where it saturated."""
    groups: dict[tuple[str, str], list[tuple[Any, float, float]]] = {}
    for run in runs:
        sweep = run.sweep or {}
        phase = run.last_phase
        if run.status != "ok" or phase is None or len(sweep) != 1:
            continue
        param = next(iter(sweep))
        if param in LOAD_PARAMS:
            summaries = [phase.summary_of(op) for op in phase.ops.values()]
            total = sum(s.ops_per_s or 0.0 for s in summaries)
            p99 = max((s.p99_us or 0.0 for s in summaries), default=0.0)
            groups.setdefault((run.label, param), []).append((sweep[param], total, p99))
    out = []
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
