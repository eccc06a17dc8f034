"""Needs → a recommendation: every measured target, each need passed or failed, and why.

Transparent rules, no score: a need is a question the results can answer ("is get's p99
under 1 ms?", "is the cache shared across 4 app servers?"), and each target gets one of
``pass``, ``fail`` or ``check`` (the results cannot tell: e.g. whether a Redis persists
depends on its configuration) with the figure that decided it. With repeats, a latency
budget passes only when the worst repeat is inside it; when the median passes and the
worst does not, the verdict is ``fail`` with both figures shown ("inside the noise").

Targets are ranked: those failing nothing first (by the measured p99 of the first budgeted
op, lowest first), then by how many needs they fail.

A pass or FAIL decided by measured figures (a latency budget, a throughput, a month's cost at
the measured throughput) carries beside it the run's own warnings that change how those figures
read (report/verdict.py ``QUALIFY_FIGURES``: a saturated generator or host, a hiccup, an
emulator, too few samples of that op), and a pass on such figures says it passes only on them.

A latency budget is judged on the figures of the load path the run trusts for tails, and says
which (``engine, open loop``; ``redis-py, closed loop``). Where the run itself calls a label's
open-loop tail overstated (Python workers or a driver blocking on each reply: the verdict's
``open-loop`` warning), that tail cannot FAIL a budget: the budget is judged on the same target
measured through the engine in the same results (the label without its ``client``), else it is a
``check`` saying why. A pass on an overstated tail stands: the true tail is lower still.
"""

from __future__ import annotations

import statistics
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..errors import UserError
from ..needs import Needs, parse_needs
from ..plan import price_labels
from ..results import ResultsDocument, Run
from ..results.findings import QUALIFY_FIGURES, Finding, Kind
from ..results.names import ENGINE_CLIENT
from ..schemes import find_scheme
from ..textfile import read_text
from .cost import PriceTable, cost_of

PASS, FAIL, CHECK = "pass", "fail", "check"
T = TypeVar("T")


def load_needs(path: Path) -> Needs:
    text = read_text(path, "needs file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not TOML ({exc})") from None
    return parse_needs(data.get("needs", data), str(path), stated=True)


@dataclass
class Check:
    need: str
    result: str  # pass | fail | check
    why: str
    measured: bool = False  # decided by measured figures (not by what the backend is)
    op: str | None = None  # the op whose figures decided it; None: the whole run's
    caveats: tuple[str, ...] = ()  # the warnings that change how those figures read, by short name


@dataclass
class Advice:
    label: str
    checks: list[Check]
    p99_key: float | None  # the first budgeted op's p99 (µs), for ranking
    warnings: list[str] = field(default_factory=list)  # the lines behind the checks' caveats

    @property
    def failed(self) -> int:
        return sum(c.result == FAIL for c in self.checks)


def _last_phase(run: Run, op: str) -> Any:
    """The last phase of ``run`` that measured ``op`` (None: none did)."""
    for phase in reversed(run.phases):
        found = phase.ops.get(op)
        if found and found.count:
            return phase
    return None


def _p99s(runs: list[Run], op: str) -> list[float]:
    """The op's p99 (µs) in each repeat of a label, from the last phase that has the op."""
    values = []
    for run in runs:
        phase = _last_phase(run, op)
        summary = phase.ops[op].summary if phase is not None else None
        if summary is not None and summary.p99_us is not None:
            values.append(float(summary.p99_us))
    return values


def load_path(runs: list[Run], op: str) -> str:
    """Which load path measured ``op``'s figures, as the output names it: ``engine, open loop``."""
    phase = next((p for run in runs if (p := _last_phase(run, op)) is not None), None)
    if phase is None:
        return ""
    info = _info(runs[0])
    client = str(info.get("client") or "")
    who = "engine" if client == ENGINE_CLIENT or phase.engine else client
    mode = "open loop" if phase.mode == "open" else "closed loop"
    return f"{who}, {mode}" if who else mode


def _info(run: Run) -> dict[str, Any]:
    info = run.backend.info if run.backend is not None else None
    return info if isinstance(info, dict) else {}


def _ms(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3g} s"
    return f"{us:.3g} µs" if us < 1000 else f"{us / 1000:.3g} ms"


