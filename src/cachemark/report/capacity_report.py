"""``capacity`` as answer blocks: the capacity of each target within its budget, and the steps that found it."""

from __future__ import annotations

from typing import Any

from ..analysis.capacity import CapacityResult
from .blocks import Block


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e6:.3g} µs" if seconds < 1e-3 else f"{seconds * 1e3:.3g} ms"


def budget_text(budgets: dict[str, float]) -> str:
    return ", ".join(f"{op} p99 ≤ {_ms(b)}" for op, b in budgets.items())


def headline(result: CapacityResult) -> str:
    """``redis: 41,200 ops/s within get p99 ≤ 1 ms (± 1,300: within at 40,600, over at 41,900)``."""
    within = budget_text(result.budgets)
    if result.status != "ok":
        return f"{result.label}: {result.status}: {result.reason}"
    if result.capacity_ops_per_s is None:
        lowest = min(result.points, key=lambda p: p.rate, default=None)
        if lowest is None:
            return f"{result.label}: no open-loop step was run: {within}"
        return (f"{result.label}: over budget at every rate tried (down to {_rate(lowest.rate)} ops/s, where "
                f"{lowest.why}): {within}. Even a light load's p99 is over it: a floor of this client, network and "
                "host (a busy host raises it), or a budget tighter than the server gives")
    if result.high is None:
        return (f"{result.label}: at least {_rate(result.capacity_ops_per_s)} ops/s within {within} "
                "(no rate tried went over it)")
    return (f"{result.label}: {_rate(result.capacity_ops_per_s)} ops/s within {within} "
            f"(± {_rate(result.precision)}: within at {_rate(result.low)}, over at {_rate(result.high)})")


def capacity_blocks(results: list[CapacityResult]) -> list[Block]:
    """One block per target: the capacity first, then the latency-vs-rate points, then whose tail it is."""
    blocks = []
    for result in results:
        ops = list(result.budgets)
        columns = ["step", "offered ops/s", "achieved ops/s", *(f"{op} p99" for op in ops), "", "why"]
        rows = []
        for step in sorted(range(len(result.points)), key=lambda i: result.points[i].rate):  # by rate
            point = result.points[step]
            rows.append([str(step + 1), _rate(point.rate), _rate(point.achieved),
                         *(_ms(point.p99_s.get(op)) for op in ops), "within" if point.within else "OVER", point.why])
        trust = "trusted" if result.tail_trusted else "NOT trusted for tails"
        notes = [f"load path: {result.trusted_path} ({trust}): {result.path_note}.",
                 f"closed loop first: {_rate(result.closed_loop_ops_per_s)} ops/s; open loop, Poisson arrivals, "
                 "latency from each op's intended start (coordinated-omission corrected); "
                 f"{len(result.points)} steps in {result.seconds:.0f} s."]
        notes += [f"warning: {line}" for line in result.warnings]
        blocks.append(Block(f"Capacity within budget: {result.label}", [headline(result)], columns, rows, notes,
                            left=1, kind="verdict"))
    return blocks


def capacity_document(results: list[CapacityResult]) -> dict[str, Any]:  # Any: the JSON output
    """``--json``: ``capacity_ops_per_s`` per target label, then each target's search."""
    return {"capacity_ops_per_s": {r.label: None if r.capacity_ops_per_s is None else round(r.capacity_ops_per_s, 1)
                                   for r in results},
            "targets": [r.to_json() for r in results]}
