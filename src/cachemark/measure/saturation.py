"""The saturation point of a load sweep (workers, rate, connections, pipeline): the first
point after which throughput stops rising while p99 latency climbs (results/saturation.py
applies it to a results document's runs)."""

from __future__ import annotations

import itertools
from typing import Any


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