def _latency_check(op: str, budget_ms: float, runs: list[Run], overstated: bool = False,
                   reference: tuple[str, list[Run]] | None = None) -> tuple[Check, float | None]:
    """``op``'s budget on ``runs``' p99; ``overstated``: the run calls their tail overstated, so it is
    judged on ``reference`` (the same target through the engine: label, runs) where there is one, and
    can pass but not FAIL on its own figures."""
    values = _p99s(runs, op)
    need = f"{op} p99 ≤ {budget_ms:g} ms"
    if not values:
        return Check(need, CHECK, f"no {op} measured"), None
    median, worst = statistics.median(values), max(values)
    budget_us = budget_ms * 1000
    path = load_path(runs, op)
    shown = _ms(median) + (f" (worst of {len(values)} repeats {_ms(worst)})" if len(values) > 1 else "")
    if overstated and worst > budget_us:
        own = f"{shown} through {path}: overstated (blocking clients; docs/validation.md)"
        if reference is not None and _p99s(reference[1], op):
            check, _ = _latency_check(op, budget_ms, reference[1])
            check.why = f"{check.why}, measured as {reference[0]}: the tail this run trusts; {own}"
            return check, median
        return Check(need, CHECK, f"{own}, so not judged: measure it with ?client=engine (the open-loop "
                                  "reference)", measured=True, op=op), median
    shown += f" ({path})" if path else ""
    if worst <= budget_us:
        lead = "; an upper bound: this open-loop tail is overstated" if overstated else ""
        return Check(need, PASS, shown + lead, measured=True, op=op), median
    if median <= budget_us:
        why = f"{shown}: inside the budget at the median, not in every repeat"
        return Check(need, FAIL, why, measured=True, op=op), median
    return Check(need, FAIL, shown, measured=True, op=op), median


def _hit_ratio_check(need_ratio: float, runs: list[Run]) -> Check:
    """The get hit ratio of each repeat's last phase with gets: every repeat must reach the need."""
    need = f"get hit ratio ≥ {need_ratio:.2f}"
    ratios = []
    for run in runs:
        for phase in reversed(run.phases):
            op = phase.ops.get("get")
            if op is not None and op.count:
                ratios.append(op.hits / op.count)
                break
    if not ratios:
        return Check(need, CHECK, "no get measured")
    worst = min(ratios)
    shown = f"{statistics.median(ratios):.3f}" + (f" (worst of {len(ratios)} repeats {worst:.3f})"
                                                  if len(ratios) > 1 else "")
    return Check(need, PASS if worst >= need_ratio else FAIL, f"{shown} in this run (its size, its workload)",
                 measured=True, op="get")


def _shared_check(app_servers: int, run: Run) -> Check:
    need = f"shared across {app_servers} app servers"
    scheme = find_scheme(str(run.scheme or ""))
    if _capabilities(run).get("shared") is False:
        return Check(need, FAIL, "a per-process cache: each app server process has its own copy")
    if scheme is not None and scheme.embedded is not None and app_servers > 1:
        return Check(need, FAIL, "a local store on one host's disk: other hosts cannot reach it")
    return Check(need, PASS, "a server every app server can reach")


def _capabilities(run: Run) -> dict[str, Any]:
    return (run.backend.capabilities if run.backend is not None else None) or {}


def _persistent_check(run: Run) -> Check:
    scheme = find_scheme(str(run.scheme or ""))
    if scheme is None or scheme.persistent is None:
        return Check("survives a restart", CHECK, "depends on its configuration (Redis: RDB or AOF)")
    if scheme.persistent:
        return Check("survives a restart", PASS, "stored on disk")
    return Check("survives a restart", FAIL, "kept in memory only")


def _tags_check(run: Run) -> Check:
    tags = _capabilities(run).get("tags")
    if tags:
        return Check("invalidates by tag", PASS, f"clean by tag ({tags})")
    return Check("invalidates by tag", CHECK, "not measured here: add ?tags=native or ?tags=versioned to the URL")


def bearing_on(found: list[Finding], label: str, op: str | None = None) -> list[Finding]:
    """The warnings of ``found`` about ``label``'s figures: its runs' as a whole, and ``op``'s own."""
    return [f for f in found if label in f.labels and (not f.ops or op in f.ops)]


def caveats(found: list[Finding]) -> tuple[str, ...]:
    """The short names of ``found``'s kinds, once each, in their order."""
    return tuple(dict.fromkeys(QUALIFY_FIGURES[f.kind] for f in found))


def _qualify(check: Check, label: str, found: list[Finding]) -> list[Finding]:
    """Name beside a measured pass or FAIL the warnings that change how its figures read (a pass on
    them passes only on them, and says so); the warnings named."""
    bearing = bearing_on(found, label, check.op) if check.measured and check.result != CHECK else []
    if bearing:
        check.caveats = caveats(bearing)
        lead = "passes only on figures with warnings" if check.result == PASS else "figures with warnings"
        check.why += f"; {lead}: {', '.join(check.caveats)} (below)"
    return bearing


