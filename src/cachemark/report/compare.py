"""Comparing results: a base document against one or more new ones, per backend label and op.

Owns :func:`compare` and its renderings, and the CI gate (:func:`parse_rules`,
:func:`gate`). Runs are matched on (label, sweep point, phase, op). Runs with the same
label and a ``"repeat": i`` field are repeats of one measurement: their figures are
averaged, and the spread across them — (max − min) / mean, per figure — is the run-to-run
noise. Without repeats on either side the noise cannot be measured and
:data:`DEFAULT_NOISE` (5 %) stands in. A difference no larger than the noise is "same
(within noise)", never better or worse: it may be real, but these runs cannot tell. The
gate fails a figure only beyond both its rule's threshold and that noise.

Two files measured under different workloads (value size, workers, mix, network, sweep,
...) can still be matched, but then the ratios mix two experiments:
:func:`workload_differences` names each differing field with both values, and every
rendering carries the warning (:func:`workload_warnings`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console

from ..errors import UserError
from ..results import ResultsDocument
from ..results.names import op_label
from ..textfile import one_line
from .data import OpRow, op_rows
from .figures import fmt_latency, fmt_rate
from .fitted_table import FOLD_NAMES, fit_columns, print_fitted
from .planned import SavedObject

METRICS = ("ops_per_s", "p50_us", "p90_us", "p99_us", "p999_us", "max_us")
HIGHER_IS_BETTER = {"ops_per_s"}
# each figure as the tables print it, which is how --fail-on names it
PRINTED = {"ops_per_s": "ops/s", "p50_us": "p50", "p90_us": "p90", "p99_us": "p99", "p999_us": "p99.9",
           "max_us": "max"}
# The run-to-run spread assumed when neither side has repeats to measure it: back-to-back
# runs of one short workload on one machine differ by a few percent in ops/s and the middle
# percentiles, so a smaller difference is not evidence of a change (tails vary more: repeat).
# The same 5 % under which the verdict calls two backends measured once a tie (verdict.py).
DEFAULT_NOISE = 0.05

Key = tuple[str, str, str, str]  # label, sweep point, phase, op


def _groups(document: ResultsDocument) -> dict[Key, list[OpRow]]:
    groups: dict[Key, list[OpRow]] = defaultdict(list)
    for row in op_rows(document):
        groups[(row.label, row.sweep, row.phase.name, row.op_name)].append(row)
    return groups


@dataclass(frozen=True)
class _Side:
    """One side's rows of a (label, sweep point, phase, op): each figure's mean over repeats, and its
    relative spread when there are two or more."""

    repeats: int
    errors: int
    error_rate: float  # of the ops attempted
    means: dict[str, float | None]
    noise: dict[str, float | None]

    @classmethod
    def of(cls, rows: list[OpRow]) -> _Side:
        errors = sum(r.op.error_total for r in rows)
        done = sum(r.count for r in rows)
        means, noise = {}, {}
        for metric in METRICS:
            values = [v for r in rows if (v := r.figure(metric)) is not None]
            mean = sum(values) / len(values) if values else None
            means[metric] = mean
            repeated = len(values) >= 2 and all(r.run.repeat is not None for r in rows)
            noise[metric] = (max(values) - min(values)) / mean if repeated and mean else None
        return cls(len(rows), errors, errors / (done + errors) if done + errors else 0.0, means, noise)


def _direction(metric: str, ratio: float, within_noise: bool) -> str:
    """A difference the noise can explain is "same": calling it better or worse would be a guess."""
    if within_noise or ratio == 1.0:
        return "same"
    better = ratio > 1.0 if metric in HIGHER_IS_BETTER else ratio < 1.0
    return "better" if better else "worse"


@dataclass(frozen=True)
class FigureChange:
    """One figure of a compared op: both values, their ratio, the noise it is judged by, and the reading."""

    base: float | None
    new: float | None
    ratio: float | None  # new ÷ base
    direction: str | None  # better | worse | same (within the noise); None without a ratio
    noise: float  # the larger spread of the two sides' repeats, else DEFAULT_NOISE
    noise_measured: bool  # from repeats, not the default
    within_noise: bool | None  # |ratio − 1| ≤ noise

    @classmethod
    def of(cls, b: _Side, n: _Side, metric: str) -> FigureChange:
        bv, nv = b.means[metric], n.means[metric]
        ratio = nv / bv if bv and nv is not None else None
        measured = [x for x in (b.noise[metric], n.noise[metric]) if x is not None]
        noise = max(measured) if measured else DEFAULT_NOISE
        within = abs(ratio - 1.0) <= noise if ratio is not None else None
        direction = _direction(metric, ratio, bool(within)) if ratio is not None else None
        return cls(bv, nv, ratio, direction, noise, bool(measured), within)


@dataclass(frozen=True)
class CompareRow:
    """One (label, sweep point, phase, op) of a new document matched with the base's."""

    new: int  # which new document
    label: str
    sweep: str
    phase: str
    op: str
    base_side: _Side
    new_side: _Side
    figures: dict[str, FigureChange]  # by metric (METRICS)

    def to_json(self) -> dict[str, Any]:  # Any: a row of the JSON output
        """The row as ``compare -f json`` writes it: flat, ``<m>_ratio``, ``base_<m>``… per figure."""
        out = {"new": self.new, "label": self.label, "sweep": self.sweep, "phase": self.phase, "op": self.op,
               "base_repeats": self.base_side.repeats, "new_repeats": self.new_side.repeats}
        for metric, f in self.figures.items():
            out.update({f"base_{metric}": f.base, f"new_{metric}": f.new, f"{metric}_ratio": f.ratio,
                        f"{metric}_direction": f.direction, f"{metric}_noise": f.noise,
                        f"{metric}_noise_measured": f.noise_measured, f"{metric}_within_noise": f.within_noise})
        out.update(base_errors=self.base_side.errors, new_errors=self.new_side.errors,
                   base_error_rate=self.base_side.error_rate, new_error_rate=self.new_side.error_rate)
        return out

    @property
    def where(self) -> str:
        """``label`` or ``label [sweep point]``."""
        return self.label + (f" [{self.sweep}]" if self.sweep else "")


