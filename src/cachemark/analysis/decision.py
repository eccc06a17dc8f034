"""The decision's figures: what each candidate cache was sized at, measured to give, can carry and costs,
and which one to deploy.

``cachemark decide`` (:mod:`cachemark.cli.decide_command`) fills these in, one step at a time
(:mod:`.decide`); the reports (:mod:`cachemark.report.decision_report`) only draw them. The rules that
turn figures into a choice live here, so they can be read (and tested) apart from the measuring:
a candidate is *rejected* by the first need it fails, the others are ranked by monthly cost, then by
p99 at the traffic's peak rate. No weights, no score.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Traffic:
    """What the traffic is, as read from the trace (or drawn for a synthetic workload)."""

    source: str
    requests: int
    op_counts: dict[str, int]
    objects: int
    working_set_bytes: int
    peak_rate: float  # requests/s in the busiest second (bucket) of the trace
    mean_rate: float
    duration_s: float
    ttl_share: float  # share of writes with a TTL
    ttl_s: float = 0.0  # the median TTL of writes with one
    zipf_alpha: float | None = None  # the popularity's fitted Zipf slope
    value_sizes: str = "100"  # the value sizes requested, as a workload's value_size (deciles, weighted)
    notes: list[str] = field(default_factory=list)

    @property
    def gets(self) -> int:
        return self.op_counts.get("get", 0)


@dataclass
class Setting:
    """The server setting that gives the size: ``maxmemory`` (Redis), ``-m`` (memcached), ``max_entries``."""

    name: str  # as the server's own configuration spells it: maxmemory, -m, max_entries
    value: int  # in the setting's own unit
    unit: str  # "bytes" | "MiB" | "objects"
    url_params: dict[str, str]  # how cachemark spawns a server configured so (spawn:redis?maxmemory=…)
    bytes: float  # the memory it stands for (a node must hold it)

    @property
    def shown(self) -> str:
        if self.unit == "bytes":
            return f"{self.name} {self.value} ({self.value / 2**20:,.1f} MiB)"
        if self.unit == "MiB":
            return f"{self.name} {self.value}"
        return f"{self.name}={self.value:,}"


@dataclass
class Sizing:
    """The size chosen for the hit-ratio need, and what the real server gave at it."""

    setting: Setting | None  # None: no size reaches the need (see ``why``)
    predicted: float | None  # get hit ratio the simulation of this server predicts at the setting
    measured: float | None = None  # get hit ratio the replay on the configured server measured
    why: str = ""  # a size not found, or a measured figure off the predicted one: the reason
    curve: dict[str, Any] = field(default_factory=dict)  # the byte curve drawn: {"bytes": [...], "hit_ratio": [...]}

    @property
    def off_by(self) -> float | None:
        if self.predicted is None or self.measured is None:
            return None
        return self.measured - self.predicted


@dataclass
class Capacity:
    """The highest rate at which every budgeted op's p99 stays within budget (open loop, Poisson)."""

    ops_per_s: float | None  # None: not even the lowest rate tried kept within budget
    low: float  # the bracket the search ended with: within budget at ``low``, not at ``high``
    high: float | None
    points: list[dict[str, Any]]  # {"rate", "achieved", "p99_ms": {op: ms}, "within": bool}
    trusted: str  # the load path whose tails the budget was judged on, and why
    # at the traffic's peak rate shared by the nodes the load needs (peak ÷ load nodes a node): measured
    # there, an open-loop step of its own; else read off the search's points (interpolated)
    p99_at_peak_ms: dict[str, float] = field(default_factory=dict)
    per_node_rate: float = 0.0
    p99_at_peak_measured: bool = False
    p99_at_peak_steps: int = 1  # 3 where the first step, over budget, contradicted the search: the median
    warnings: list[str] = field(default_factory=list)  # the search's: what changes how its figure reads


@dataclass
class NodePlan:
    """How many of which node, and what a month of them costs."""

    offering: str
    nodes: int
    memory_nodes: int  # nodes the verified size needs
    load_nodes: int  # nodes the peak rate needs at the measured capacity
    monthly: float
    currency: str


@dataclass
class Assessment:
    """One candidate, all its figures, and the needs it fails (empty: it meets every one)."""

    label: str
    url: str  # as shown (redacted)
    kind: str  # redis | memcached | memory | ...
    client: str  # the client the figures were measured through
    sizing: Sizing | None = None
    capacity: Capacity | None = None
    plan: NodePlan | None = None
    fails: list[tuple[str, str]] = field(default_factory=list)  # (need, why)
    notes: list[str] = field(default_factory=list)

    def headroom(self, peak_rate: float) -> float | None:
        """Capacity ÷ the traffic's peak rate: how much more than its busiest second one node carries."""
        if self.capacity is None or self.capacity.ops_per_s is None or peak_rate <= 0:
            return None
        return self.capacity.ops_per_s / peak_rate


@dataclass
class Decision:
    traffic: Traffic
    target_hit_ratio: float
    budgets_ms: dict[str, float]
    assessments: list[Assessment]
    network: str | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ranked(self) -> list[Assessment]:
        """Candidates meeting every need, cheapest a month first (then the lowest p99 at the peak rate)."""
        meeting = [a for a in self.assessments if not a.fails]
        return sorted(meeting, key=lambda a: (a.plan.monthly if a.plan else 0.0, _first_p99(a)))

    @property
    def chosen(self) -> Assessment | None:
        ranked = self.ranked
        return ranked[0] if ranked else None

    @property
    def runner_up(self) -> Assessment | None:
        ranked = self.ranked
        return ranked[1] if len(ranked) > 1 else None

    @property
    def rejected(self) -> list[Assessment]:
        return [a for a in self.assessments if a.fails]


def _first_p99(a: Assessment) -> float:
    if a.capacity is None or not a.capacity.p99_at_peak_ms:
        return float("inf")
    return max(a.capacity.p99_at_peak_ms.values())
