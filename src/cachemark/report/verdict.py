"""What a run means: the workload in a sentence, the ranking per op, and the warnings.

Owns :func:`verdict_blocks`, the "What this means" card every report ends with (the
terminal, Markdown, HTML; :mod:`.blocks` draws it). It reads only the results document,
so ``show`` and ``report`` of an old file give the same answer as the run did, and every
field it reads is optional. It reads the typed document (:mod:`cachemark.results.schema`); the
public functions take a document's or a run's dict too. The ranking compares like with like only: one phase, one
sweep point and one network profile at a time; it ranks by the preset's headline figure where
that figure ranks backends (:data:`HEADLINE_FIGURES`: the headline and the verdict name one
winner and print one factor), else by p50; shared backends against each other, per-process
caches and stores on this host's disk apart (:func:`kept`), with a sentence wherever p50 and
p99 (or the headline figure and p50) order two backends differently. With repeats the factor
is the median of the ratios paired by repeat (a headline figure's: the ratio of the medians)
and its ± is half a 95 % interval (Student's t on the log ratios), and a difference whose
interval includes 1× (or is wider than the factor) is "not resolved by these repeats"; without
repeats a difference under 5 % is a tie. The warnings are the facts that change how the figures
read, the most serious (a target that drops writes) first; each is a :class:`Finding` of a kind,
so ``advise`` and ``cost`` can show beside a pass or FAIL the ones that change how its figures
read (:data:`QUALIFY_FIGURES`) without matching on their text.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ..backends.base import PSEUDO_OPS
from ..errors import SpecError
from ..measure.outage import longest, outage_text
from ..results import OpResult, Phase, ResultsDocument, Run
from ..results.findings import QUALIFY_FIGURES, Finding, Kind
from ..results.names import ENGINE_CLIENT, op_label
from ..results.schema import ServerRecord
from ..schemes import find_scheme
from ..spec import phase_over_workload
from ..sweep import LOAD_PARAMS
from ..target import parse_target
from .blocks import Block
from .data import MISSED_WARNING, missed_ops
from .figures import fmt_factor, fmt_latency, fmt_percent, fmt_rate
from .headline import harness_ops_per_s, seconds_per_1000
from .planned import PhasePlan, SavedObject, phase_plan

TITLE = "What this means"
TIE_WITHOUT_REPEATS = 1.05  # one run each: a smaller factor is called a tie
FEW_SAMPLES = 30  # fewer successful ops than this: the p99 is not trustworthy
CPU_SATURATED = 0.9  # client CPU ≥ this share of its cores: the generator is the limit
HIT_RATIO_SLACK = 0.10  # a get hit ratio this far under the prediction is flagged
MIN_WALL_S = 0.1  # a shorter phase's CPU share is start-up noise
LOAD_FALL = 1.05  # p50 at the lower load more than this × the higher load's: "latency falls as load rises"
RANKED_STATUSES = ("ok", "interrupted")
OUTAGE_SHOWN_S = 1.0  # writes failing this long (or any outage of a target that fails over) gets a line
# a hiccup: a stall inside a phase (the host, the server or the network stopped for a while)
HICCUP_OVERRUN = 0.10  # a phase longer than its planned duration by more than this share
HICCUP_MAX_OVER_P99 = 100  # an op's slowest at this many × its p99: one stall, not the tail
HICCUP_MAX_S = 1.0  # an op this slow is a stall whatever its p99 (when also HICCUP_MAX_OVER_P50 × its p50)
HICCUP_MAX_OVER_P50 = 10  # ... so a backend whose every op is slow is not called one
HICCUP_MIN_S = 0.1  # a slowest op or an overrun shorter than this is a busy host's scheduling, not a stall
HICCUP_MIN_SAMPLES = 1000  # fewer ops: max over p99 is the luck of a few samples
UNRESOLVED = "not resolved"  # by these repeats: a factor whose 95 % interval ranks nothing
TAIL_P99_OVER_P50 = 100  # a p99 this many × its p50: a tail no mean or p50 speaks for
TAIL_MAX_S = 1.0  # an op slower than this: a tail a reader must hear of, whatever the percentiles
TAIL_MIN_SAMPLES = 100  # fewer ops: no p99 of their own
HICCUP_DIP = 0.5  # a full second under this share of the phase's median throughput
HICCUP_MIN_SECONDS = 3  # full seconds needed for a median to judge a dip against
HICCUP_MIN_RATE = 100  # a median under this many ops/s: per-second counts too coarse for a dip
OPEN_LOOP_GAPS = 3  # an open-loop phase may end this many of a worker's mean gaps late (a Poisson gap's p95)
SECOND_SLACK_S = 0.05  # a second ending this little past the phase's end is a full one (workers start apart)


# Student's t, two-sided 95 %, by degrees of freedom (beyond the table: the normal's 1.96).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}


def t95(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (conservative between rows)."""
    if df <= 0:
        return math.inf
    known = [d for d in _T95 if d <= df]
    return _T95[max(known)] if df <= 120 else 1.96


def paired_interval(ratios: list[float]) -> tuple[float, float, float]:
    """(median, low, high): the median of the paired ratios and a 95 % interval, from the
    mean and standard deviation of their logarithms (ratios multiply, so their logs add)."""
    logs = [math.log(r) for r in ratios]
    centre = statistics.fmean(logs)
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return statistics.median(ratios), math.exp(centre - half), math.exp(centre + half)


def _pm(x: float, spread: float) -> str:
    digits = 2 if x < 10 else 1 if x < 100 else 0
    return f"{fmt_factor(x)} ± {spread:,.{digits}f}×"


def verdict_blocks(document: ResultsDocument) -> list[Block]:
    runs = document.runs
    if not runs:
        return []
    ranking = _ranking(runs, ranking_figure(document))
    lines = [workload_sentence(document, runs), *client_costs(runs)]
    notes: list[str] = []
    if ranking.rows:
        notes += [*ranking.sentences(), ranking.footnote()]
    else:
        lines.append("Nothing to rank: no op was measured on two backends under the same conditions.")
    found = warnings(document, runs)
    notes.append("")  # a paragraph break in Markdown
    if found:
        notes.append("Warnings that change the reading (most serious first):")
        notes += [f"- {w}" for w in found]
    else:
        notes.append("No warnings: nothing found that changes this reading.")
    return [Block(TITLE, lines=lines, columns=ranking.columns if ranking.rows else [], rows=ranking.rows,
                  notes=notes, left=3, kind="verdict")]


# --- the workload ---------------------------------------------------------------------------------------------


def _dict(value: Any) -> SavedObject:
    """An object of the document, or an empty one where an odd file has something else."""
    return value if isinstance(value, dict) else {}