def compare(base_doc: ResultsDocument, new_docs: list[ResultsDocument]) -> list[CompareRow]:
    """One row per new document × (label, sweep point, phase, op) present in both.

    Each row has, per figure (:class:`FigureChange`): both values, the ratio (new ÷ base), the
    noise (the larger relative spread of the two sides' repeats, or :data:`DEFAULT_NOISE` when
    neither has repeats: ``noise_measured`` says which), ``within_noise`` (|ratio − 1| ≤ noise)
    and the ``direction`` (better | worse, or same when within the noise).
    """
    base = {key: _Side.of(rows) for key, rows in _groups(base_doc).items()}
    out: list[CompareRow] = []
    for index, document in enumerate(new_docs):
        for key, rows in _groups(document).items():
            if key not in base:
                continue
            b, n = base[key], _Side.of(rows)
            label, sweep, phase, op = key
            out.append(CompareRow(index, label, sweep, phase, op, b, n,
                                  {metric: FigureChange.of(b, n, metric) for metric in METRICS}))
    return out


def unmatched(base_doc: ResultsDocument, new_docs: list[ResultsDocument]) -> list[str]:
    """Labels/ops present on one side only (so a reader knows what was not compared)."""
    base = set(_groups(base_doc))
    seen: set[Key] = set()
    for document in new_docs:
        seen |= set(_groups(document))
    return sorted(f"{k[0]} {k[3]}" + (f" [{k[1]}]" if k[1] else "") for k in base ^ seen)


SAME = "same (within noise)"


def _ratio_text(ratio: float) -> str:
    """Two decimals, or three when two would print a measured difference as "1.00×"."""
    text = f"{ratio:.2f}×"
    return f"{ratio:.3f}×" if text == "1.00×" and ratio != 1.0 else text


def _verdict(row: CompareRow, metric: str, same: str = SAME) -> str:
    """The ratio stays visible; the word says whether it is more than the noise."""
    figure = row.figures[metric]
    if figure.ratio is None:
        return "-"
    return f"{_ratio_text(figure.ratio)} {same if figure.direction == 'same' else figure.direction}"


