"""Comparing results: a base document against one or more new ones, per backend label and op.

Owns :func:`compare` and its renderings. Runs are matched on (label, sweep point, phase,
op). Runs with the same label and a ``"repeat": i`` field are repeats of one measurement:
their figures are averaged, and the spread across them — (max − min) / mean, per figure —
is the run-to-run noise. A difference smaller than the noise of either side is flagged
``within_noise``: it may be real, but these runs cannot tell.

Two files measured under different workloads (value size, workers, mix, network, sweep,
...) can still be matched, but then the ratios mix two experiments:
:func:`workload_differences` names each differing field with both values, and every
rendering carries the warning (:func:`workload_warnings`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from rich.console import Console

from .data import op_rows
from .table import FOLD_NAMES, fmt_latency, fmt_rate, print_fitted

METRICS = ("ops_per_s", "p50_us", "p90_us", "p99_us", "p999_us", "max_us")
HIGHER_IS_BETTER = {"ops_per_s"}

Key = tuple[str, str, str, str]  # label, sweep point, phase, op


def _groups(document: dict[str, Any]) -> dict[Key, list[dict[str, Any]]]:
    groups: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for row in op_rows(document):
        groups[(row["label"], row["sweep"], row["phase"], row["op"])].append(row)
    return groups


def _aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean of each figure over repeats, and the relative spread when there are two or more."""
    out: dict[str, Any] = {"repeats": len(rows)}
    for metric in METRICS:
        values = [r[metric] for r in rows if r.get(metric) is not None]
        mean = sum(values) / len(values) if values else None
        out[metric] = mean
        repeated = len(values) >= 2 and all(r.get("repeat") is not None for r in rows)
        out[f"{metric}_noise"] = (max(values) - min(values)) / mean if repeated and mean else None
    return out


def _direction(metric: str, ratio: float) -> str:
    if ratio == 1.0:
        return "same"
    better = ratio > 1.0 if metric in HIGHER_IS_BETTER else ratio < 1.0
    return "better" if better else "worse"