def advise(document: ResultsDocument, needs: Needs, prices: PriceTable | None = None,
           found: list[Finding] | None = None) -> list[Advice]:
    """Per label, each need checked against its runs; ``found``: the results' own warnings that change
    how a figure reads (the verdict's, ``report.verdict.reading_warnings``), named beside the checks
    resting on them."""
    found = found or []
    overstated = {label for f in found if f.kind == Kind.OPEN_LOOP for label in f.labels}
    found = [f for f in found if f.kind in QUALIFY_FIGURES]
    by_label: dict[str, list[Run]] = {}
    for run in document.measured_runs:
        by_label.setdefault(run.label, []).append(run)
    advice = []
    for label, runs in by_label.items():
        checks: list[Check] = []
        key_p99 = None
        if runs[0].dropped_writes:
            checks.append(Check("keeps what it is given", FAIL, runs[0].dropped_writes))
        reference = _engine_twin(label, by_label, overstated) if label in overstated else None
        for op, budget in needs.p99_ms.items():
            check, median = _latency_check(op, budget, runs, label in overstated, reference)
            checks.append(check)
            if key_p99 is None:
                key_p99 = median
        if needs.hit_ratio is not None:
            checks.append(_hit_ratio_check(needs.hit_ratio, runs))
        if needs.ops_per_s is not None:
            from .cost import run_throughput

            served = statistics.median(run_throughput(r)[0] for r in runs)
            result = PASS if served >= needs.ops_per_s else FAIL
            checks.append(Check(f"serves {needs.ops_per_s:,.0f} ops/s", result,
                                f"served {served:,.0f} ops/s in this run" +
                                ("" if result == PASS else " (at this run's concurrency; a bigger client may "
                                 "show more)"), measured=True))
        if needs.app_servers is not None:
            checks.append(_shared_check(needs.app_servers, runs[0]))
        if needs.persistent:
            checks.append(_persistent_check(runs[0]))
        if needs.tags:
            checks.append(_tags_check(runs[0]))
        if needs.monthly_budget is not None:
            checks.append(_budget_check(label, runs[0], needs, prices))
        named = [f for check in checks for f in _qualify(check, label, found)]
        advice.append(Advice(label, checks, key_p99, list(dict.fromkeys(f.text for f in named))))
    return sorted(advice, key=lambda a: (a.failed, a.p99_key if a.p99_key is not None else float("inf"), a.label))


def _engine_twin(label: str, by_label: dict[str, list[Run]], overstated: set[str]) -> tuple[str, list[Run]] | None:
    """The same target measured through the engine in the same results (its label without the client
    names the same thing as ``label``'s): whose tail a budget is judged on where ``label``'s is overstated."""
    own = set(price_labels(label, by_label[label][0].target))
    for other, runs in by_label.items():
        if other == label or other in overstated or _info(runs[0]).get("client") != ENGINE_CLIENT:
            continue
        if own & set(price_labels(other, runs[0].target)):
            return other, runs
    return None


def offering_for(mapping: dict[str, T], label: str, target: str | None) -> T | None:
    """What ``mapping`` (label → an offering, a capacity, …) gives a run: by its label, else by the label
    its target has without a ``client`` (``redis`` prices ``redis(engine)`` too)."""
    return next((mapping[name] for name in price_labels(label, target) if name in mapping), None)


def _budget_check(label: str, run: Run, needs: Needs, prices: PriceTable | None) -> Check:
    need = f"costs ≤ {needs.monthly_budget:,.0f} a month"
    name = offering_for(needs.prices, label, run.target)
    if prices is None or name is None:
        return Check(need, CHECK, f"no price: map it in [needs.prices] ({label} = \"<offering>\")")
    cost = cost_of(run, prices.offering(name), prices, needs.ops_per_s, needs.data_gb)
    if cost.monthly is None:
        return Check(need, CHECK, "state ops_per_s or data_gb to price a month")
    result = PASS if cost.monthly <= (needs.monthly_budget or 0) else FAIL
    nodes = f"{cost.nodes} × " if cost.nodes else ""
    # a node count comes from the measured throughput; a price per request does not
    return Check(need, result, f"{nodes}{name}: {cost.monthly:,.0f} {prices.currency} a month",
                 measured=cost.offering.kind == "instance")