def noise_note(rows: list[CompareRow]) -> str | None:
    """The line under a table saying what "same (within noise)" rested on: repeats, or the default."""
    same = [f.noise_measured for row in rows for f in row.figures.values() if f.direction == "same"]
    if not same:
        return None
    grounds = []
    if any(same):
        grounds.append("the spread across repeats")
    if not all(same):
        grounds.append(f"{DEFAULT_NOISE:.0%}, assumed where neither side has repeats "
                       "(cachemark run --repeat 3 measures it)")
    return (f"{SAME}: the difference is no larger than the noise, " + ", or ".join(grounds)
            + " — neither better nor worse.")


COMPARE_COLUMNS = ("new", "backend", "op", "base ops/s", "new ops/s", "ops/s", "p50", "p99", "p99.9")
COMPARE_DROP_ORDER = ("p99.9", "base ops/s", "new ops/s", FOLD_NAMES, "p50", "p99")


def _table_cells(rows: list[CompareRow], names: list[str] | None, same: str) -> list[list[str]]:
    cells = []
    for row in rows:
        op = op_label(row.phase, row.op, row.phase != "main")
        ops = row.figures["ops_per_s"]
        cells.append([names[row.new] if names else str(row.new), row.where, op,
                      fmt_rate(ops.base or 0.0), fmt_rate(ops.new or 0.0),
                      *[_verdict(row, m, same) for m in ("ops_per_s", "p50_us", "p99_us", "p999_us")]])
    return cells


def render_table(rows: list[CompareRow], console: Console | None = None,
                 names: list[str] | None = None, warnings: list[str] | None = None) -> None:
    console = console or Console()
    for warning in warnings or []:
        console.print(warning, markup=False, highlight=False)
    columns: tuple[str, ...] = COMPARE_COLUMNS
    one_file = len({row.new for row in rows}) == 1  # one new file: its name in every row says nothing
    if one_file:
        columns = columns[1:]
    cells = []
    for same in (SAME, "same"):  # "(within noise)" in every cell, unless it would push figures out
        cells = [row[1:] if one_file else row for row in _table_cells(rows, names, same)]
        fit = fit_columns(console, columns, cells, columns.index("op") + 1, COMPARE_DROP_ORDER)
        if fit is not None and not fit[1]:
            break  # the note under the table spells out "same" either way
    print_fitted(console, columns, cells, names=columns.index("op") + 1, title="cachemark compare (new ÷ base)",
                 drop_order=COMPARE_DROP_ORDER, more="all columns: cachemark compare -f json")
    note = noise_note(rows)
    if note:
        console.print(note, markup=False, highlight=False)