def compare(base_doc: dict[str, Any], new_docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per new document × (label, sweep point, phase, op) present in both.

    Each row has, per figure: ``base_<m>``, ``new_<m>``, ``<m>_ratio`` (new ÷ base),
    ``<m>_direction`` (better | worse | same), ``<m>_noise`` (the larger relative spread
    of the two sides' repeats, or None without repeats) and ``<m>_within_noise``.
    """
    base = {key: _aggregate(rows) for key, rows in _groups(base_doc).items()}
    out: list[dict[str, Any]] = []
    for index, document in enumerate(new_docs):
        for key, rows in _groups(document).items():
            if key not in base:
                continue
            b, n = base[key], _aggregate(rows)
            label, sweep, phase, op = key
            row: dict[str, Any] = {"new": index, "label": label, "sweep": sweep, "phase": phase, "op": op,
                                   "base_repeats": b["repeats"], "new_repeats": n["repeats"]}
            for metric in METRICS:
                bv, nv = b[metric], n[metric]
                ratio = nv / bv if bv and nv is not None else None
                noises = [x for x in (b[f"{metric}_noise"], n[f"{metric}_noise"]) if x is not None]
                noise = max(noises) if noises else None
                row.update({
                    f"base_{metric}": bv, f"new_{metric}": nv, f"{metric}_ratio": ratio,
                    f"{metric}_direction": _direction(metric, ratio) if ratio is not None else None,
                    f"{metric}_noise": noise,
                    f"{metric}_within_noise": (abs(ratio - 1.0) <= noise) if ratio is not None
                    and noise is not None else None,
                })
            out.append(row)
    return out


def unmatched(base_doc: dict[str, Any], new_docs: list[dict[str, Any]]) -> list[str]:
    """Labels/ops present on one side only (so a reader knows what was not compared)."""
    base = set(_groups(base_doc))
    seen: set[Key] = set()
    for document in new_docs:
        seen |= set(_groups(document))
    return sorted(f"{k[0]} {k[3]}" + (f" [{k[1]}]" if k[1] else "") for k in base ^ seen)


def _verdict(row: dict[str, Any], metric: str) -> str:
    ratio = row[f"{metric}_ratio"]
    if ratio is None:
        return "-"
    text = f"{ratio:.2f}×"
    if row[f"{metric}_within_noise"]:
        return f"{text} ~noise"
    direction = row[f"{metric}_direction"]
    return f"{text} {direction}" if direction != "same" else text


COMPARE_COLUMNS = ("new", "backend", "op", "base ops/s", "new ops/s", "ops/s", "p50", "p99", "p99.9")


def render_table(rows: list[dict[str, Any]], console: Console | None = None,
                 names: list[str] | None = None, warnings: list[str] | None = None) -> None:
    console = console or Console()
    for warning in warnings or []:
        console.print(warning, markup=False, highlight=False)
    cells = []
    for row in rows:
        backend = row["label"] + (f" [{row['sweep']}]" if row["sweep"] else "")
        op = row["op"] if row["phase"] == "main" else f"{row['phase']}:{row['op']}"
        cells.append([names[row["new"]] if names else str(row["new"]), backend, op,
                      fmt_rate(row["base_ops_per_s"] or 0.0), fmt_rate(row["new_ops_per_s"] or 0.0),
                      *[_verdict(row, m) for m in ("ops_per_s", "p50_us", "p99_us", "p999_us")]])
    columns: tuple[str, ...] = COMPARE_COLUMNS
    if len({row["new"] for row in rows}) == 1:  # one new file: its name in every row says nothing
        columns, cells = columns[1:], [row[1:] for row in cells]
    print_fitted(console, columns, cells, names=columns.index("op") + 1, title="cachemark compare (new ÷ base)",
                 drop_order=("p99.9", "base ops/s", "new ops/s", FOLD_NAMES, "p50", "p99"),
                 more="all columns: cachemark compare -f json")
    if any(r["base_repeats"] > 1 or r["new_repeats"] > 1 for r in rows):
        console.print("~noise: the difference is within the spread across repeats of the same run.")


def to_markdown(rows: list[dict[str, Any]], warnings: list[str] | None = None) -> str:
    lines = [f"> **{w.partition(': ')[0]}:** {w.partition(': ')[2]}" for w in warnings or []]
    if lines:
        lines.append("")
    lines += ["| backend | op | base ops/s | new ops/s | ops/s | base p99 | new p99 | p99 |",
              "| :--- | :--- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        backend = row["label"] + (f" [{row['sweep']}]" if row["sweep"] else "")
        lines.append(f"| {backend} | {row['op']} | "
                     f"{fmt_rate(row['base_ops_per_s'] or 0.0)} | {fmt_rate(row['new_ops_per_s'] or 0.0)} | "
                     f"{_verdict(row, 'ops_per_s')} | {fmt_latency(row['base_p99_us'])} | "
                     f"{fmt_latency(row['new_p99_us'])} | {_verdict(row, 'p99_us')} |")
    return "\n".join(lines) + "\n"


def to_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=1) + "\n"


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


def _fields(document: dict[str, Any]) -> dict[str, Any]:
    """The experiment's workload, network and sweep as flat ``field: value`` pairs."""
    experiment = document.get("experiment") if isinstance(document.get("experiment"), dict) else {}
    workload = experiment.get("workload") if isinstance(experiment.get("workload"), dict) else {}
    out = {k: v for k, v in workload.items() if k not in NOT_WORKLOAD and k != "phases"}
    phases = [p for p in workload.get("phases") or [] if isinstance(p, dict)]
    out["phases"] = [p.get("name", str(i)) for i, p in enumerate(phases)]
    for i, phase in enumerate(phases):
        for key, value in phase.items():
            if key != "name":
                out[f"{phase.get('name', i)}.{key}"] = value  # compared only when both have the same phases
    out["network"] = experiment.get("network")
    out["sweep"] = experiment.get("sweep")
    return out


def workload_differences(base_doc: dict[str, Any], new_doc: dict[str, Any]) -> list[dict[str, str]]:
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


def workload_warnings(base_doc: dict[str, Any], new_docs: list[dict[str, Any]],
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
