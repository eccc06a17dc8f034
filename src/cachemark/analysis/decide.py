"""``cachemark decide``'s steps, joined: characterise the traffic, size each candidate as its server accounts
and evicts, verify the size on the real server, find its capacity within the p99 budget, price the nodes and
judge every need — each join checked by configuring what it computed and measuring.

Every step is someone else's (sizing: :mod:`.server_size`; capacity: :mod:`.capacity`; prices: :mod:`.cost`);
this module only feeds one's figure into the next and says what each candidate fails
(:mod:`.decision` holds the figures and the ranking rules).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from ..needs import Needs
from .cost import PriceTable
from .decision import Assessment, Decision, NodePlan, Traffic

#: The hit ratio aimed at when the needs state none: this share of what an unbounded cache gets.
DEFAULT_SHARE_OF_BEST = 0.95

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Candidate:
    """A cache to consider: a target URL (a ``spawn:`` kind or a server), what kind of store it is and
    the client it is measured through."""

    url: str
    label: str
    kind: str  # redis | memcached | memory
    client: str
    shared: bool  # a server every app server reaches (per-process caches are not)
    persistent: bool | None  # survives a restart (None: depends on its configuration)


_KINDS = {
    "redis": ("redis", True, None), "valkey": ("redis", True, None), "memcached": ("memcached", True, False),
    "memory": ("memory", False, False),
}


def candidate(url: str) -> Candidate:
    """A candidate from a target URL: ``spawn:redis``, ``spawn:memcached?client=pylibmc``, ``memory://``.
    Its label is what it is (``redis``), whichever client measures it: the client has a column of its own."""
    from ..schemes import scheme, spawned_as
    from ..target import parse_target

    target = parse_target(url)
    name = spawned_as(target.path).name if scheme(target.scheme, target.redacted).spawner else target.scheme
    if name not in _KINDS:
        raise UserError(f"{target.redacted}: decide sizes Redis (or Valkey), memcached and in-process memory "
                        f"caches, not {name}://")
    kind, shared, persistent = _KINDS[name]
    client = target.params.get("client") or {"redis": "redis-py", "memcached": "pymemcache",
                                            "memory": "in-process"}[kind]
    return Candidate(url, kind, kind, client, shared, persistent)


def labelled(candidates: list[Candidate]) -> list[Candidate]:
    """Labels told apart where two candidates are of one kind: ``redis (engine)``, ``redis (go-redis)``."""
    from dataclasses import replace

    kinds = [c.kind for c in candidates]
    return [replace(c, label=f"{c.kind} ({c.client})") if kinds.count(c.kind) > 1 else c for c in candidates]


def default_candidates(needs: Needs) -> list[str]:
    """Spawned Redis and memcached, measured through the native engine (its open loop is the one whose tail
    is the server's: a capacity measured through a blocking client is a lower bound), and an in-process cache
    where the needs allow one (one app server, nothing to survive a restart). Name the app's own client
    with ``-t spawn:redis?client=…`` to measure through it."""
    urls = ["spawn:redis?client=engine", "spawn:memcached?client=engine"]
    if (needs.app_servers or 1) == 1 and not needs.persistent:
        urls.append("memory://")
    return urls


def characterise(requests: Any) -> Traffic:
    """The traffic's figures a decision rests on: its ops, objects, working set, TTLs, popularity and
    peak rate (the busiest second of its own clock)."""
    import numpy as np

    from ..workload.traces.record import GET, SET
    from ..workload.traces.stats import fit_zipf

    if not len(requests):
        raise UserError(f"{requests.description}: no requests to decide on")
    ids, index, counts = np.unique(requests.ids, return_inverse=True, return_counts=True)
    largest = np.zeros(len(ids), dtype=np.uint64)
    np.maximum.at(largest, index, requests.value_size.astype(np.uint64) + requests.key_size.astype(np.uint64))
    seconds = (requests.t_us - requests.t_us[0]) // 1_000_000
    per_second = np.bincount(seconds)
    full = per_second[:-1] if len(per_second) > 1 else per_second
    writes = requests.op == SET
    with_ttl = writes & (requests.ttl_s > 0)
    carrying = ((requests.op == GET) | writes) & (requests.value_size > 0)
    sizes = requests.value_size[carrying]
    alpha, _ = fit_zipf(counts)
    return Traffic(
        source=requests.description, requests=len(requests), op_counts=requests.op_counts(), objects=len(ids),
        working_set_bytes=int(largest.sum()), peak_rate=float(full.max()) if len(full) else 0.0,
        mean_rate=len(requests) / max(len(per_second), 1), duration_s=requests.span_s,
        ttl_share=float(with_ttl.sum() / writes.sum()) if writes.any() else 0.0,
        ttl_s=float(np.median(requests.ttl_s[with_ttl])) if with_ttl.any() else 0.0,
        zipf_alpha=alpha, value_sizes=_deciles(sizes))


def _deciles(sizes: Any) -> str:
    """Value sizes as ten equally weighted sizes, e.g. ``500:1,812:1,…``: a workload's value_size that draws
    them in the traffic's proportions."""
    import numpy as np

    if not len(sizes):
        return "100"
    weights: dict[int, int] = {}
    for size in np.percentile(sizes, np.arange(5, 100, 10), method="nearest").astype(int):
        weights[max(1, int(size))] = weights.get(max(1, int(size)), 0) + 1
    return ",".join(f"{size}:{w}" for size, w in sorted(weights.items()))


def traffic_workload(t: Traffic, keys_cap: int = 1_000_000) -> Any:
    """A synthetic workload with the traffic's mix, popularity and value sizes: what a capacity search
    offers at each rate (a replay is bound to its own clock; a rate search needs ops drawn at any rate)."""
    from ..spec import Workload

    ops = {op: n for op, n in t.op_counts.items() if op in ("get", "set", "delete") and n}
    key_dist = f"zipf:{min(max(t.zipf_alpha, 0.01), 2.0):.2f}" if t.zipf_alpha else "uniform"
    return Workload(keys=max(1, min(t.objects, keys_cap)), key_dist=key_dist, value_size=t.value_sizes,
                    mix=ops or {"get": 1.0}, ttl=0.0, prefill=True)


def cheapest_nodes(bytes_needed: float, peak_rate: float, capacity: float | None, prices: PriceTable,
                   offering: str | None = None) -> NodePlan | None:
    """The cheapest month of instance nodes that hold ``bytes_needed`` and carry ``peak_rate`` at
    ``capacity`` ops/s each (:func:`.cost.nodes_needed`: the larger of memory and load nodes), over every
    instance offering of the table, or the one named."""
    from .cost import nodes_needed

    names = [offering] if offering else [n for n, o in prices.offerings.items() if o.kind == "instance"]
    best: NodePlan | None = None
    for name in names:
        o = prices.offering(name)
        if o.kind != "instance" or o.memory_gb <= 0:
            continue
        count = nodes_needed(o, bytes_needed, peak_rate if capacity else None, capacity, prices.hours_per_month)
        plan = NodePlan(name, count.nodes, count.memory_nodes, count.load_nodes, count.monthly_cost, prices.currency)
        if best is None or plan.monthly < best.monthly:
            best = plan
    return best


def judge(a: Assessment, c: Candidate, needs: Needs, target_hit_ratio: float, peak_rate: float,
          tolerance: float = 0.02) -> list[tuple[str, str]]:
    """The needs candidate ``a`` fails, each with the figure that decided it."""
    fails: list[tuple[str, str]] = []
    if needs.app_servers and needs.app_servers > 1 and not c.shared:
        fails.append((f"shared across {needs.app_servers} app servers",
                      "a per-process cache: each app server process has its own copy"))
    if needs.persistent and c.persistent is False:
        fails.append(("survives a restart", "kept in memory only"))
    s = a.sizing
    if s is not None:
        if s.setting is None:
            fails.append((f"get hit ratio ≥ {target_hit_ratio:.2f}", s.why or "no size reaches it"))
        elif s.measured is not None and s.measured < target_hit_ratio - tolerance:
            fails.append((f"get hit ratio ≥ {target_hit_ratio:.2f}",
                          f"{s.measured:.3f} measured at {s.setting.shown} (predicted {s.predicted:.3f})"))
    cap = a.capacity
    if cap is not None and needs.p99_ms:
        if cap.ops_per_s is None:
            lowest = min((p["rate"] for p in cap.points), default=None)
            fails.append(("p99 within budget", "over budget at every rate tried"
                          + (f", down to {lowest:,.0f} ops/s" if lowest else "")))
        else:
            # more nodes share a peak beyond one node's capacity: each then carries peak ÷ nodes
            over = {op: ms for op, ms in cap.p99_at_peak_ms.items() if op in needs.p99_ms and ms > needs.p99_ms[op]}
            for op, ms in over.items():
                fails.append((f"{op} p99 ≤ {needs.p99_ms[op]:g} ms at the peak rate",
                              f"{ms:.3g} ms at {cap.per_node_rate:,.0f} ops/s a node"))
    if needs.monthly_budget is not None and a.plan is not None and a.plan.monthly > needs.monthly_budget:
        fails.append((f"costs ≤ {needs.monthly_budget:g} a month",
                      f"{a.plan.nodes} × {a.plan.offering}: {a.plan.monthly:,.0f} {a.plan.currency} a month"))
    return fails


def aimed_hit_ratio(needs_hit_ratio: float | None, best: float) -> tuple[float, str]:
    """The get hit ratio to size for, and how it was chosen."""
    if needs_hit_ratio is not None:
        return needs_hit_ratio, "the needs' hit_ratio"
    aim = math.floor(DEFAULT_SHARE_OF_BEST * best * 1000) / 1000
    return aim, (f"no hit_ratio in the needs: {DEFAULT_SHARE_OF_BEST:.0%} of the {best:.3f} an unbounded cache "
                 "gets on this traffic")


def decide(requests: Any, traffic: Traffic, needs: Needs, urls: list[str], prices: PriceTable,
           network: Any = None, verify: bool = True, progress: Progress | None = None,
           capacity_options: dict[str, Any] | None = None) -> Decision:
    """Every candidate of ``urls`` sized, verified, searched for capacity, priced and judged against
    ``needs``; ``requests`` the traffic as :class:`~.requests.Requests`."""
    import time

    started = time.monotonic()
    say = progress or (lambda _text: None)
    candidates = labelled([candidate(u) for u in urls])
    best = _best_hit_ratio(requests)
    aim, aim_note = aimed_hit_ratio(needs.hit_ratio, best)
    peak = needs.ops_per_s or traffic.peak_rate
    budgets = dict(needs.p99_ms)
    decision = Decision(traffic, aim, budgets, [], network=getattr(network, "name", None) if network else None)
    decision.notes.append(f"Sized for a get hit ratio of {aim:.3f}: {aim_note}.")
    if needs.ops_per_s:
        decision.notes.append(f"Load: the needs' {needs.ops_per_s:,.0f} ops/s (the trace's own peak is "
                              f"{traffic.peak_rate:,.0f}/s).")
    if budgets:
        decision.notes.append("Nodes for the load count each node at the capacity measured here, on this host's "
                              "server: a node type with fewer or slower cores carries less.")
    workload = traffic_workload(traffic)
    for c in candidates:
        a = Assessment(c.label, _shown(c.url), c.kind, c.client)
        decision.assessments.append(a)
        say(f"{c.label}: sizing for a get hit ratio of {aim:.3f}")
        a.sizing, setting_params = _size(c, requests, aim)
        if verify and a.sizing.setting is not None:
            say(f"{c.label}: verifying {a.sizing.setting.shown} on a real server (replaying the traffic)")
            _verify(c, requests, a)
        if a.sizing.setting is None:
            a.notes.append("not load-searched: no size meets the hit ratio")
        elif budgets and not c.shared:
            a.notes.append("in-process: no network hop, no server to load; its latency is the app's own")
        elif budgets:
            a.capacity = _capacity(c, setting_params, budgets, workload, network, peak, say,
                                   capacity_options or {})
        capacity = a.capacity.ops_per_s if a.capacity is not None else None
        if c.shared and a.sizing.setting is not None:
            offering = needs.prices.get(c.label) or needs.prices.get(c.kind)
            a.plan = cheapest_nodes(a.sizing.setting.bytes, peak, capacity, prices, offering)
        elif not c.shared:
            a.notes.append("runs inside each app server process: no node to buy, its memory is the app's")
        if a.capacity is not None:
            nodes = a.plan.load_nodes if a.plan is not None else 1
            a.capacity.per_node_rate = peak / nodes
            say(f"{c.label}: measuring p99 at the peak of {a.capacity.per_node_rate:,.0f} ops/s per node")
            a.capacity.p99_at_peak_ms, a.capacity.p99_at_peak_measured, a.capacity.p99_at_peak_steps = _p99_at_peak(
                c, setting_params, budgets, workload, network, a.capacity, capacity_options or {})
        a.fails = judge(a, c, needs, aim, peak)
    decision.seconds = time.monotonic() - started
    return decision


def _shown(url: str) -> str:
    from ..target import shown

    return shown(url)


def _best_hit_ratio(requests: Any) -> float:
    """The get hit ratio of an unbounded cache on this traffic (cache-aside, deletes and TTLs still miss)."""
    from .server_size import simulate

    total = float(requests.value_size.astype("u8").sum() + requests.key_size.astype("u8").sum()) + 1
    return float(simulate(requests, "lru", [total])[0])


def _size(c: Candidate, requests: Any, aim: float) -> tuple[Any, dict[str, str]]:
    """The candidate's setting for the aimed hit ratio (:func:`.server_size.size_server`: its server as it
    accounts and evicts), and the URL parameters that configure it."""
    from ..target import parse_target
    from .decision import Setting, Sizing
    from .server_size import size_server

    # a Redis candidate evicts by its URL's maxmemory_policy (allkeys-lru unless it says otherwise)
    eviction = str(parse_target(c.url).params.get("maxmemory_policy", "allkeys-lru"))
    sized = size_server(requests, c.kind, target=aim, policies=(), eviction=eviction)
    curve = {"bytes": list(sized.curve.bytes), "hit_ratio": list(sized.curve.hit_ratios)}
    if sized.setting is None:
        return Sizing(None, None, why="; ".join(sized.notes[-1:]) or f"no setting reaches {aim:.3f}", curve=curve), {}
    name, unit = {"maxmemory": ("maxmemory", "bytes"), "memory_mb": ("-m", "MiB")}.get(
        sized.param, (sized.param, "objects"))
    params = {k: str(v) for k, v in sized.spawn_params.items()}
    setting = Setting(name, int(sized.setting), unit, params, float(sized.bytes or 0))
    sizing = Sizing(setting, sized.predicted, curve=curve)
    sizing.server_size = sized  # type: ignore[attr-defined]  # kept for the verification
    return sizing, params


def _verify(c: Candidate, requests: Any, a: Assessment) -> None:
    from .server_size import verify

    sizing = a.sizing
    assert sizing is not None and sizing.setting is not None
    check = verify(sizing.server_size, requests)  # type: ignore[attr-defined]
    sizing.measured = check.measured
    if not check.within:
        sizing.why = check.summary() + "; " + "; ".join(check.notes)
    elif check.notes:
        a.notes += check.notes


def _capacity(c: Candidate, params: dict[str, str], budgets: dict[str, float], workload: Any, network: Any,
              peak: float, say: Progress, options: dict[str, Any]) -> Any:
    """The candidate, configured at its size, searched for its capacity within the budgets; then its p99
    read at the traffic's peak rate off the measured points."""
    from ..target import parse_target, with_params
    from .capacity import find_capacity
    from .decision import Capacity

    given = parse_target(c.url)
    target = with_params(given, {**given.params, **params})
    seconds = {op: ms / 1000 for op, ms in budgets.items()}

    def told(p: Any) -> None:
        if p.point is None:
            rate = "closed loop" if p.rate is None else f"{p.rate:,.0f} ops/s"
            eta = f", about {p.eta_s:,.0f} s left" if p.eta_s is not None else ""
            say(f"{c.label}: capacity step {p.step + 1} of ~{p.steps_planned} ({rate}{eta})")

    found = find_capacity(target, seconds, workload=workload, network=network, progress=told, label=c.label,
                          **options)
    points = [{"rate": p.rate, "achieved": p.achieved, "within": p.within, "why": p.why,
               "p99_ms": {op: v * 1000 for op, v in p.p99_s.items() if v is not None}} for p in found.points]
    return Capacity(found.capacity_ops_per_s, found.low or 0.0, found.high, points,
                    f"{found.trusted_path}: {found.path_note}", warnings=found.warnings)


def _p99_at_peak(c: Candidate, params: dict[str, str], budgets: dict[str, float], workload: Any, network: Any,
                 capacity: Any, options: dict[str, Any]) -> tuple[dict[str, float], bool, int]:
    """Each budgeted op's p99 at the peak rate one node carries, measured there (an open-loop step on the
    server configured at its size); read off the search's points where that step could not run.

    A step over budget where the search measured a higher rate within it contradicts the search: one
    second's p99 rests on its slowest 1 %, which a stall of the host can fill. Two more steps are then
    run and each op's median kept (the third value returned: the steps it rests on)."""
    from ..target import parse_target, with_params
    from .capacity import measure_at

    given = parse_target(c.url)
    target = with_params(given, {**given.params, **params})
    step = {k: v for k, v in options.items() if k in ("min_samples", "warmup_s", "max_step_s")}
    budgets_s = {op: ms / 1000 for op, ms in budgets.items()}

    def measured_once() -> dict[str, float]:
        point = measure_at(target, budgets_s, capacity.per_node_rate, workload=workload, network=network,
                           label=c.label, **step)
        return {op: v * 1000 for op, v in point.p99_s.items() if v is not None} if point is not None else {}

    first = measured_once()
    if not first:
        return _p99_at(capacity.points, capacity.per_node_rate), False, 0
    over = any(first.get(op, 0.0) > ms for op, ms in budgets.items())
    within_above = any(p["within"] and p["rate"] >= capacity.per_node_rate for p in capacity.points)
    if not (over and within_above):
        return first, True, 1
    steps = [first] + [m for m in (measured_once(), measured_once()) if m]
    return {op: statistics.median(s[op] for s in steps if op in s) for op in first}, True, len(steps)


def _p99_at(points: list[dict[str, Any]], rate: float) -> dict[str, float]:
    """Each op's p99 at ``rate``, interpolated between the measured points around it (the nearest one
    beyond the measured range)."""
    measured = sorted((p["rate"], p["p99_ms"]) for p in points if p.get("p99_ms"))
    if not measured:
        return {}
    below = [m for m in measured if m[0] <= rate]
    above = [m for m in measured if m[0] >= rate]
    if not below:
        return dict(above[0][1])
    if not above:
        return dict(below[-1][1])
    (r0, p0), (r1, p1) = below[-1], above[0]
    f = 0.0 if r1 == r0 else (rate - r0) / (r1 - r0)
    return {op: p0[op] + f * (p1.get(op, p0[op]) - p0[op]) for op in p0}
