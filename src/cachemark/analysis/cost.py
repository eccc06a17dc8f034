"""What a million operations cost, and what a month costs at a stated load and data size.

Prices come from a TOML table (the shipped ``prices.toml``, or the user's copy), never
from the network. Two kinds of offering:

- ``instance`` — a node billed per hour. At the throughput one node sustained in the run,
  a million ops cost ``hourly / (ops/s × 3600) × 10⁶``; a month at load ``L`` needs
  ``max(⌈L / measured ops/s⌉, ⌈data / memory_gb⌉)`` nodes.
- ``requests`` — billed per read and per write, plus stored GB-months: a million ops cost
  the mix's share of reads and writes at their prices, whatever the throughput.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..results import Run, as_run
from ..textfile import read_text

READ_OPS = ("get", "exists", "get_many")
SECONDS_PER_MONTH = 730 * 3600


@dataclass(frozen=True)
class Offering:
    name: str
    kind: str  # "instance" | "requests"
    source: str
    hourly: float = 0.0
    memory_gb: float = 0.0
    read_per_million: float = 0.0
    write_per_million: float = 0.0
    gb_month: float = 0.0
    min_gb: float = 0.0


@dataclass(frozen=True)
class PriceTable:
    currency: str
    hours_per_month: float
    offerings: dict[str, Offering]
    where: str

    def offering(self, name: str) -> Offering:
        if name not in self.offerings:
            raise UserError(f"{self.where}: no offering named {name!r}; it has {', '.join(sorted(self.offerings))}")
        return self.offerings[name]


def load_prices(path: Path | None = None) -> PriceTable:
    """The price table at ``path``, or the shipped one."""
    if path is None:
        text, where = resources.files(__package__).joinpath("prices.toml").read_text("utf-8"), "prices.toml"
    else:
        text, where = read_text(path, "price table"), str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{where}: not a price table ({exc})") from None
    offerings = {}
    table = data.get("offerings") or {}
    if not isinstance(table, dict):
        raise UserError(f"{where}: offerings is a table of [offerings.NAME] rows")
    hours = data.get("hours_per_month", 730)
    if not _finite(hours) or not 1 <= hours <= 744:
        raise UserError(f"{where}: hours_per_month must be a number from 1 to 744, not {hours!r}")
    for name, row in table.items():
        if not isinstance(row, dict) or row.get("kind") not in ("instance", "requests"):
            raise UserError(f"{where}: offering {name!r} needs kind = \"instance\" or \"requests\"")
        fields = {k: row[k] for k in ("hourly", "memory_gb", "read_per_million", "write_per_million", "gb_month",
                                      "min_gb") if k in row}
        for key, value in fields.items():
            if not _priced(value):
                raise UserError(f"{where}: offering {name!r}: {key} must be a finite number, 0 or from "
                                f"{PRICE_MIN:g} to {PRICE_MAX:g}, not {value!r}")
        if row["kind"] == "instance" and not fields.get("hourly"):
            raise UserError(f"{where}: offering {name!r}: an instance needs hourly > 0")
        offerings[name] = Offering(name, row["kind"], str(row.get("source", "")), **fields)
    return PriceTable(str(data.get("currency", "USD")), float(hours), offerings, where)


# A price or a size outside these makes the products and quotients of a cost overflow or vanish
# (1e-320 GB of memory divides to infinity): refused where the table is read.
PRICE_MIN, PRICE_MAX = 1e-9, 1e9


def _priced(value: object) -> bool:
    return _finite(value) and (value == 0 or PRICE_MIN <= value <= PRICE_MAX)  # type: ignore[operator]


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class Cost:
    label: str
    offering: Offering
    ops_per_s: float  # measured, all ops of the run's last phase
    read_share: float
    per_million: float
    monthly: float | None = None  # at the stated load and data size
    nodes: int | None = None
    notes: tuple[str, ...] = ()
    caveats: tuple[str, ...] = ()  # the run's warnings that change how its throughput reads, by short name
    warnings: tuple[str, ...] = ()  # ... and their lines (analysis/advise.py ``bearing_on``)


def run_throughput(run: dict[str, Any] | Run) -> tuple[float, float]:
    """(ops/s, share of reads) of the run's last phase: what one node served, and the mix."""
    phases = [p for p in as_run(run).phases if p.wall_s]
    if not phases:
        return 0.0, 0.0
    phase = phases[-1]
    total = sum(op.count for op in phase.ops.values())
    reads = sum(op.count for name, op in phase.ops.items() if name in READ_OPS or "get" in name.split("+"))
    return total / phase.wall_s, (reads / total if total else 0.0)


