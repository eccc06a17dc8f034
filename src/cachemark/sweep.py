"""Sweeps: one run per point of one or more swept workload fields.

``--sweep value_size=1024,10000,100000 --sweep workers=1,2,4`` expands to the cartesian
product of the points. Part of the experiment's definition, read before anything runs;
what a sweep of load shows (its saturation point) is measured in ``measure/saturation.py``.
"""

from __future__ import annotations

import itertools
from typing import Any

from .errors import SpecError

SWEEPABLE = ("value_size", "workers", "rate", "keys", "key_dist", "mix", "ttl", "connections", "pipeline")
LOAD_PARAMS = ("workers", "rate", "connections", "pipeline")


def parse_sweep(items: list[str]) -> dict[str, list[str]]:
    """``["value_size=1024,10000"]`` -> ``{"value_size": ["1024", "10000"]}``."""
    sweep: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or not values.strip():
            raise SpecError(f"sweep {item!r}: expected field=v1,v2,... e.g. value_size=1024,10000")
        if name not in SWEEPABLE:
            raise SpecError(f"sweep field {name!r} is not sweepable; allowed: {', '.join(SWEEPABLE)}")
        separator = ";" if name == "mix" else ","  # a mix contains commas itself
        sweep[name] = [v.strip() for v in values.split(separator) if v.strip()]
    return sweep


def sweep_points(sweep: dict[str, list[Any]]) -> list[dict[str, Any]]:
    if not sweep:
        return [{}]
    names = list(sweep)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(sweep[n] for n in names))]