def _num(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def fmt_mix(mix: Any) -> str:
    if not isinstance(mix, dict) or not mix:
        return ""
    total = sum(v for v in mix.values() if isinstance(v, int | float)) or 1.0
    return " · ".join(f"{op} {_num(round(v * 100 / total, 1))} %" for op, v in mix.items()
                      if isinstance(v, int | float) and v > 0)


ETC_SIZES = "as Facebook's ETC pool's"  # Atikoglu et al., SIGMETRICS 2012 (workload/etc.py)


def _values(size: Any) -> str:
    text = str(size)
    if text == "etc":
        return f"values {ETC_SIZES} (Atikoglu et al., SIGMETRICS 2012)"
    return f"values {text} B" if text.replace("-", "").isdigit() else f"values {text}"


def _own_key_dist(phase: SavedObject, wl: SavedObject) -> str | None:
    """The phase's key distribution where it is not the workload's (a phase may set its own)."""
    own = phase.get("key_dist")
    return str(own) if own and own != wl.get("key_dist") else None


def _sequence_text(phase: SavedObject, wl: SavedObject) -> str:
    """A sequence's steps as they run: "set, 100 × exists+get, delete, in order" (spec.Phase)."""
    from ..errors import SpecError
    from ..spec import Workload

    try:
        planned = next(p for p in Workload.model_validate(wl).effective_phases() if p.name == phase.get("name"))
    except (ValueError, SpecError, StopIteration):  # a file of another version: its steps unsaid
        return "steps in order"
    return ", ".join(op if times == 1 else f"{_num(times)} × {op}" for op, times in planned.steps()) + ", in order"


def _phase_text(phase: SavedObject, wl: SavedObject) -> str:
    """A phase's mix, its own key distribution and its budget (its own, else the workload's)."""
    if phase.get("sequence"):
        return _sequence_text(phase, wl)
    own, planned = _own_key_dist(phase, wl), PhasePlan.of(phase_over_workload(phase, wl))
    parts = [fmt_mix(planned.mix), f"{own} keys" if own else ""]
    if planned.ops:
        parts.append(f"{_num(planned.ops)} op{'s' if planned.ops != 1 else ''}")
    elif planned.duration:
        parts.append(f"{_num(planned.duration)} s")
    return ", ".join(p for p in parts if p)


def _phase_workers(runs: list[Run]) -> list[int]:
    return sorted({p.workers for r in runs for p in r.phases if isinstance(p.workers, int)})


def _info(run: Run) -> SavedObject:
    """What the backend said about itself (client, versions, framework…): ``{}`` when nothing."""
    return _dict(run.backend.info if run.backend is not None else None)


_NO_SERVER = ServerRecord()


def _server(run: Run) -> ServerRecord:
    """The run's server record (an empty one without: its fields None)."""
    return run.server if run.server is not None else _NO_SERVER


def _clients(runs: list[Run], version: Any) -> str:
    seen: dict[str, list[str]] = {}
    for run in runs:
        info = _info(run)
        client = info.get("client")
        if not client:
            continue
        text = str(client)
        if client == ENGINE_CLIENT:  # the info's client_version is the preflight's Python client's
            text += f" {version}" if version else ""
        elif info.get("client_version"):
            text += f" {info['client_version']}"
        engine = next((p.engine for p in run.phases if p.engine is not None), None)
        if engine and (engine.get("connections") or engine.get("pipeline")):
            connections, pipeline = _num(engine.get("connections") or 1), _num(engine.get("pipeline") or 1)
            text += f" ({connections} connections, pipeline {pipeline})"
        server_version = info.get("server_version") or _server(run).version
        if server_version:
            server = info.get("server") or _server(run).kind or "server"
            text += f", {server} {server_version}"
        texts = seen.setdefault(run.label, [])
        if text not in texts:
            texts.append(text)
    return "; ".join(f"{label} via {' / '.join(texts)}" for label, texts in seen.items())


def workload_sentence(document: ResultsDocument, runs: list[Run]) -> str:
    """The workload, the clients and the network, in one sentence."""
    experiment = document.experiment
    wl = experiment.workload_spec
    parts: list[str] = []
    trace = _dict(wl.get("trace"))
    if trace.get("path"):
        speed = trace.get("speed", 1)
        timing = "as fast as possible" if speed == 0 else f"at {_num(speed)}× the recorded rate"
        copies = f", {_num(trace['amplify'])} copies of its key space" if (trace.get("amplify") or 1) > 1 else ""
        parts.append(f"replay of the trace {Path(str(trace['path'])).name} ({timing}{copies})")
    phases = experiment.planned_phases
    if wl.get("keys") is not None and not trace.get("path"):
        # the workload's distribution, unless every phase draws its keys its own way (said per phase)
        inherited = not phases or any(_own_key_dist(p, wl) is None for p in phases)
        dist = f" ({wl['key_dist']})" if wl.get("key_dist") and not trace and inherited else ""
        sized = f", padded to {wl['key_size']} B" if str(wl.get("key_size") or "").isdigit() else (
            f", key sizes {ETC_SIZES}" if wl.get("key_size") == "etc" else
            f", key sizes {wl['key_size']}" if wl.get("key_size") else "")
        parts.append(f"{_num(wl['keys'])} key{'s' if wl['keys'] != 1 else ''}{dist}{sized}")
    if trace.get("path"):  # the sizes the trace recorded, not the workload's default range
        parts.append("keys and value sizes as the trace recorded them")
    elif wl.get("value_size") is not None:
        parts.append(_values(wl["value_size"]))
    if phases:
        parts.append("phases " + ", ".join(
            f"{p.get('name') or 'main'} ({_phase_text(p, wl)})" if _phase_text(p, wl) else p.get("name") or "main"
            for p in phases))
    elif fmt_mix(wl.get("mix")):
        parts.append(fmt_mix(wl.get("mix")))
    workers = _phase_workers(runs) or ([wl["workers"]] if isinstance(wl.get("workers"), int) else [])
    if workers:
        count = _num(workers[0]) if len(workers) == 1 else f"{_num(workers[0])}–{_num(workers[-1])}"
        parts.append(f"{count} worker{'s' if workers[-1] != 1 else ''}")
    modes = {p.mode for r in runs for p in r.phases}
    rate = wl.get("rate") or next((p.get("rate") for p in phases if p.get("rate")), None)
    if trace and ("open" in modes or rate):
        parts.append(f"open loop at the recorded times (mean {rate:,.0f} ops/s)" if isinstance(rate, int | float)
                     else "open loop at the recorded times")
    elif "open" in modes or rate:
        arrival = f", {wl['arrival']} arrivals" if wl.get("arrival") else ""
        parts.append(f"open loop at {_num(rate)} ops/s{arrival}" if rate else "open loop")
    elif modes or wl:
        parts.append("closed loop")
    if phases:
        pass  # each phase's budget is in its own description
    elif wl.get("ops"):
        parts.append(f"{_num(wl['ops'])} ops per run")
    elif wl.get("duration"):
        parts.append(f"{_num(wl['duration'])} s per run")
    if "prefill" in wl:
        parts.append("prefilled" if wl["prefill"] else "not prefilled")
    if "ttl" in wl:
        parts.append(f"TTL {_num(wl['ttl'])} s" if wl.get("ttl") else "no TTL")
    repeats = experiment.repeat
    if repeats is not None and repeats > 1:
        parts.append(f"{repeats} repeats")
    for field, values in (experiment.sweep or {}).items():
        parts.append(f"{field} swept over {', '.join(values)}")
    profiles = list(dict.fromkeys(r.profile for r in runs if r.profile))
    parts.append(f"network profile {', '.join(profiles)}" if profiles else "no network emulated")
    sentence = "Workload: " + ", ".join(parts) + "."
    clients = _clients(runs, document.environment.cachemark)
    if clients:
        sentence += f" Clients: {clients}."
    return sentence


# --- the ranking ----------------------------------------------------------------------------------------------

SHARED, PER_PROCESS, LOCAL = "shared", "per-process", "local"
MAX_SPLIT_LINES = 6  # sentences where p50 and p99 order two backends differently; more are counted
# Django's own caches that keep their entries on this host's disk, by class (a LOCATION given as a plain
# path names no scheme to find them by)
_DJANGO_ON_DISK = {"FileBasedCache": "file", "DjangoCache": "diskcache"}
_NESTED_DEPTH = 4


def kept(run: Run) -> tuple[str, str | None]:
    """Where a run's cache keeps its entries: ``per-process`` (each worker's own copy), ``local`` (on
    this host's disk, with the store's scheme: a file/diskcache/sqlite target, or one nested in it —
    Django's LOCATION, a two-level cache's level) or ``shared`` (a server every app server reaches).
    Only the run's ``target`` and ``backend`` are read."""
    backend = run.backend
    capabilities = _dict(backend.capabilities if backend is not None else None)
    if capabilities.get("shared") is False:
        return PER_PROCESS, None
    scheme = find_scheme(str(run.scheme or ""))
    if scheme is not None and scheme.embedded is not None:
        return LOCAL, scheme.name
    store = _nested_store(run.target, scheme, 0)
    if store is None:
        info = _info(run)
        store = _DJANGO_ON_DISK.get(str(info.get("backend") or "").rsplit(".", 1)[-1]) \
            if info.get("framework") == "django" else None
    return (LOCAL, store) if store else (SHARED, None)


def _nested_store(url: str, scheme: Any, depth: int) -> str | None:
    """The scheme of a local store among the targets nested in ``url`` (its scheme's ``nested`` params)."""
    if scheme is None or not scheme.nested or depth > _NESTED_DEPTH:
        return None
    try:
        params = parse_target(url).params
    except SpecError:
        return None  # an old file's target the parser now refuses: no nested store to find
    for name, value in params.items():
        inner = find_scheme(value.split(":", 1)[0]) if name in scheme.nested and ":" in value else None
        if inner is not None and inner.embedded is not None:
            return inner.name
        found = _nested_store(value, inner, depth + 1)
        if found:
            return found
    return None


def _show_rate(value: float) -> str:
    return f"{fmt_rate(value) if value >= 100 else f'{value:.3g}'}/s"  # a few ops/s keep their digits


def _harness(phase: Phase, op: OpResult | None) -> float | None:
    """cache-benchmark's ops/s of one op, as the tag-clean headline computes it."""
    count = op.count if op is not None else 0
    mean = phase.summary_of(op).mean_us if op is not None and count else None
    return harness_ops_per_s(count, mean, phase.workers or 1)


def _per_1000(phase: Phase, _op: OpResult | None) -> float | None:
    """timeit's seconds per 1000 ops of a phase, as the timeit headline computes it."""
    count = sum(op.count for op in phase.ops.values())
    return seconds_per_1000(phase.wall_s or 0.0, count)


@dataclass(frozen=True)
class Figure:
    """What the ranking orders backends by: each op's p50, or the preset's headline figure."""

    name: str  # as the column headers say it
    show: Callable[[float], str]
    measure: Callable[[Phase, OpResult | None], float | None] | None = None  # None: the p50
    higher_is_better: bool = False
    per_phase: bool = False  # one value per phase (timeit's loop of ops), not per op
    what: str = ""  # what it is, for the footnote (a headline figure)
    why: str = ""  # why it can order two backends otherwise than their p50s do

    @property
    def headline(self) -> bool:
        return self.measure is not None


P50 = Figure("p50", fmt_latency)
# the headline figures the verdict ranks by (report/headline.py computes and prints them): the figure a
# preset names is its question, and one question gets one ranking
HEADLINE_FIGURES = {
    "tag-clean": Figure(
        "harness ops/s", _show_rate, _harness, higher_is_better=True,
        what="cache-benchmark's ops/s per op (count ÷ Σ latency × clients, reference 002)",
        why="the harness divides by Σ latency, i.e. by the mean, which carries the slow tail the p50 leaves out"),
    "timeit": Figure(
        "s/1000 ops", lambda v: f"{v:.4g} s", _per_1000, per_phase=True,
        what="timeit's seconds per 1000 ops per phase (the phase's wall time ÷ its ops × 1000, reference 000)",
        why="the wall time per op is the mean op and the client's own time between ops, the p50 the middle op "
            "alone"),
}


def ranking_figure(document: ResultsDocument) -> Figure:
    """The figure the verdict ranks by: the preset's headline figure where it has one, else the p50."""
    return HEADLINE_FIGURES.get(document.experiment.headline or "", P50)


class _Ranking:
    def __init__(self, figure: Figure) -> None:
        self.figure = figure
        self.rows: list[list[str]] = []
        self.repeated = 0  # how many repeats the paired comparisons had (0: none)
        self.single = False  # some comparison rested on one run per side
        self.grouped = False  # some op was measured on shared and on local backends: ranked apart
        self.differ: list[str] = []  # the headline figure and the p50 name different fastest backends
        self.split: list[str] = []  # p50 and p99 order two backends differently

    @property
    def columns(self) -> list[str]:
        name = self.figure.name
        if not self.figure.headline:
            return ["op", "fastest (p50)", "vs", "slower by (p50)", "at p99"]
        return ["op", f"fastest ({name})", "vs", f"slower by ({name})", "at p50", "at p99"]

    def sentences(self) -> list[str]:
        """Where two orders disagree: the headline figure against the p50, then p50 against p99."""
        out = self.differ + self.split[:MAX_SPLIT_LINES]
        more = len(self.split) - MAX_SPLIT_LINES
        if more > 0:
            out.append(f"… and {more} more pair{'s' if more != 1 else ''} that p50 and p99 rank differently.")
        return out

    def footnote(self) -> str:
        figure = self.figure
        if figure.headline:
            parts = [f"Ranked by the headline's figure, {figure.what}: a factor is the ratio of the two backends' "
                     "figures as the headline prints them (medians over repeats), so a factor the headline prints "
                     "too is the same number; at p50 and at p99, their latencies' ratio. Like with like (same phase, "
                     "sweep point and network profile); at p99 only with ≥ 30 samples each, and \"faster\" where "
                     "the backend ranked behind has the lower latency."]
        else:
            parts = ["Factor: the slower backend's latency ÷ the fastest's, like with like (same phase, "
                     "sweep point and network profile); at p99 only with ≥ 30 samples each, and \"faster\" where "
                     "the backend slower at p50 has the lower p99."]
        if self.grouped:
            parts.append("Shared backends (a server every app server reaches) are ranked against each other, local "
                         "ones (per-process caches, stores on this host's disk) apart; an op's local rows end with "
                         "the fastest shared backend, for scale.")
        if self.repeated:
            centre = ("the factor (the ratio of the medians) ± half the 95 % interval of the ratios paired by repeat"
                      if figure.headline else "the median of the ratios paired by repeat, ± half its 95 % interval")
            parts.append(f"± and intervals from {self.repeated} repeats: {centre}; \"{UNRESOLVED}\" by these "
                         "repeats, with the interval, where it includes 1× or is wider than the factor itself (a "
                         "difference inside run-to-run noise ranks nothing).")
        if self.single:
            parts.append("One run each: run-to-run noise unknown, so differences under 5 % are called a "
                         "tie; `--repeat 3` measures the noise.")
        return " ".join(parts)


_Entry = tuple[Any, dict[str, float | None]]  # (repeat, {"rank": the ranking figure, "p50", "p99"})
_Groups = dict[tuple[str, str, str], dict[str, dict[str, list[_Entry]]]]


def _entries(runs: list[Run], figure: Figure) -> _Groups:
    """(phase, sweep point, profile) → op (the phase itself, for a figure per phase) → label → [(repeat, figures)]."""
    groups: _Groups = {}
    for run in runs:
        if run.status not in RANKED_STATUSES or run.dropped_writes:
            continue
        profile = run.profile or ""
        for phase in run.phases:
            name = phase.name or "main"
            key = (name, run.sweep_key, profile)
            measured: dict[str, dict[str, float | None]] = {}
            for op_name, op in phase.ops.items():
                summary = phase.summary_of(op)
                count = op.count
                p50 = summary.p50_us
                if count < 2 or not p50 or p50 <= 0 or op_name in PSEUDO_OPS:  # the origin is no backend's op
                    continue
                figures = {"p50": p50, "p99": summary.p99_us if count >= FEW_SAMPLES else None}
                figures["rank"] = p50 if figure.measure is None else (
                    None if figure.per_phase else figure.measure(phase, op))
                measured[op_name] = figures
            if figure.per_phase and figure.measure is not None:
                total = sum(op.count for op in phase.ops.values())
                only = next(iter(measured.values())) if len(measured) == 1 else {}
                measured = {name: {"rank": figure.measure(phase, None) if total >= 2 else None,
                                   "p50": only.get("p50"), "p99": only.get("p99")}}
            for row, figures in measured.items():
                if figures["rank"] and figures["rank"] > 0:
                    groups.setdefault(key, {}).setdefault(row, {}).setdefault(run.label, []).append(
                        (run.repeat, figures))
    return groups


def _median(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v]
    return statistics.median(got) if got else None


def _level(entries: list[_Entry], what: str = "rank") -> float | None:
    """A backend's figure: the median over its repeats."""
    return _median(f[what] for _, f in entries)


def _order(members: dict[str, list[_Entry]], figure: Figure) -> list[str]:
    """Labels, the best by ``figure`` first."""
    def cost(label: str) -> float:
        level = _level(members[label])
        if not level:
            return math.inf
        return 1 / level if figure.higher_is_better else level
    return sorted(members, key=cost)


def _ratio(slow: float | None, fast: float | None, higher_is_better: bool = False) -> float | None:
    """How many times worse ``slow`` is than ``fast`` (a rate: fast ÷ slow; a time: slow ÷ fast)."""
    if not slow or not fast:
        return None
    return fast / slow if higher_is_better else slow / fast


def _compare(slow: list[_Entry], fast: list[_Entry], ranking: _Ranking) -> list[str]:
    """The cells of ``slow`` against ``fast``: by the ranking figure, (at p50 beside a headline figure,) at p99."""
    figure = ranking.figure
    fast_by = {rep: f for rep, f in fast if rep is not None}
    pairs = [(f, fast_by[rep]) for rep, f in slow if rep is not None and rep in fast_by]

    def side(what: str) -> float | None:
        """A latency factor: the median of the paired ratios with repeats, else the ratio of the medians."""
        if len(pairs) >= 2:
            return _median(_ratio(s[what], f[what]) for s, f in pairs)
        return _ratio(_level(slow, what), _level(fast, what))

    interval = None
    if len(pairs) >= 2:
        ranking.repeated = max(ranking.repeated, len(pairs))
        ratios = [_ratio(s["rank"], f["rank"], figure.higher_is_better) for s, f in pairs]
        interval = paired_interval([r for r in ratios if r])
    else:
        ranking.single = True
    if figure.headline or interval is None:  # a headline figure's factor is the one its headline prints
        factor = _ratio(_level(slow), _level(fast), figure.higher_is_better) or math.nan
    else:
        factor = interval[0]
    cells = [_factor_cell(factor, interval)]
    if figure.headline:
        cells.append(p99_cell(side("p50")))
    return [*cells, p99_cell(side("p99"))]


def _factor_cell(factor: float, interval: tuple[float, float, float] | None) -> str:
    """``3.00 ± 0.38×``, ``not resolved (1.02×, 0.89–1.19)``, ``1.20×``, ``tie (1.03×)``; a factor under 1× (a
    local store's fastest against the fastest shared backend) is said as the other way round, ``2.00× faster``."""
    if interval is not None:
        _, low, high = interval
        if low <= 1.0 <= high or high - low > max(factor, 1 / factor):  # no ranking: a 135 ± 220× is not one
            return f"{UNRESOLVED} ({fmt_factor(factor)}×, {fmt_factor(low)}–{fmt_factor(high)})"
        if high < 1.0:
            return _pm(1 / factor, (1 / low - 1 / high) / 2) + " faster"
        return _pm(factor, (high - low) / 2)
    if 1 / TIE_WITHOUT_REPEATS < factor < TIE_WITHOUT_REPEATS:
        return f"tie ({fmt_factor(factor)}×)"
    return f"{fmt_factor(factor)}×" if factor >= 1 else f"{fmt_factor(1 / factor)}× faster"


def p99_cell(factor: float | None) -> str:
    """The p99 factor beside "slower by (p50)": under 1× the backend slower at p50 was the faster one
    in the tail, which a bare ``0.56×`` under "slower by" hides; so it is said in words, as a factor
    over 1 (``1.79× faster``)."""
    if factor is None:
        return "-"
    return f"{fmt_factor(1 / factor)}× faster" if factor < 1 else f"{fmt_factor(factor)}×"


def _ranking(runs: list[Run], figure: Figure) -> _Ranking:
    """Per phase × sweep point × profile × op: the shared backends ranked against each other, and the
    local ones (per-process, on this host's disk) apart, ending with the fastest shared one for scale."""
    ranking = _Ranking(figure)
    groups = _entries(runs, figure)
    many_phases = len({k[0] for k in groups}) > 1
    where: dict[str, str] = {}
    for run in runs:
        where.setdefault(run.label, kept(run)[0])
    for (phase, sweep, profile), rows in groups.items():
        for row, labels in rows.items():
            name = phase if figure.per_phase else op_label(phase, row, many_phases)
            name += f" [{profile}]" if profile else ""
            name += f" [{sweep}]" if sweep else ""
            shared = {label: e for label, e in labels.items() if where.get(label) == SHARED}
            local = {label: e for label, e in labels.items() if where.get(label) != SHARED}
            both = bool(shared) and bool(local)
            ranking.grouped = ranking.grouped or both
            top_shared = _order(shared, figure)[0] if shared else None
            for members, group in ((shared, SHARED), (local, LOCAL)):
                order = _order(members, figure)
                rivals = [(other, members[other]) for other in order[1:]]
                if group == LOCAL and top_shared is not None and order:
                    rivals.append((f"{top_shared} (shared)", shared[top_shared]))
                if not rivals:
                    continue
                best = order[0]
                shown = f"{name} · {group}" if both else name
                fastest = f"{best} ({figure.show(_level(members[best]) or math.nan)})"
                for i, (other, entries) in enumerate(rivals):
                    ranking.rows.append([shown if i == 0 else "", fastest if i == 0 else "", other,
                                         *_compare(entries, members[best], ranking)])
                _disagreements(ranking, shown, members, order)
    return ranking


def _disagreements(ranking: _Ranking, name: str, members: dict[str, list[_Entry]], order: list[str]) -> None:
    """The sentences where two figures order a group's backends differently: the headline figure and the
    p50 naming different fastest backends, and p50 and p99 ranking a pair apart (each by ≥ 5 %)."""
    figure = ranking.figure
    p50 = {label: _level(members[label], "p50") for label in order}
    p99 = {label: _level(members[label], "p99") for label in order}
    by_p50 = sorted((label for label in order if p50[label]), key=lambda label: p50[label] or math.inf)
    lead = order[0]
    if figure.headline and by_p50 and by_p50[0] != lead and p50[lead]:
        first = by_p50[0]
        ahead = p50[lead] / p50[first]  # type: ignore[operator]
        if ahead >= TIE_WITHOUT_REPEATS:
            ranking.differ.append(f"{name}: {first} is the fastest at p50 ({fmt_factor(ahead)}× ahead of {lead}), "
                                  f"but {lead} leads by {figure.name}: {figure.why}.")
    for i, a in enumerate(by_p50):
        for b in by_p50[i + 1:]:
            at50, at99 = _ratio(p50[b], p50[a]), _ratio(p99[a], p99[b])
            if at50 and at99 and at50 >= TIE_WITHOUT_REPEATS and at99 >= TIE_WITHOUT_REPEATS:
                ranking.split.append(f"{name}: {a} is faster than {b} at p50 ({fmt_factor(at50)}×) but slower at "
                                     f"p99 ({fmt_factor(at99)}×).")


# --- clients of the same server -----------------------------------------------------------------------------

MAX_CLIENT_LINES = 6


def _client_name(info: SavedObject) -> str:
    """A client as the reader knows it: the driver and the store it built (``ruby-activesupport
    (RedisCacheStore)``), the Python library, or the engine."""
    client = str(info.get("client") or "")
    store = str(info.get("store") or "").rsplit("::", 1)[-1].rsplit("\\", 1)[-1]
    return f"{client} ({store})" if store else client


def client_costs(runs: list[Run]) -> list[str]:
    """What each client costs on the same server software, per op: its p50 over the engine's
    (the wire floor: no client library in the way) or, without an engine run, over the fastest
    client's. One line per server and op, like with like (phase, sweep point, network profile)."""
    groups: dict[tuple[str, ...], dict[str, list[float]]] = {}
    for run in runs:
        if run.status not in RANKED_STATUSES or run.dropped_writes:
            continue
        info = _info(run)
        kind = info.get("server") or _server(run).kind
        version = info.get("server_version") or _server(run).version
        if not kind or not info.get("client"):
            continue
        profile = run.profile or ""
        for phase in run.phases:
            for op_name, op in phase.ops.items():
                p50 = phase.summary_of(op).p50_us
                if op.count < 2 or not p50 or op_name in PSEUDO_OPS:
                    continue
                key = (f"{kind} {version}" if version else str(kind), phase.name or "main", run.sweep_key,
                       profile, op_name)
                groups.setdefault(key, {}).setdefault(_client_name(info), []).append(p50)
    lines = []
    for (server, phase, sweep, profile, op_name), clients in groups.items():
        if len(clients) < 2:
            continue
        p50 = {name: statistics.median(values) for name, values in clients.items()}
        floor_name = next((n for n in p50 if n == ENGINE_CLIENT), min(p50, key=p50.__getitem__))
        floor = p50[floor_name]
        what = "the engine's wire floor" if floor_name == ENGINE_CLIENT else f"the fastest client, {floor_name}"
        where = "".join(f" [{x}]" for x in (phase if phase != "main" else "", profile, sweep) if x)
        costs = "; ".join(f"{name} {'+' if p50[name] >= floor else '−'}{fmt_latency(abs(p50[name] - floor))} "
                          f"({fmt_factor(p50[name] / floor)}×)"
                          for name in sorted(p50, key=p50.__getitem__) if name != floor_name)
        lines.append(f"Client cost on {server}{where}, {op_name} p50 over {what} ({fmt_latency(floor)}): {costs}.")
    return lines[:MAX_CLIENT_LINES]


# --- the warnings ---------------------------------------------------------------------------------------------


def _phase_label(run: Run, phase: Phase) -> str:
    name = run.name
    return f"{name} ({phase.name or 'main'})" if len(run.phases) > 1 else name


def _in_process(run: Run) -> bool:
    """The cache runs inside the client's process (or on its disk): the client's CPU is the cache's."""
    return kept(run)[0] != SHARED


def _host_share(run: Run, phase: Phase, cpus: Any) -> float | None:
    """The share of this host's cores that the client and a server on the same host used together
    in ``phase`` (the server's own CPU counters), or None where that is not known or not one host's."""
    distributed = run.dask is not None and not run.dask.is_empty  # agents on other hosts
    if not isinstance(cpus, int) or cpus <= 0 or distributed or _in_process(run):
        return None  # agents on other hosts (a Dask run); or no server apart from the client
    wall, client = phase.wall_s or 0.0, phase.client_cpu_s
    server_pct = phase.server.cpu_pct_mean if phase.server is not None else None
    if not client or server_pct is None or wall < MIN_WALL_S or not _server_here(run):
        return None
    return (client / wall + server_pct / 100) / cpus


def _server_here(run: Run) -> bool:
    """The run's server is on this host: spawned by cachemark, or reached over loopback or a Unix socket."""
    if run.server is not None and run.server.spawned:
        return True
    try:
        target = parse_target(run.target)
    except SpecError:
        return False  # no target, or one an older file wrote that the parser now refuses
    scheme = find_scheme(target.scheme)
    if scheme is not None and scheme.unix:
        return True
    hosts = [host.lower() for host, _ in target.hosts]
    return bool(hosts) and all(h == "localhost" or h == "::1" or h.startswith("127.") for h in hosts)


def _errors(run: Run) -> tuple[int, int, dict[str, int]]:
    total = errors = 0
    kinds: dict[str, int] = {}
    for phase in run.phases:
        for op in phase.ops.values():
            total += op.count
            for kind, n in op.errors.items():
                if n:
                    kinds[kind] = kinds.get(kind, 0) + n
                    errors += n
    return errors, total, kinds


def _expected_hit_ratio(mix: dict[str, float]) -> float | None:
    """Prefilled, no TTL, no evictions: a key is present with probability adds ÷ (adds + deletes) in the
    steady state (a key's sets, deletes and gets all scale with its popularity), and 1 at the start.
    None when the mix has ops whose effect on the key space this does not model."""
    known = {"get", "get_many", "exists", "set", "set_many", "delete", "incr"}
    if not mix or any(op not in known for op, share in mix.items() if share):
        return None
    adds = sum(mix.get(op) or 0 for op in ("set", "set_many"))
    deletes = mix.get("delete") or 0
    if not deletes:
        return 1.0
    return adds / (adds + deletes) if adds else None


def reading_warnings(document: ResultsDocument) -> list[Finding]:
    """The warnings that change how a measured figure reads (:data:`QUALIFY_FIGURES`): what ``advise``
    and ``cost`` name beside a pass or FAIL."""
    return [f for f in findings(document, document.runs) if f.kind in QUALIFY_FIGURES]


def warnings(document: ResultsDocument, runs: list[Run]) -> list[str]:
    """One line each, naming the run; the most serious first."""
    return [f.text for f in findings(document, runs)]


def findings(document: ResultsDocument, runs: list[Run]) -> list[Finding]:
    """The warnings with their kinds, labels and ops; the most serious first. ``runs``: the document's
    runs to warn about. Each kind of finding is one function below."""
    seen = [_Seen(run, phase, _phase_label(run, phase), phase_plan(document, run, phase.name or "main"))
            for run in runs for phase in run.phases]
    return _once([*_dropped_writes(runs), *_not_measured(runs), *_failed_ops(runs), *_outages(seen),
                  *_hiccups(seen), *_budgets(seen), *_evictions(seen), *_hit_ratios(document, seen),
                  *_backend_facts(document, runs), *_generator_limits(document, seen), *_open_loop_tails(seen),
                  *_load_falls(runs), *_few_samples(runs)])


class _Seen(NamedTuple):
    """One phase of one run, as the findings read it: ``where`` names it, ``spec`` is its plan."""

    run: Run
    phase: Phase
    where: str
    spec: PhasePlan

    @property
    def about(self) -> tuple[str]:
        return (self.run.label,)

    @property
    def done(self) -> int:
        return sum(op.count for op in self.phase.ops.values())


def _dropped_writes(runs: list[Run]) -> Iterator[Finding]:
    for run in runs:
        if run.dropped_writes:
            what = run.dropped_writes.strip().rstrip(".")
            yield Finding(Kind.DROPPED, f"{run.name} {_dropped_share(run)}: {what}; its timings are not a "
                          "cache's: left out of the ranking", (run.label,))


def _not_measured(runs: list[Run]) -> Iterator[Finding]:
    for run in runs:
        if run.status in ("failed", "skipped"):
            reason = f": {run.reason}" if run.reason else ""
            yield Finding(Kind.FAILED, f"{run.name} {run.status}{reason}", (run.label,))


def _failed_ops(runs: list[Run]) -> Iterator[Finding]:
    for run in runs:
        n_errors, total, kinds = _errors(run)
        if run.dropped_writes and kinds.pop("dropped_write", 0):  # the dropped-writes line says it
            n_errors = sum(kinds.values())
        if n_errors:
            what = ", ".join(f"{kind} {n:,}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
            plural = "s" if n_errors != 1 else ""
            yield Finding(Kind.ERRORS, f"{run.name}: {n_errors:,} error{plural} in {total:,} ops ({what}); "
                          "latencies cover the successes", (run.label,))


def _outages(seen: list[_Seen]) -> Iterator[Finding]:
    for s in seen:
        outages_seen = [o.model_dump() for o in s.phase.write_outages or []]
        outage = longest(outages_seen)
        # a Sentinel's primary, or a cluster node's keys, moving to a promoted replica
        scheme = find_scheme(str(s.run.scheme or ""))
        fails_over = scheme is not None and (scheme.failover_grace is not None or scheme.cluster)
        if outage is not None and (fails_over or outage["duration_s"] >= OUTAGE_SHOWN_S):
            yield Finding(Kind.OUTAGE, f"{s.where}: {'failover: ' if fails_over else ''}"
                          f"{outage_text(outage, len(outages_seen) - 1)}", s.about)


def _hiccups(seen: list[_Seen]) -> Iterator[Finding]:
    for s in seen:
        hiccup = _hiccup(s.phase, s.spec)
        if hiccup:
            yield Finding(Kind.HICCUP, f"{s.where}: a hiccup: {hiccup}: a stall (of the host, the server or the "
                          "network), not the backend's steady pace; its throughput and tail include it: run it "
                          "again", s.about)
        for op_name, text in _extreme_tails(s.phase, bool(hiccup)):
            yield Finding(Kind.TAIL, f"{s.where} {op_name}: an extreme tail: {text}: its mean and p50 do not speak "
                          "for its slowest ops", s.about, (op_name,))


def _budgets(seen: list[_Seen]) -> Iterator[Finding]:
    for s in seen:
        planned = s.spec.ops
        if s.phase.stopped_on_errors:
            yield Finding(Kind.BUDGET, f"{s.where}: stopped early by the on-error policy: "
                          f"{s.phase.stopped_on_errors}", s.about)
        elif s.phase.interrupted:
            yield Finding(Kind.BUDGET, f"{s.where}: interrupted: the figures cover only part of the planned run",
                          s.about)
        elif isinstance(planned, int) and s.done < planned:
            yield Finding(Kind.BUDGET, f"{s.where}: {s.done:,} of the {planned:,} ops planned were done", s.about)


def _evictions(seen: list[_Seen]) -> Iterator[Finding]:
    for s in seen:
        evicted = s.phase.server.evictions if s.phase.server is not None else None
        if isinstance(evicted, int | float) and evicted > 0:
            keys = "key" if evicted == 1 else "keys"
            yield Finding(Kind.EVICTIONS, f"{s.where}: the server evicted {_num(evicted)} {keys}: hit ratios "
                          "reflect its memory limit, not the key space", s.about)


def _hit_ratios(document: ResultsDocument, seen: list[_Seen]) -> list[Finding]:
    found: list[Finding] = []
    for s in seen:
        _hit_ratio_warning(s.run, s.phase, s.spec, document, s.where, found)
    return found


def _backend_facts(document: ResultsDocument, runs: list[Run]) -> list[Finding]:
    """Facts about a backend, not a run: one line each, naming every label it applies to."""
    emulated: dict[str, str] = {}
    private: dict[str, None] = {}
    local: dict[str, str] = {}
    for run in runs:
        label = run.label
        emulator = _info(run).get("emulator") or next((e for e in _emulators(run) if e), None)
        if emulator:
            emulated[label] = f" ({emulator})" if isinstance(emulator, str) else emulated.get(label, "")
        scheme = find_scheme(str(run.scheme or ""))
        where, store = kept(run)
        if scheme is not None and not scheme.stores:
            pass  # null:// keeps nothing by design: the harness's own cost, not a cache to share
        elif where == PER_PROCESS:
            private[label] = None
        elif where == LOCAL:
            local[label] = str(store)
    facts = []
    if emulated:
        facts.append(Finding(Kind.EMULATOR, f"{_names(f'{k}{v}' for k, v in emulated.items())} ran against an "
                             "emulator: its latency is not the real service's", tuple(emulated)))
    if private:
        what = _plural(private, "a per-process cache", "per-process caches")
        facts.append(Finding(Kind.PER_PROCESS, f"{_names(private)}: {what}: each worker (and each app server process) "
                             "has its own copy, shared with nobody, so the figures are not a shared cache's",
                             tuple(private)))
    if local:
        what = _plural(local, "a local store", "local stores")
        facts.append(Finding(Kind.LOCAL_STORE, f"{_names(f'{k} ({v})' for k, v in local.items())}: {what} on this "
                             "host's disk: shared by its processes only, not between app servers", tuple(local)))
    return facts + substitutions(document, runs)


def _generator_limits(document: ResultsDocument, seen: list[_Seen]) -> Iterator[Finding]:
    """Where the load generator, or the host it shares with the server, may be the limit."""
    cpus = document.environment.cpus
    for s in seen:
        run, phase, where = s.run, s.phase, s.where
        missed, share = missed_ops(phase)
        if share >= MISSED_WARNING:
            yield Finding(Kind.GENERATOR, f"{where}: {missed:,} open-loop ops ({fmt_percent(share * 100)} of the "
                          "schedule) fell due but were never sent: the generator could not keep the rate", s.about)
        workers = phase.workers or 1
        cores = min(workers, cpus) if isinstance(cpus, int) and cpus > 0 else workers
        wall, cpu = phase.wall_s or 0.0, phase.client_cpu_s
        if (cpu and wall >= MIN_WALL_S and not _in_process(run) and s.done >= FEW_SAMPLES
                and cpu >= CPU_SATURATED * wall * cores):
            yield Finding(Kind.GENERATOR, f"{where}: the load generator used {cpu / wall / cores:.0%} of its "
                          f"{cores} core{'s' if cores != 1 else ''}: it, not the backend, may be the limit", s.about)
        elif s.done >= FEW_SAMPLES and (host := _host_share(run, phase, cpus)) is not None and host >= CPU_SATURATED:
            yield Finding(Kind.HOST, f"{where}: client and server share this host and together used {host:.0%} of "
                          f"its {cpus} cores: the host, not the backend, may be the limit (the server on a host of "
                          "its own would do more)", s.about)


def _open_loop_tails(seen: list[_Seen]) -> list[Finding]:
    labels = {s.run.label: None for s in seen
              if s.phase.mode == "open" and _info(s.run).get("client") != ENGINE_CLIENT
              and not s.phase.engine and not _in_process(s.run)}
    if not labels:
        return []
    return [Finding(Kind.OPEN_LOOP, f"{_names(labels)}: open loop through Python workers that block on each reply: "
                    "the corrected tail is overstated against an open system (docs/validation.md); "
                    "`?client=engine` is the open-loop reference", tuple(labels))]


def _few_samples(runs: list[Run]) -> list[Finding]:
    few: dict[tuple[str, str, str, str], list[int]] = {}  # (label, label [sweep point], phase, op) → counts
    for run in runs:
        for phase in run.phases:
            for op_name, op in phase.ops.items():
                if 0 < op.count < FEW_SAMPLES:
                    named = f"{run.label} [{run.sweep_key}]" if run.sweep else run.label
                    few.setdefault((run.label, named, phase.name or "main", op_name), []).append(op.count)
    many_phases = len({k[2] for k in few}) > 1
    # the same count in the same ops of several configurations (a preset's one-op write and delete) is one line
    by_op: dict[tuple[str, str], dict[str, list[str]]] = {}  # (phase, op) → what → configurations
    for (_, named, phase_name, op_name), counts in few.items():
        low = min(counts)
        runs_text = "" if len(counts) == 1 else (f" in each of {len(counts)} runs" if max(counts) == low
                                                  else f" (fewest of {len(counts)} runs)")
        what = "no percentile at all" if low == 1 else "no trustworthy p99"
        by_op.setdefault((phase_name, op_name), {}).setdefault(f"{low} sample{'s' if low != 1 else ''}{runs_text}: "
                                                              f"{what}", []).append(named)
    labels_of = {named: label for label, named, _, _ in few}
    alike: dict[tuple[str, tuple[str, ...]], list[tuple[str, str]]] = {}  # (what, configurations) → ops
    for (phase_name, op_name), whats in by_op.items():
        for what, names in whats.items():
            alike.setdefault((what, tuple(names)), []).append((phase_name, op_name))
    return [Finding(Kind.FEW_SAMPLES, f"{_names(names)} {', '.join(op_label(p, o, many_phases) for p, o in ops)}: "
                    f"{what}", tuple(dict.fromkeys(labels_of[n] for n in names)),
                    tuple(dict.fromkeys(o for _, o in ops))) for (what, names), ops in alike.items()]


_REPEAT = re.compile(r" #(\d+)\b")


def _once(found: list[Finding]) -> list[Finding]:
    """Each warning once: the same line about several repeats of a run (``name #1``, ``name #2``) becomes
    one naming them all (``name #1, #2, #3``), where the first repeat's line stood."""
    groups: dict[tuple[Any, ...], list[Finding]] = {}
    for f in found:
        groups.setdefault((f.kind, _REPEAT.sub("", f.text, count=1), f.labels, f.ops), []).append(f)
    out = []
    for f in found:
        group = groups[(f.kind, _REPEAT.sub("", f.text, count=1), f.labels, f.ops)]
        if group[0] is not f:
            continue
        repeats = [m.group(1) for g in group if (m := _REPEAT.search(g.text))]
        if len(repeats) > 1:
            f = Finding(f.kind, _REPEAT.sub(" " + ", ".join(f"#{r}" for r in repeats), f.text, count=1), f.labels,
                        f.ops)
        out.append(f)
    return out


def _emulators(run: Run) -> list[Any]:
    """What the run's server record (or each of its ``servers``) says of being an emulator."""
    server = run.server
    if server is None:
        return []
    if server.servers is not None:
        return [s.get("emulator") for s in server.servers if isinstance(s, dict)]
    return [server.emulator]


def _client_of(info: SavedObject) -> str:
    """The client a run went through, as a reader of the reference knows it: the library, and the
    framework's backend class in front of it (``redis-py (Django's RedisCache)``)."""
    client = str(info.get("client") or "")
    backend = str(info.get("backend") or "").rsplit(".", 1)[-1]
    if info.get("framework") == "django" and backend:
        return f"{client} (Django's {backend})"
    return _client_name(info)


def _same_client(ours: str, theirs: str) -> bool:
    def norm(name: str) -> str:
        return name.strip().lower().replace("_", "-")
    return norm(ours) == norm(theirs)


def substitutions(document: ResultsDocument, runs: list[Run]) -> list[Finding]:
    """A line per label the experiment's ``reference.clients`` names, measured through another client
    than the reference's (a preset reproducing a write-up with the clients it could run here)."""
    reference = document.experiment.reference
    if reference is None:
        return []
    title = reference.name or "the reference"
    out = []
    for label, theirs in reference.clients.items():
        infos = [_info(r) for r in runs if r.label == label and r.status in RANKED_STATUSES]
        ours = list(dict.fromkeys(_client_of(i) for i in infos if i.get("client")))
        if not ours or all(_same_client(str(i.get("client")), theirs) for i in infos if i.get("client")):
            continue
        out.append(Finding(Kind.CLIENT, f"{label}: measured through {' / '.join(ours)} where {title} used {theirs}: "
                           "the client library's own cost is in every figure, so these are not the figures of the "
                           "reference's client", (label,)))
    return out


def _names(labels: Iterable[str]) -> str:
    return ", ".join(labels)


def _plural(labels: Sized, one: str, many: str) -> str:
    return one if len(labels) == 1 else many


def _stores(run: Run) -> bool:
    """Whether the run's scheme keeps what it is given (null:// by design does not)."""
    row = find_scheme(run.scheme or "")
    return row is None or row.stores


def _hit_ratio_warning(run: Run, phase: Phase, spec: PhasePlan, document: ResultsDocument,
                       where: str, out: list[Finding]) -> None:
    """A get hit ratio well under what a prefilled key space without TTL or evictions predicts."""
    get = phase.ops.get("get")
    if not get or not spec.prefill or spec.ttl or run.dropped_writes:
        return
    evicted = phase.server.evictions if phase.server is not None else None
    capacity = _info(run).get("max_entries")
    keys = spec.keys
    if evicted or not _stores(run) or (
            isinstance(capacity, int) and (not isinstance(keys, int) or capacity < keys)):
        return
    hits, misses = get.hits, get.misses
    mix = spec.mix or {}
    if isinstance(mix, str):  # a swept mix is saved as the text the user gave (--sweep 'mix=get=1;set=1')
        from ..spec import parse_mix

        mix = parse_mix(mix)
    expected = _expected_hit_ratio(mix)
    if expected is None or hits + misses < FEW_SAMPLES:
        return
    observed = hits / (hits + misses)
    if observed < expected - HIT_RATIO_SLACK:
        out.append(Finding(Kind.HIT_RATIO, f"{where}: get hit ratio {observed:.0%} where a prefilled key space "
                           f"without TTL or evictions predicts ≥ {expected:.0%} (from the mix's sets and deletes): "
                           "keys are lost somewhere", (run.label,)))


def _extreme_tails(phase: Phase, hiccup: bool) -> list[tuple[str, str]]:
    """Per op: a p99 at TAIL_P99_OVER_P50 × its p50 or more, or a slowest op over TAIL_MAX_S (unless the
    phase's hiccup line already names that one), whichever load path measured it."""
    out = []
    for op_name, op in phase.ops.items():
        if op_name in PSEUDO_OPS or op.count < TAIL_MIN_SAMPLES:
            continue
        summary = phase.summary_of(op)
        p50, p99, top = summary.p50_us, summary.p99_us, summary.max_us
        if p50 and p99 and p99 >= TAIL_P99_OVER_P50 * p50:
            out.append((op_name, f"p99 {fmt_latency(p99)} is {fmt_factor(p99 / p50)}× its p50 of {fmt_latency(p50)}"))
        elif top and top > TAIL_MAX_S * 1e6 and not hiccup:
            out.append((op_name, f"the slowest took {fmt_latency(top)} (p99 {fmt_latency(p99)}, "
                                 f"p50 {fmt_latency(p50)})"))
    return out


def _dropped_share(run: Run) -> str:
    """How many writes a run that drops writes lost, as its reads and canaries show: every one where no
    read ever hit; else that it drops some."""
    reads = hits = 0
    for phase in run.phases:
        for name, op in phase.ops.items():
            if "delete" not in name and (op.hits or op.misses):
                reads += op.hits + op.misses
                hits += op.hits
    if reads and not hits:
        return "dropped every write (not one of its reads found a value)"
    return "drops writes"


def _hiccup(phase: Phase, spec: PhasePlan) -> str:
    """What shows a stall inside ``phase`` — one op far slower than its tail, a second far under the
    phase's median throughput, a phase that overran its planned duration — or "" where nothing does.
    A phase cut short is left out: its budget line says so, and its figures cover part of a run."""
    if phase.interrupted or phase.stopped_on_errors:
        return ""
    signs = (_slowest_op(phase, spec), _dip(phase, spec), _overrun(phase, spec))
    return "; ".join(sign for sign in signs if sign)


def _seconds(t: float) -> str:
    """Second ``t`` of a phase as the span it covers: ``2–3 s``."""
    return f"{_num(t)}–{_num(t + 1)} s"


def _slowest_op(phase: Phase, spec: PhasePlan) -> str:
    """The slowest op, when it stands far out of its own tail (≥ HICCUP_MAX_OVER_P99 × its p99 over
    enough samples) or took over HICCUP_MAX_S where its p50 is far less; with the second it started in,
    where the per-second series kept each second's slowest (without a warm-up, a slowest op in the
    first second is the cold start's: not a stall)."""
    worst: tuple[float, str, float | None] | None = None
    for op_name, op in phase.ops.items():
        if op_name in PSEUDO_OPS:  # the origin is the workload's stand-in, not the backend
            continue
        summary = phase.summary_of(op)
        top, p50, p99 = summary.max_us, summary.p50_us, summary.p99_us
        if not top or top < HICCUP_MIN_S * 1e6 or (worst is not None and top <= worst[0]):
            continue
        outlier = op.count >= HICCUP_MIN_SAMPLES and p99 and top >= HICCUP_MAX_OVER_P99 * p99
        if outlier or (top >= HICCUP_MAX_S * 1e6 and p50 and top >= HICCUP_MAX_OVER_P50 * p50):
            worst = (top, op_name, p99)
    if worst is None:
        return ""
    top, op_name, p99 = worst
    tail = f" ({fmt_factor(top / p99)}× its p99 of {fmt_latency(p99)})" if p99 else ""
    timed = [e for e in phase.timeseries or [] if isinstance(e.max_us, int | float)]
    second = max(timed, key=lambda e: e.max_us, default=None)
    if second is None or second.max_us < 0.9 * top:  # not this op's second (or not recorded)
        return f"the slowest {op_name} took {fmt_latency(top)}{tail}"
    if second.t == 0 and not spec.warmed:
        return ""
    return f"the slowest {op_name} took {fmt_latency(top)}{tail}, at {_seconds(second.t)}"


def _dip(phase: Phase, spec: PhasePlan) -> str:
    """The full second furthest under half the phase's median throughput, between seconds at the
    median or above (a cold start's climb and a slow decline are trends, not a stall)."""
    if spec.replayed_on_schedule:
        return ""  # replayed at the recorded times: the dips are the trace's own
    series = _throughput(phase, spec)
    if len(series) < HICCUP_MIN_SECONDS:
        return ""
    median = statistics.median(v for _, v in series)
    if median < HICCUP_MIN_RATE:
        return ""
    values = [v for _, v in series]
    dips = [(v, t) for i, (t, v) in enumerate(series) if v < HICCUP_DIP * median
            and max(values[:i], default=0.0) >= median and max(values[i + 1:], default=0.0) >= median]
    if not dips:
        return ""
    low, t = min(dips)
    more = f", and under half in {len(dips) - 1} other second{'s' if len(dips) > 2 else ''}" if len(dips) > 1 else ""
    return (f"throughput fell to {low / median:.0%} of the phase's median at {_seconds(t)} "
            f"({low:,.0f} vs {median:,.0f} ops/s){more}")


def _throughput(phase: Phase, spec: PhasePlan) -> list[tuple[int, float]]:
    """(second, ops/s) over the phase's full seconds: the client's count per second (a second missing
    between them had none: every worker was stuck in one op), else the server's rate per interval
    without the first and last (the engine's connecting and draining). Without a warm-up the first
    second is the cold start's, and a last, partial second is not judged."""
    entries = phase.timeseries or []
    if any(e.t != int(e.t) for e in entries):
        return []
    if any(isinstance(e.ops, int) for e in entries):
        counts = {int(e.t): e.ops for e in entries if isinstance(e.ops, int)}
        first = 0 if spec.warmed else 1
        last = math.floor((phase.wall_s or 0.0) + SECOND_SLACK_S) - 1
        return [(t, float(counts.get(t, 0))) for t in range(first, last + 1)]
    rates = [(int(e.t), float(e.server_ops_per_s)) for e in entries
             if isinstance(e.server_ops_per_s, int | float)]
    return sorted(rates)[1:-1]


def _overrun(phase: Phase, spec: PhasePlan) -> str:
    """A phase that ran more than HICCUP_OVERRUN (and HICCUP_MIN_S) past its planned duration:
    something held it up at the end (an op budget has no planned duration to overrun). In open loop
    a worker waits for its next op's due time before it sees the deadline: up to a few of its gaps
    past it are the schedule's."""
    planned, wall = spec.duration, phase.wall_s or 0.0
    if isinstance(planned, bool) or not isinstance(planned, int | float) or planned <= 0:
        return ""
    rate, workers = phase.rate, phase.workers or 1
    schedule = OPEN_LOOP_GAPS * workers / rate if phase.mode == "open" and rate else 0.0
    over = wall - planned
    if over <= HICCUP_OVERRUN * planned + schedule or over < HICCUP_MIN_S:
        return ""
    return f"the phase ran {wall:.2f} s of a planned {_num(planned)} s (+{over / planned:.0%})"


def _load_falls(runs: list[Run]) -> list[Finding]:
    """Latency that falls as a swept load parameter rises: an idle core's wake-up, not speed."""
    series: dict[tuple, dict[float, list[float]]] = {}
    for run in runs:
        sweep = run.sweep or {}
        loads = [k for k in sweep if k in LOAD_PARAMS]
        if not loads or run.status not in RANKED_STATUSES:
            continue
        profile = run.profile or ""
        for param in loads:
            try:
                level = float(sweep[param])
            except (TypeError, ValueError):
                continue
            rest = tuple(sorted((k, str(v)) for k, v in sweep.items() if k != param))
            for phase in run.phases:
                if (param == "rate") != (phase.mode == "open"):
                    continue  # at a fixed rate more workers or connections are capacity, not load
                for op_name, op in phase.ops.items():
                    p50 = phase.summary_of(op).p50_us
                    if op.count >= 2 and p50:
                        key = (run.label, param, profile, rest, phase.name or "main", op_name)
                        series.setdefault(key, {}).setdefault(level, []).append(p50)
    out = []
    for (label, param, profile, rest, _phase, op_name), points in series.items():
        levels = sorted(points)
        for low, high in zip(levels, levels[1:]):
            p_low, p_high = statistics.median(points[low]), statistics.median(points[high])
            if p_low > LOAD_FALL * p_high:
                context = "".join(f" [{x}]" for x in (profile, ",".join(f"{k}={v}" for k, v in rest)) if x)
                out.append(Finding(Kind.LOAD_FALLS, f"{label}{context} {op_name}: p50 falls as {param} rises "
                                   f"({_num(low)} → {_num(high)}: {fmt_latency(p_low)} → {fmt_latency(p_high)}): an "
                                   "artefact (an idle core waking up, or a throttled generator), not speed; compare "
                                   "at a load that keeps it busy", (label,), (op_name,)))
                break
    return out
