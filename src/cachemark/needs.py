"""What an application needs from its cache, as stated by the user (``[needs]`` or a needs file).

Parsed here, low in the layers, so an experiment file is checked when it is read;
:mod:`cachemark.analysis.advise` judges each measured target against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .errors import UserError

NEED_KEYS = ("hit_ratio", "p99_ms", "ops_per_s", "app_servers", "persistent", "tags", "data_gb", "monthly_budget",
             "prices")


@dataclass(frozen=True)
class Needs:
    p99_ms: dict[str, float] = field(default_factory=dict)  # op -> budget
    hit_ratio: float | None = None  # the get hit ratio the cache must give (decide sizes for it)
    ops_per_s: float | None = None  # sustained throughput the cache must serve
    app_servers: int | None = None  # shared across this many app servers
    persistent: bool | None = None  # must survive a restart
    tags: bool | None = None  # must invalidate by tag
    data_gb: float | None = None  # the data set (for cost)
    monthly_budget: float | None = None  # with prices: the most a month may cost
    prices: dict[str, str] = field(default_factory=dict)  # label -> offering in the price table


def parse_needs(data: Any, where: str, stated: bool = False) -> Needs:
    """``stated``: the user gave these needs (a file, a ``[needs]`` table), so an empty one is refused."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: needs are one table ([needs], or keys at the top level), "
                        f"not {type(data).__name__ if not isinstance(data, list) else 'an array of tables'}")
    if stated and not data:  # an empty file would "meet every stated need"
        raise UserError(f"{where}: states no need; give at least one of {', '.join(NEED_KEYS)}")
    unknown = sorted(set(data) - set(NEED_KEYS))
    if unknown:
        raise UserError(f"{where}: unknown need {unknown[0]!r}; needs are {', '.join(NEED_KEYS)}")

    def number(key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
            raise UserError(f"{where}: {key} must be a finite number > 0, not {value!r}")
        return float(value)

    def count(key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 1_000_000 \
                or value != int(value):
            raise UserError(f"{where}: {key} must be a whole number from 1 to 1,000,000, not {value!r}")
        return int(value)

    p99 = data.get("p99_ms", {})
    if not isinstance(p99, dict) or not p99:
        p99 = {} if "p99_ms" not in data else {"?": p99}
    budgets = {str(op): number(f"p99_ms.{op}", v) for op, v in p99.items()}
    if "?" in budgets:
        raise UserError(f"{where}: p99_ms is a table of op budgets, e.g. p99_ms = {{ get = 1.0, set = 2.0 }}")
    from .backends.base import OPS, PSEUDO_OPS

    known = (*OPS, *PSEUDO_OPS)
    strange = [op for op in budgets if not all(part in known for part in op.split("+"))]
    if strange:  # a typo would otherwise never match a measured op and read as "check"
        raise UserError(f"{where}: p99_ms.{strange[0]}: unknown op; ops are {', '.join(known)} "
                        "(sequences as exists+get)")
    for key in ("persistent", "tags"):
        if key in data and not isinstance(data[key], bool):
            raise UserError(f"{where}: {key} must be true or false")
    prices = data.get("prices", {})
    if not isinstance(prices, dict) or not all(isinstance(v, str) for v in prices.values()):
        raise UserError(f"{where}: prices maps a label to an offering name, "
                        "e.g. prices = { redis = \"cache.m7g.large\" }")
    hit_ratio = data.get("hit_ratio")
    if hit_ratio is not None and (isinstance(hit_ratio, bool) or not isinstance(hit_ratio, int | float)
                                  or not 0 < hit_ratio < 1):
        raise UserError(f"{where}: hit_ratio is a get hit ratio between 0 and 1 (e.g. 0.9), not {hit_ratio!r}")
    return Needs(
        p99_ms=budgets, hit_ratio=float(hit_ratio) if hit_ratio is not None else None,
        ops_per_s=number("ops_per_s", data["ops_per_s"]) if "ops_per_s" in data else None,
        app_servers=count("app_servers", data["app_servers"]) if "app_servers" in data else None,
        persistent=data.get("persistent"), tags=data.get("tags"),
        data_gb=number("data_gb", data["data_gb"]) if "data_gb" in data else None,
        monthly_budget=number("monthly_budget", data["monthly_budget"]) if "monthly_budget" in data else None,
        prices={str(k): v for k, v in prices.items()},
    )


