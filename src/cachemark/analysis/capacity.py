"""Capacity within a latency budget: the highest open-loop rate at which every budgeted op's p99 holds.

How to call it (``cachemark capacity`` and ``cachemark decide`` both do)::

    from cachemark.analysis.capacity import find_capacity
    from cachemark.spec import Workload

    result = find_capacity("spawn:redis?client=engine", {"get": 0.001},   # budgets in seconds
                           workload=Workload(mix={"get": 90, "set": 10}, keys=10_000),
                           network=None,                                  # or a lab.network profile
                           progress=lambda p: print(p.step, p.rate, p.eta_s))
    result.capacity_ops_per_s      # the estimate (None: even the lowest rate tried was over budget)
    result.low, result.high        # the bracket: highest rate measured within, lowest measured over
    result.points                  # every step: offered rate, achieved rate, p99 per op, within or why not
    result.trusted_path, result.tail_trusted, result.path_note           # whose tail the figure rests on

The search (each step is one ordinary run through ``run/sequence.py``, the same as ``run``'s, on a
target provided once for the whole search):

1. a short closed loop gives the most the load path drives (X): the top of the bracket until an
   open-loop step goes over budget (an open loop at X keeps the server saturated: its queue grows);
2. open loop with Poisson arrivals, latency from each op's intended start (coordinated-omission
   corrected), from X/2: halve while over budget; within, bisect towards X (and double past X if X
   itself is within);
3. bisect until the bracket is narrower than ``precision`` × its low end (or ``max_steps``);
4. the capacity is where a straight line through ``1/(p99 ÷ budget)`` of the two steps each side of
   the bracket crosses 1: for a queue, 1/p99 falls about linearly towards saturation (M/M/1:
   p99 = ln 100 ÷ (μ − λ) exactly), so the line uses the magnitudes of four measurements where the
   bracket rests on which side of the budget one noisy p99 fell. It may lie just outside the bracket
   (at most a bracket's width); simulated M/M/1 searches land within 10 % of the truth about 99 times
   in 100 this way, and 93–97 with the estimate held inside the bracket.

Each step lasts long enough that the least frequent budgeted op gets ``min_samples`` (5,000) samples:
p99 of n samples rests on the n/100 slowest, and the rank of the 99th percentile wanders by
√(n·0.01·0.99), so 50 tail samples put it within about ±14 % of its rank (±3 % in latency for an
exponential tail) — and queueing correlates successive latencies, so the effective count is smaller
still; a few hundred samples would leave p99 to chance. A step is within budget only when every
budgeted op's p99 is, the load path kept ≥ 95 % of the offered rate (else the generator or the server
could not keep up) and no op failed.

Only the native engine (``?client=engine``) keeps an open loop open: its clients never wait for a
reply before sending the next op due. Python workers and drivers in other stacks block on each reply,
so their corrected tail is overstated (docs/validation.md; the verdict says so too) and the capacity
they find is a lower bound; the result says which (``tail_trusted``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import BackendMissing, UserError
from ..plan import default_label, price_labels
from ..run.driver import driver_for
from ..run.preflight import uses_engine
from ..run.provide import provide
from ..run.runner import run_target
from ..spec import Workload
from ..target import Target, parse_target, with_params

MIN_SAMPLES = 5000  # per budgeted op and step (module docstring: why thousands)
PRECISION = 0.05  # stop bisecting when the bracket is narrower than this share of its low end
MAX_STEPS = 10  # open-loop steps at most (the closed-loop one not counted)
MIN_STEP_S = 1.0  # a step never shorter: wake-ups and the server's own rhythm need a second to show
MAX_STEP_S = 30.0  # nor longer: a rate whose op is rare is measured on what 30 s give
WARMUP_S = 0.5  # untimed before each step: the queue reaches its steady state (ms at any sane rate)
CLOSED_S = 1.0  # the closed-loop step that bounds the bracket
FELL_BY = 1.5  # p99 this many times lower at a higher rate: the steps' noise, not their load, shows
# … at a rate at least this much higher: next to the knee, steps a few % apart differ by more than
# FELL_BY by themselves (8.2 ms at 122,813 ops/s, 2.03 ms at 126,534 on memcached), and the bracket
# between them is the search's answer, not noise
APART = 1.1
KEPT_RATE = 0.95  # a step that did less than this share of its offered rate could not keep up
# the engine's room per target when the URL names none: 8 connections × 64 in flight never fill at
# any rate a server within budget keeps, so no op ever waits for its connection (docs/validation.md)
ENGINE_ROOM = {"connections": "8", "pipeline": "64"}
ENGINE_PATH, PYTHON_PATH = "engine", "python"
TRUSTED_NOTE = ("the native engine's open loop: no op waits for a reply before it is sent, so the "
                "corrected tail is the server's (the project's open-loop reference, docs/validation.md)")
BLOCKING_NOTE = ("{who} block on each reply: in open loop an op due while its client waits is sent late, "
                 "so the corrected tail is overstated (docs/validation.md) and this capacity is a lower bound; "
                 "?client=engine is the open-loop reference")


@dataclass
class CapacityPoint:
    """One open-loop step: what was offered, what was done, and each budgeted op's p99."""

    rate: float  # offered ops/s (all ops)
    achieved: float  # ops/s done
    p99_s: dict[str, float | None]  # budgeted op → corrected p99 (s); None: no sample
    # … from each op's actual send: where it is well under the corrected one, ops waited at the
    # client (a blocking client, or a generator behind its schedule), not at the server
    p99_sent_s: dict[str, float | None]
    samples: dict[str, int]  # budgeted op → ops measured
    within: bool
    why: str  # what decided it: "get p99 0.8 ms ≤ 1 ms", "kept 91 % of the rate", …
    seconds: float  # the step's wall time, set-up included
    # the worst budgeted op's p99 ÷ its budget; None where the step fell behind its rate, failed ops
    # or missed an op: such a p99 is not the rate's, and the estimate does not read it
    ratio: float | None = None