GIB = 2**30  # a node's memory_gb, as providers list it, and data_gb are read in GiB


@dataclass(frozen=True)
class NodeCount:
    """How many nodes of one offering a deployment needs, and why: the larger of memory and load."""

    memory_nodes: int  # to hold the data: ⌈size ÷ the node's memory⌉ (1 with no size given)
    load_nodes: int  # to serve the peak: ⌈peak ops/s ÷ one node's capacity⌉ (1 with no peak given)
    nodes: int  # max of the two
    monthly_cost: float  # nodes × hourly × hours a month

    @property
    def by_memory(self) -> bool:
        """The data, not the load, sets the count (a tie counts as load)."""
        return self.memory_nodes > self.load_nodes


def nodes_needed(offering: Offering, size_bytes: float | None, peak_ops_per_s: float | None,
                 capacity_ops_per_s: float | None, hours_per_month: float = 730.0) -> NodeCount:
    """Nodes of ``offering`` for ``size_bytes`` of data (the verified cache size; the node's ``memory_gb`` is
    GiB) at ``peak_ops_per_s`` (the traffic's peak rate, or the needs' ``ops_per_s``), when one node serves
    ``capacity_ops_per_s`` (``find_capacity``'s figure within the p99 budget, or a measured throughput).
    A node's own overhead (Redis' reserved memory, replicas) is not in it: size with it if you run them."""
    if offering.kind != "instance":
        raise UserError(f"{offering.name} is billed per request and per GB stored: it has no nodes to count")
    for value, name in ((size_bytes, "size"), (peak_ops_per_s, "peak rate"), (capacity_ops_per_s, "capacity")):
        if value is not None and not (_finite(value) and value >= 0):
            raise UserError(f"{name} {value!r}: must be a finite number ≥ 0")
    memory = math.ceil(size_bytes / (offering.memory_gb * GIB)) if size_bytes and offering.memory_gb else 1
    if peak_ops_per_s:
        if not capacity_ops_per_s:
            raise UserError(f"{offering.name}: a peak of {peak_ops_per_s:,.0f} ops/s needs one node's capacity "
                            "to count nodes by (none was measured)")
        load = math.ceil(peak_ops_per_s / capacity_ops_per_s)
    else:
        load = 1
    nodes = max(memory, load, 1)
    return NodeCount(max(memory, 1), max(load, 1), nodes, nodes * offering.hourly * hours_per_month)


def cost_of(run: dict[str, Any] | Run, offering: Offering, prices: PriceTable, load: float | None = None,
            data_gb: float | None = None, capacity: float | None = None) -> Cost:
    """What ``run``'s target costs on ``offering``: per million ops at its measured throughput and, with a
    ``load`` or ``data_gb``, a month on :func:`nodes_needed` nodes — one node's ``capacity`` within the p99
    budget (``find_capacity``) where given, else the throughput this run's client drove."""
    run = as_run(run)
    ops_per_s, reads = run_throughput(run)
    hours = prices.hours_per_month
    notes: list[str] = []
    if offering.kind == "instance":
        if ops_per_s <= 0:
            raise UserError(f"{run.label}: no throughput measured to price")
        per_million = offering.hourly / (ops_per_s * 3600) * 1e6
        monthly = nodes = None
        if load is not None or data_gb is not None:
            count = nodes_needed(offering, data_gb * GIB if data_gb else None, load, capacity or ops_per_s, hours)
            nodes, monthly = count.nodes, count.monthly_cost
            if count.by_memory:
                notes.append(f"{nodes} nodes for {data_gb:g} GB of data at {offering.memory_gb:g} GB each")
        if capacity:
            notes.append(f"one node serves {capacity:,.0f} ops/s within the p99 budget (its measured capacity)")
        else:
            notes.append("assumes one node serves what this run's client drove; a saturated node serves more")
        return Cost(run.label, offering, ops_per_s, reads, per_million, monthly, nodes, tuple(notes))
    per_million = reads * offering.read_per_million + (1 - reads) * offering.write_per_million
    monthly = None
    if load is not None or data_gb is not None:
        requests = (load or 0) * hours * 3600 / 1e6 * per_million
        stored = max(data_gb or 0.0, offering.min_gb) * offering.gb_month
        monthly = requests + stored
    return Cost(run.label, offering, ops_per_s, reads, per_million, monthly, None, tuple(notes))