def to_markdown(rows: list[CompareRow], warnings: list[str] | None = None,
                verdict: GateVerdict | None = None) -> str:
    lines = [f"> **{w.partition(': ')[0]}:** {w.partition(': ')[2]}" for w in warnings or []]
    if lines:
        lines.append("")
    lines += ["| backend | op | base ops/s | new ops/s | ops/s | base p99 | new p99 | p99 |",
              "| :--- | :--- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        ops, p99 = row.figures["ops_per_s"], row.figures["p99_us"]
        lines.append(f"| {row.where} | {row.op} | "
                     f"{fmt_rate(ops.base or 0.0)} | {fmt_rate(ops.new or 0.0)} | "
                     f"{_verdict(row, 'ops_per_s')} | {fmt_latency(p99.base)} | "
                     f"{fmt_latency(p99.new)} | {_verdict(row, 'p99_us')} |")
    note = noise_note(rows)
    if note:
        lines += ["", f"*{note}*"]
    if verdict is not None:
        lines += ["", *gate_markdown(verdict)]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Comparison:
    """What ``compare`` says, whether as a table, Markdown or JSON: the rows, the warnings, what was not
    compared, and the gate's verdict (None without --fail-on)."""

    base: str
    new: list[str]
    rows: list[CompareRow]
    warnings: list[str]
    not_compared: list[str]
    gate: GateVerdict | None

    def to_json(self) -> dict[str, Any]:  # Any: the JSON output
        """One document whether it goes to stdout or to a file, so a machine needs no second source."""
        return {"base": self.base, "new": self.new, "rows": [row.to_json() for row in self.rows],
                "warnings": self.warnings, "not_compared": self.not_compared,
                "gate": self.gate.to_json() if self.gate is not None else None}


# --- the CI gate: --fail-on 'p99>10%,ops/s<-5%' -----------------------------------------------

RULE_EXAMPLE = "'p99>10%,ops/s<-5%'"
_RULE = re.compile(r"\s*(?P<name>[^<>]*?)\s*(?P<op>[<>])\s*(?P<pct>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*%\s*")
_BY_NAME = {name: metric for metric, name in PRINTED.items()}
# Errors are a figure too: any rise in an op's error rate fails the gate unless ``errors>N%`` allows a
# rise of up to N percentage points; a failed run always fails it.
ERRORS = "errors"
NOISE_GROUNDS = f"the spread across repeats; {DEFAULT_NOISE:.0%} assumed where neither side has repeats"


@dataclass(frozen=True)
class Rule:
    """One ``--fail-on`` rule: a figure as the tables print it and the signed change, in %,
    beyond which it counts as a regression (``p99>10%``: +10; ``ops/s<-5%``: −5)."""

    name: str
    metric: str
    threshold_pct: float

    @property
    def text(self) -> str:
        return f"{self.name}{'<' if self.metric in HIGHER_IS_BETTER else '>'}{self.threshold_pct:g}%"

    @property
    def loosens_errors(self) -> bool:
        return self.metric == ERRORS

    def exceeded(self, change_pct: float) -> bool:
        if self.metric in HIGHER_IS_BETTER:
            return change_pct < self.threshold_pct
        return change_pct > self.threshold_pct


def _rule(part: str) -> Rule:
    """One rule, or one line saying what is wrong with it and how to write it."""
    shown = f"'{one_line(part.strip())}'"
    match = _RULE.fullmatch(part)
    if match is None:
        raise UserError(f"--fail-on: cannot read {shown}: write FIGURE>N% for a latency, ops/s<-N% for "
                        f"throughput, comma-separated, e.g. {RULE_EXAMPLE}")
    name, pct = match["name"].lower(), float(match["pct"]) + 0.0  # + 0.0: "-0%" reads as 0
    if name == ERRORS:
        if match["op"] != ">" or not 0 <= pct <= 100:
            raise UserError(f"--fail-on {shown}: the error rate regresses when it rises; write errors>N% "
                            "with N from 0 to 100 (percentage points of the ops attempted)")
        return Rule(name, ERRORS, pct)
    metric = _BY_NAME.get(name)
    if metric is None:
        raise UserError(f"--fail-on {shown}: unknown figure '{one_line(match['name'])}'; "
                        f"choose one of {', '.join(PRINTED.values())}, {ERRORS}")
    # a rule names a regression: one pointing the other way (or that can never fire) is a typo
    if metric in HIGHER_IS_BETTER and (match["op"] != "<" or pct > 0):
        raise UserError(f"--fail-on {shown}: ops/s regresses when it falls; write ops/s<-{abs(pct):g}%")
    if metric in HIGHER_IS_BETTER and pct <= -100:
        raise UserError(f"--fail-on {shown}: ops/s cannot fall by 100% or more, so the rule could never fail")
    if metric not in HIGHER_IS_BETTER and (match["op"] != ">" or pct < 0):
        raise UserError(f"--fail-on {shown}: a latency regresses when it rises; write {name}>{abs(pct):g}%")
    return Rule(name, metric, pct)


def parse_rules(text: str) -> list[Rule]:
    """``p99>10%,ops/s<-5%`` as rules, before any file is read: a typo costs no work."""
    parts = text.split(",")
    if any(not part.strip() for part in parts):
        raise UserError(f"--fail-on '{one_line(text)}': an empty rule; write rules like {RULE_EXAMPLE}")
    return [_rule(part) for part in parts]


@dataclass(frozen=True)
class Failure:
    """A regression the gate found, with the one line a person reads (``line``)."""

    file: str
    label: str
    sweep: str
    phase: str
    op: str
    figure: str  # as --fail-on names it (p99, ops/s), errors, or run (a failed run)
    rule: str
    threshold_pct: float
    base: float | None
    new: float | str | None  # a failed run: its status
    change_pct: float | None
    noise_pct: float
    noise_measured: bool
    line: str


def _failure(row: CompareRow, rule: Rule, change_pct: float, file: str, show_file: bool) -> Failure:
    figure = row.figures[rule.metric]
    base, new, noise = figure.base, figure.new, figure.noise
    fmt = fmt_rate if rule.metric in HIGHER_IS_BETTER else fmt_latency
    where = (f"{file}: " if show_file else "") + row.where
    line = (f"regression: {where} {row.phase}:{row.op} {rule.name} {fmt(base)} → {fmt(new)} "
            f"({change_pct:+,.1f}%), beyond {rule.text} and the noise {noise:.1%} "
            + ("(the spread across repeats)" if figure.noise_measured else "(assumed: no repeats)"))
    return Failure(file, row.label, row.sweep, row.phase, row.op, rule.name, rule.text, rule.threshold_pct, base,
                   new, change_pct, noise * 100, figure.noise_measured, line)


def _error_failure(row: CompareRow, allowed_pct: float, file: str, show_file: bool) -> Failure | None:
    """An op whose error rate rose by more than ``allowed_pct`` points (0 by default): a regression."""
    b, n = row.base_side, row.new_side
    base, new = b.error_rate * 100, n.error_rate * 100
    change = new - base
    if not (n.errors and change > allowed_pct):
        return None
    where = (f"{file}: " if show_file else "") + row.where
    line = (f"regression: {where} {row.phase}:{row.op} errors {b.errors:,} → {n.errors:,} "
            f"(error rate {base:.2f}% → {new:.2f}%), beyond errors>{allowed_pct:g}%")
    return Failure(file, row.label, row.sweep, row.phase, row.op, ERRORS, f"errors>{allowed_pct:g}%", allowed_pct,
                   b.errors, n.errors, change, 0.0, False, line)


def failed_runs(new_docs: list[ResultsDocument], names: list[str]) -> list[Failure]:
    """Every run of a new file that failed: the gate fails on each (a broken run is no pass). A skipped
    run measured nothing, and is named among the runs not compared."""
    out = []
    for index, document in enumerate(new_docs):
        for run in document.runs:
            if run.status != "failed":
                continue
            reason = one_line(run.reason or "no reason recorded")
            where = (f"{names[index]}: " if len(names) > 1 else "") + run.label
            out.append(Failure(names[index], run.label, run.sweep_key, "", "", "run", "no failed run", 0.0, None,
                               run.status, None, 0.0, False, f"regression: {where}: the run {run.status}: {reason}"))
    return out


@dataclass(frozen=True)
class GateVerdict:
    """What ``--fail-on`` decided: the rules, how many figures were checked, and each regression."""

    rules: list[str]
    errors_allowed_pct: float
    default_noise_pct: float
    checked: int
    failures: list[Failure]

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:  # Any: the JSON output's "gate"
        return {"rules": self.rules, "errors_allowed_pct": self.errors_allowed_pct,
                "default_noise_pct": self.default_noise_pct, "checked": self.checked, "passed": self.passed,
                "failures": [asdict(failure) for failure in self.failures]}


def gate(rows: list[CompareRow], rules: list[Rule], names: list[str],
         broken: list[Failure] | None = None) -> GateVerdict:
    """The verdict of ``--fail-on``: each figure a rule names that moved beyond both the
    rule's threshold and the noise. Beyond the threshold alone is not enough: a change
    the noise can explain would fail jobs at random. Errors are checked whatever the rules
    (a rise in an op's error rate fails, ``errors>N%`` allows N points), and ``broken`` —
    the new files' failed runs (:func:`failed_runs`) — fails it too."""
    failures, checked = list(broken or []), 0
    allowed = max((rule.threshold_pct for rule in rules if rule.loosens_errors), default=0.0)
    for row in rows:
        failure = _error_failure(row, allowed, names[row.new], len(names) > 1)
        if failure:
            failures.append(failure)
        for rule in rules:
            if rule.loosens_errors:
                continue
            figure = row.figures[rule.metric]
            if figure.ratio is None:
                continue
            checked += 1
            change = (figure.ratio - 1.0) * 100
            if rule.exceeded(change) and not figure.within_noise:
                failures.append(_failure(row, rule, change, names[row.new], len(names) > 1))
    return GateVerdict([rule.text for rule in rules], allowed, DEFAULT_NOISE * 100, checked, failures)


def _gate_summary(verdict: GateVerdict) -> str:
    rules = ",".join(verdict.rules)
    count = len(verdict.failures)
    if count:
        return (f"{count} regression{'s' if count != 1 else ''} beyond --fail-on '{rules}' and the noise "
                f"({NOISE_GROUNDS})")
    return (f"no figure regressed beyond --fail-on '{rules}' and the noise ({NOISE_GROUNDS}); "
            f"{verdict.checked} checked")


def gate_lines(verdict: GateVerdict) -> list[str]:
    """One line per regression, then the verdict with the exit code it brings: what a CI log shows."""
    last = ("exit 1: " if verdict.failures else "passed: ") + _gate_summary(verdict)
    return [failure.line for failure in verdict.failures] + [last]


def gate_markdown(verdict: GateVerdict) -> list[str]:
    """The verdict as Markdown, for a pull-request comment."""
    head = "**Gate failed:**" if verdict.failures else "**Gate passed:**"
    lines = [f"{head} {_gate_summary(verdict)}"]
    if verdict.failures:
        lines += ["", *(f"- {failure.line}" for failure in verdict.failures)]
    return lines


# --- did the two files measure the same experiment? -------------------------------------------

# Not the experiment: another random draw of the same workload, and what to do about errors.
NOT_WORKLOAD = frozenset({"seed", "on_error", "error_grace"})


def _text(value: Any) -> str:
    if value is None or value == {} or value == []:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ",".join(f"{k}={_text(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    return str(value)


def _fields(document: ResultsDocument) -> SavedObject:
    """The experiment's workload, network and sweep as flat ``field: value`` pairs."""
    experiment = document.experiment
    workload = experiment.workload_spec
    out = {k: v for k, v in workload.items() if k not in NOT_WORKLOAD and k != "phases"}
    phases = experiment.planned_phases
    out["phases"] = [p.get("name", str(i)) for i, p in enumerate(phases)]
    for i, phase in enumerate(phases):
        for key, value in phase.items():
            if key != "name":
                out[f"{phase.get('name', i)}.{key}"] = value  # compared only when both have the same phases
    out["network"] = experiment.network
    out["sweep"] = experiment.sweep
    return out


def workload_differences(base_doc: ResultsDocument, new_doc: ResultsDocument) -> list[dict[str, str]]:
    """Each field of the experiment (workload, phases, network, sweep) whose value differs:
    ``{"field", "base", "new"}`` with the values as text. Files without the field count as none."""
    base, new = _fields(base_doc), _fields(new_doc)
    same_phases = base["phases"] == new["phases"]
    out = []
    for field in [*base, *(k for k in new if k not in base)]:
        if "." in field and not same_phases:
            continue  # "phases" itself says they differ
        a, b = _text(base.get(field)), _text(new.get(field))
        if a != b:
            out.append({"field": field, "base": a, "new": b})
    return out


def workload_warnings(base_doc: ResultsDocument, new_docs: list[ResultsDocument],
                      names: list[str] | None = None) -> list[str]:
    """One line per new document whose experiment differs from the base's, naming each field."""
    out = []
    for index, document in enumerate(new_docs):
        differences = workload_differences(base_doc, document)
        if not differences:
            continue
        which = f" ({names[index]})" if names and len(new_docs) > 1 else ""
        fields = "; ".join(f"{d['field']} {d['base']} vs {d['new']}" for d in differences)
        out.append(f"warning: the workloads differ{which}: {fields} — the comparison mixes two experiments")
    return out