@dataclass
class CapacityProgress:
    """What the search tells its caller before and after each step (``progress``)."""

    step: int  # 0: the closed loop; 1…: open-loop steps
    steps_planned: int  # steps done + an estimate of those left
    rate: float | None  # the step's offered rate (None: the closed loop)
    step_s: float  # the step's planned timed seconds
    elapsed_s: float  # since the search started
    eta_s: float | None  # seconds left, estimated
    point: CapacityPoint | None = None  # set once the step is measured


@dataclass
class CapacityResult:
    """The highest rate within budget for one target, and everything measured to find it."""

    label: str
    target: str  # redacted
    budgets: dict[str, float]  # op → p99 budget (s)
    capacity_ops_per_s: float | None  # the estimate; None: over budget at every rate tried
    low: float | None  # highest rate measured within budget
    high: float | None  # lowest rate measured over it (None: none up to the most tried)
    closed_loop_ops_per_s: float  # what the load path drove in closed loop (the bracket's first bound)
    points: list[CapacityPoint]
    trusted_path: str  # "engine", "python" or the driver's name: the load path that measured
    tail_trusted: bool  # the path keeps an open loop open (only the engine does)
    path_note: str  # one sentence: why the tail is or is not trusted
    seconds: float
    status: str = "ok"  # ok | skipped (no server binary) | interrupted
    reason: str = ""

    @property
    def warnings(self) -> list[str]:
        """What changes how the figure reads: p99 that fell as the rate rose (noise in the steps)."""
        steps = sorted((p for p in self.points if p.ratio), key=lambda p: p.rate)
        for i, slow in enumerate(steps):
            fast = next((p for p in steps[i + 1:] if p.rate >= slow.rate * APART
                         and p.ratio * FELL_BY < slow.ratio), None)  # type: ignore[operator]
            if fast is not None:
                return [f"p99 fell as the rate rose ({_ratio_text(slow, self.budgets)} at {slow.rate:,.0f} ops/s, "
                        f"{_ratio_text(fast, self.budgets)} at {fast.rate:,.0f}): noise, not the load, decided "
                        "some steps (a busy host? its other work stalls client and server alike); re-run on a "
                        "quiet host or with a larger --min-samples"]
        return []

    @property
    def precision(self) -> float | None:
        """The bracket's width (ops/s): how far the true capacity may be from the estimate."""
        return None if self.low is None or self.high is None else self.high - self.low

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label, "target": self.target, "status": self.status, "reason": self.reason,
            "budgets_ms": {op: b * 1000 for op, b in self.budgets.items()},
            "capacity_ops_per_s": _round(self.capacity_ops_per_s), "low_ops_per_s": _round(self.low),
            "high_ops_per_s": _round(self.high), "precision_ops_per_s": _round(self.precision),
            "closed_loop_ops_per_s": _round(self.closed_loop_ops_per_s),
            "load_path": self.trusted_path, "tail_trusted": self.tail_trusted, "load_path_note": self.path_note,
            "seconds": round(self.seconds, 1), "warnings": self.warnings,
            "points": [{"offered_ops_per_s": _round(p.rate), "achieved_ops_per_s": _round(p.achieved),
                        "p99_ms": _ms_of(p.p99_s), "p99_from_send_ms": _ms_of(p.p99_sent_s),
                        "samples": p.samples, "within": p.within, "why": p.why} for p in self.points],
        }


