"""From a miss-ratio curve to the answer: how many objects, how many bytes of which server,
and what latency the application then sees.

The object count for a target hit ratio comes from the curve; the bytes from the measured
bytes per item of each server (:mod:`.footprint`), never a guess; the latency from a run's
own hit and miss histograms, mixed in the proportion the hit ratio says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..measure.histogram import Histogram
from ..results import OpResult, Run, as_run
from .footprint import Footprint
from .mrc import Curve

DEFAULT_TARGETS = (0.8, 0.9, 0.95, 0.99)


@dataclass
class SizeAnswer:
    hit_ratio: float
    # None: no cache size reaches it (cold misses alone exceed 1 - hit ratio), or, when not
    # ``resolved``, the sample cannot say which size does
    objects: float | None
    share_of_objects: float | None
    bytes_by_server: dict[str, float] = field(default_factory=dict)
    resolved: bool = True
    estimated: bool = False  # the size comes from a sampled curve beyond its exact part


def answers(curve: Curve, footprints: list[Footprint], targets: tuple[float, ...] = DEFAULT_TARGETS,
            ) -> list[SizeAnswer]:
    out = []
    for target in targets:
        objects = curve.size_for(target)
        if not curve.size_resolved(objects):
            out.append(SizeAnswer(target, None, None, resolved=False))
            continue
        share = objects / curve.objects if objects is not None and curve.objects else None
        by_server = {fp.server: objects * fp.bytes_per_item for fp in footprints} if objects is not None else {}
        estimated = objects is not None and objects > curve.exact_up_to
        out.append(SizeAnswer(target, objects, share, by_server, estimated=estimated))
    return out


@dataclass
class ExpectedLatency:
    hit_ratio: float
    mean_us: float
    p99_us: float


def _decode(op: OpResult, outcome: str) -> Histogram | None:
    text = op.histograms.get(outcome)
    return Histogram.decode(text) if text else None


def mixed_latency(hit: Histogram, miss: Histogram, hit_ratio: float) -> ExpectedLatency:
    """Mean and p99 of a get whose outcome is a hit with probability ``hit_ratio``: the two
    measured distributions mixed in that proportion (ns in, µs out)."""
    parts = []
    for hist, weight in ((hit, hit_ratio), (miss, 1.0 - hit_ratio)):
        if hist.total and weight > 0:
            values, counts = zip(*hist.distribution(), strict=True)
            parts.append((np.asarray(values, dtype=np.float64), np.asarray(counts, dtype=np.float64)
                          * weight / hist.total))
    values = np.concatenate([v for v, _ in parts])
    weights = np.concatenate([w for _, w in parts])
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    cumulative = np.cumsum(weights) / weights.sum()
    p99 = float(values[min(int(np.searchsorted(cumulative, 0.99)), len(values) - 1)])
    mean = float(np.sum(values * weights) / weights.sum())
    return ExpectedLatency(hit_ratio, mean / 1000, p99 / 1000)


def expected_latencies(run: dict[str, Any] | Run, targets: tuple[float, ...]) -> list[ExpectedLatency] | None:
    """For each target hit ratio: the run's get latency with that share of hits (None when the
    run has no get with both hits and misses to learn from)."""
    for phase in as_run(run).phases:
        op = phase.ops.get("get")
        if not op:
            continue
        hit, miss = _decode(op, "hit"), _decode(op, "miss")
        if hit is not None and miss is not None and hit.total and miss.total:
            return [mixed_latency(hit, miss, target) for target in targets]
    return None