def _ratio_text(point: CapacityPoint, budgets: dict[str, float]) -> str:
    """The p99 of the op that is furthest over its budget at ``point``: ``get p99 9.57 ms``."""
    op = max((op for op in budgets if point.p99_s.get(op) is not None),
             key=lambda op: point.p99_s[op] / budgets[op])  # type: ignore[operator]
    return f"{op} p99 {_ms(point.p99_s[op])}"  # type: ignore[arg-type]


def _ms_of(values: dict[str, float | None]) -> dict[str, float | None]:
    return {op: None if v is None else round(v * 1000, 4) for op, v in values.items()}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


ProgressCallback = Callable[[CapacityProgress], None]


def load_path_of(target: Target | str) -> tuple[str, bool, str]:
    """(the load path's name, whether its open-loop tail is trusted, why) for ``target``."""
    target = parse_target(target) if isinstance(target, str) else target
    if uses_engine(target):
        return ENGINE_PATH, True, TRUSTED_NOTE
    driver = driver_for(target)
    if driver is not None:
        name = target.param("client") or "driver"
        return name, False, BLOCKING_NOTE.format(who=f"the {name} driver's clients")
    return PYTHON_PATH, False, BLOCKING_NOTE.format(who="Python workers")


def parse_budgets(text: str) -> dict[str, float]:
    """``get=1ms,set=2ms`` (a bare number is milliseconds) → ``{"get": 0.001, "set": 0.002}``."""
    from ..backends.base import OPS
    from ..spec import parse_duration

    budgets: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        op, sep, value = part.partition("=")
        op = op.strip()
        if not sep or not op or not value.strip():
            raise UserError(f"--p99 {part!r}: expected op=budget, e.g. get=1ms,set=2ms")
        if op not in OPS:
            raise UserError(f"--p99 {part!r}: unknown op {op!r}; ops are {', '.join(OPS)}")
        value = value.strip()
        seconds = parse_duration(value + ("ms" if value.replace(".", "", 1).isdigit() else ""), f"--p99 {op}")
        if seconds <= 0:
            raise UserError(f"--p99 {part!r}: a budget must be > 0")
        budgets[op] = seconds
    if not budgets:
        raise UserError("--p99: give at least one budget, e.g. get=1ms")
    return budgets


def find_capacity(target: Target | str, budgets: dict[str, float], workload: Workload | None = None,
                  network: Any = None, progress: ProgressCallback | None = None, label: str | None = None,
                  precision: float = PRECISION, min_samples: int = MIN_SAMPLES, max_steps: int = MAX_STEPS,
                  warmup_s: float = WARMUP_S, max_step_s: float = MAX_STEP_S) -> CapacityResult:
    """The highest open-loop (Poisson) rate at which every op in ``budgets`` (op → p99 in seconds)
    stays within budget, against ``target`` running ``workload`` (its mix, keys and values; its
    duration, rate and arrival are the search's), behind ``network`` (a lab.network profile) if
    given. ``progress`` is told before and after every step. Raises UserError for a budget on an
    op the mix never runs; a missing server binary gives ``status="skipped"``."""
    target = parse_target(target) if isinstance(target, str) else target
    workload = workload or Workload()
    if workload.trace is not None:
        raise UserError("capacity draws its own ops at each rate it tries: give a workload (mix, keys, value "
                        "sizes), not a trace")
    mix = workload.mix
    shares = {op: sum(w for name, w in mix.items() if op in name.split("+")) / sum(mix.values()) for op in budgets}
    missing = [op for op, share in shares.items() if share <= 0]
    if missing:
        raise UserError(f"--p99 {missing[0]}: the mix ({', '.join(mix)}) never runs {missing[0]}; "
                        "budget an op it runs, or add it to --mix")
    if not 0 < precision < 1:
        raise UserError(f"precision {precision:g}: must be between 0 and 1 (a share of the rate)")
    search = _Search(target, budgets, workload, shares, network, progress, label, precision, min_samples,
                     max_steps, warmup_s, max_step_s)
    return search.run()


def measure_at(target: Target | str, budgets: dict[str, float], rate: float, workload: Workload | None = None,
               network: Any = None, label: str | None = None, min_samples: int = MIN_SAMPLES,
               warmup_s: float = WARMUP_S, max_step_s: float = MAX_STEP_S) -> CapacityPoint | None:
    """One open-loop step of the search at ``rate``, on its own: each budgeted op's p99 measured at that
    rate (``decide``'s p99 at the traffic's peak), not read off the search's points. None: skipped."""
    target = parse_target(target) if isinstance(target, str) else target
    workload = workload or Workload()
    mix = workload.mix
    shares = {op: sum(w for name, w in mix.items() if op in name.split("+")) / sum(mix.values()) for op in budgets}
    search = _Search(target, {op: b for op, b in budgets.items() if shares[op] > 0}, workload,
                     {op: v for op, v in shares.items() if v > 0}, network, None, label, PRECISION, min_samples, 1,
                     warmup_s, max_step_s)
    try:
        with provide(search._with_room(target)) as (reachable, _servers):
            search.reachable = reachable
            return search._step(rate)
    except BackendMissing:
        return None


class _Search:
    """One target's search: the steps, the bracket, the ETA."""

    def __init__(self, target: Target, budgets: dict[str, float], workload: Workload, shares: dict[str, float],
                 network: Any, progress: ProgressCallback | None, label: str | None, precision: float,
                 min_samples: int, max_steps: int, warmup_s: float, max_step_s: float) -> None:
        self.target, self.budgets, self.workload, self.shares = target, budgets, workload, shares
        self.network, self.progress, self.precision = network, progress, precision
        self.min_samples, self.max_steps, self.warmup_s, self.max_step_s = min_samples, max_steps, warmup_s, max_step_s
        self.label = label or default_label(target)
        self.path, self.trusted, self.note = load_path_of(target)
        self.points: list[CapacityPoint] = []
        self.started = time.monotonic()
        self.overhead: list[float] = []  # each step's wall time beyond its timed seconds
        self.low: float | None = None
        self.high: float | None = None
        self.stopped, self.skip_reason = "skipped", ""
        self.closed = 0.0  # the closed loop's ops/s, once measured

    # --- the steps ---------------------------------------------------------------------------

    def run(self) -> CapacityResult:
        try:
            with provide(self._with_room(self.target)) as (reachable, _servers):
                self.reachable = reachable
                return self._search()
        except BackendMissing as exc:  # no server binary or client library here: skipped, as a run is
            return self._result(0.0, status="skipped", reason=str(exc))

    def _search(self) -> CapacityResult:
        closed = self._closed_loop()
        if closed is None:
            return self._result(0.0, status=self.stopped, reason=self.skip_reason)
        if closed <= 0:
            raise UserError(f"{self.label}: the closed loop did no ops: nothing to search from")
        self.closed = closed
        rate = closed / 2
        while len(self.points) < self.max_steps:
            point = self._step(rate)
            if point is None:
                return self._result(closed, status=self.stopped, reason=self.skip_reason)
            if point.within:
                self.low = max(self.low or 0.0, rate)
            else:
                self.high = min(self.high or math.inf, rate)
            if self.low is None:
                rate /= 2
            elif self.high is None:  # the closed loop's rate stands for the top until a step is over it
                near_top = self.low >= closed * (1 - self.precision)
                rate = (closed if self.low < closed else 2 * self.low) if near_top else (self.low + closed) / 2
            elif self.high - self.low <= self.precision * self.low:
                break
            else:
                rate = (self.low + self.high) / 2
        return self._result(closed)

    def _with_room(self, target: Target) -> Target:
        """The engine gets room for an open loop (:data:`ENGINE_ROOM`) unless the URL sizes it."""
        if self.path != ENGINE_PATH or any(target.param(k) for k in ENGINE_ROOM):
            return target
        return with_params(target, {**target.params, **ENGINE_ROOM})

    def _closed_loop(self) -> float | None:
        workload = self.workload.model_copy(update={"rate": None, "duration": CLOSED_S, "ops": None,
                                                    "warmup": self.warmup_s, "warmup_ops": None, "phases": []})
        self._tell(0, None, CLOSED_S)
        began = time.monotonic()
        outcome = run_target(self.reachable, workload, self.label, network=self.network)
        if outcome.status in ("skipped", "interrupted") or not outcome.phases:
            self.stopped, self.skip_reason = outcome.status, outcome.reason or outcome.status
            return None
        _check_ok(outcome, self.label)
        phase = outcome.phases[-1]
        self.overhead.append(time.monotonic() - began - CLOSED_S)
        return phase.total_ops / phase.wall_s if phase.wall_s else 0.0

    def _step_seconds(self, rate: float) -> float:
        rarest = min(self.shares.values())
        return min(max(MIN_STEP_S, self.min_samples / (rate * rarest)), self.max_step_s)

    def _step(self, rate: float) -> CapacityPoint | None:
        seconds = self._step_seconds(rate)
        step = len(self.points) + 1
        self._tell(step, rate, seconds)
        workload = self.workload.model_copy(update={
            "rate": rate, "arrival": "poisson", "duration": seconds, "ops": None, "warmup": self.warmup_s,
            "warmup_ops": None, "phases": [],
        })
        began = time.monotonic()
        outcome = run_target(self.reachable, workload, self.label, network=self.network)
        if outcome.status in ("skipped", "interrupted") or not outcome.phases:
            self.stopped, self.skip_reason = outcome.status, outcome.reason or outcome.status
            return None
        wall = time.monotonic() - began
        self.overhead.append(max(wall - seconds - self.warmup_s, 0.0))
        point = self._judge(rate, outcome, wall)
        self.points.append(point)
        self._tell(step, rate, seconds, point)
        return point

    def _judge(self, rate: float, outcome: Any, wall: float) -> CapacityPoint:
        phase = outcome.phases[-1]
        achieved = phase.total_ops / phase.wall_s if phase.wall_s else 0.0
        p99s: dict[str, float | None] = {}
        sent: dict[str, float | None] = {}
        samples: dict[str, int] = {}
        ratios = []
        for op in self.budgets:
            counted = [rec for name, rec in phase.ops.items() if op in name.split("+") and rec.count]
            samples[op] = sum(rec.count for rec in counted)
            values = [rec.summary.p99_us for rec in counted if rec.summary is not None]
            p99s[op] = max(values) / 1e6 if values else None
            from_send = [rec.summary_uncorrected.p99_us for rec in counted if rec.summary_uncorrected is not None]
            sent[op] = max(from_send) / 1e6 if from_send else None
            ratios.append(None if p99s[op] is None else p99s[op] / self.budgets[op])
        errors = sum(sum(rec.errors.values()) for rec in phase.ops.values())
        worst = None if any(r is None for r in ratios) else max(ratios)  # type: ignore[type-var]
        over = [f"{op} p99 {_ms(v)} > {_ms(self.budgets[op])}" for op, v in p99s.items()
                if v is not None and v > self.budgets[op]]
        if errors or outcome.status == "failed":
            why, within = f"{errors:,} ops failed" + (f" ({outcome.reason})" if outcome.reason else ""), False
        elif achieved < KEPT_RATE * rate:
            why, within = f"kept {achieved / rate:.0%} of the rate: the load path or the server fell behind", False
        elif worst is None:
            why, within = "no sample of a budgeted op", False
        elif over:
            why, within = "; ".join(over), False
        else:
            why = "; ".join(f"{op} p99 {_ms(v)} ≤ {_ms(self.budgets[op])}" for op, v in p99s.items() if v is not None)
            within = True
        kept = achieved >= KEPT_RATE * rate and not errors
        return CapacityPoint(rate, achieved, p99s, sent, samples, within, why, wall, worst if kept else None)

    # --- the answer ----------------------------------------------------------------------------

    def _estimate(self) -> float | None:
        """Where a straight line through 1/(p99 ÷ budget) of the steps nearest the bracket (two each side)
        crosses 1: the magnitudes of several steps, where the bracket rests on which side one step fell.
        Kept within a bracket's width of the bracket (a line through noise can point anywhere)."""
        if self.low is None:
            return None
        if self.high is None:
            return self.low
        usable = [p for p in self.points if p.ratio]
        below = sorted((p for p in usable if p.rate <= self.low), key=lambda p: -p.rate)[:2]
        above = sorted((p for p in usable if p.rate >= self.high), key=lambda p: p.rate)[:2]
        near = below + above
        middle = (self.low + self.high) / 2
        if not below or not above:
            return middle
        xs = [p.rate for p in near]
        ys = [1 / p.ratio for p in near]  # type: ignore[operator]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        if slope >= 0:  # noise: p99 did not rise with the rate here
            return middle
        width = self.high - self.low
        return min(max(mx + (1 - my) / slope, self.low - width), self.high + width)

    def _result(self, closed: float, status: str = "ok", reason: str = "") -> CapacityResult:
        return CapacityResult(
            self.label, self.target.redacted_whole, dict(self.budgets), self._estimate() if status == "ok" else None,
            self.low, self.high, closed, list(self.points), self.path, self.trusted, self.note,
            time.monotonic() - self.started, status, reason)

    # --- progress ------------------------------------------------------------------------------

    def _steps_left(self) -> int:
        if self.low is None:
            left = 1 + math.ceil(math.log2(1 / self.precision))  # one to close the bracket, then bisection
        elif self.high is None:  # bisecting towards the closed loop's rate
            left = 1 + math.ceil(math.log2(max(self.closed - self.low, 1.0) / (self.precision * self.low)))
        elif self.high - self.low <= self.precision * self.low:
            left = 0
        else:
            left = math.ceil(math.log2((self.high - self.low) / (self.precision * self.low)))
        return min(left, self.max_steps - len(self.points))

    def _tell(self, step: int, rate: float | None, seconds: float, point: CapacityPoint | None = None) -> None:
        if self.progress is None:
            return
        left = self._steps_left() - (0 if point is not None or step == 0 else 1)
        overhead = sum(self.overhead) / len(self.overhead) if self.overhead else 1.0
        base = rate or self.low or self.high or self.closed / 2
        typical = self._step_seconds(base) if base else MIN_STEP_S  # before the closed loop: nothing known yet
        eta = max(left, 0) * (typical + self.warmup_s + overhead)
        if point is None:
            eta += seconds + self.warmup_s + overhead
        self.progress(CapacityProgress(step, len(self.points) + max(left, 0) + (point is None and step > 0),
                                       rate, seconds, time.monotonic() - self.started, eta, point))


def _check_ok(outcome: Any, label: str) -> None:
    if outcome.status == "failed":
        raise UserError(f"{label}: the closed-loop step failed: {outcome.reason}")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e6:.3g} µs" if seconds < 1e-3 else f"{seconds * 1e3:.3g} ms"


def load_capacities(path: Any) -> dict[str, float]:
    """label → ``capacity_ops_per_s`` from a file ``cachemark capacity --json`` (or ``-o``) wrote, under each
    label and the label its target has without a ``client``; a target that found none is left out. Any
    problem with the file is one line naming it."""
    import json

    from ..textfile import read_text

    try:
        data = json.loads(read_text(path, "capacity file", max_bytes=64 << 20))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not a capacity file ({exc})") from None
    table = data.get("capacity_ops_per_s") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise UserError(f"{path}: not a capacity file: no capacity_ops_per_s table (cachemark capacity -o writes one)")
    targets = {str(t.get("label")): str(t.get("target") or "") for t in data.get("targets") or []
               if isinstance(t, dict)}
    out: dict[str, float] = {}
    for label, value in table.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
            raise UserError(f"{path}: capacity_ops_per_s.{label} must be a finite number > 0, not {value!r}")
        # under its label and the label its target has without a client: redis(engine)'s figure is redis's
        for name in price_labels(str(label), targets.get(str(label))):
            out.setdefault(name, float(value))
    return out

