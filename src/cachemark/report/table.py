"""The terminal report of a run: its answer blocks around the table of backend × op with count,
hit %, ops/s and latency percentiles.

The table fits the console or loses whole columns, never digits (:mod:`.fitted_table`);
the blocks above and below it are the ones the Markdown and HTML print (:mod:`.answers`).
"""

from __future__ import annotations

from rich.console import Console

from ..results import ResultsDocument
from ..results.names import op_label
from .answers import headline_blocks, verdict_blocks
from .blocks import to_rich
from .data import (
    FEW_SAMPLES_NOTE,
    has_few_samples,
    latency_cell,
    load_notes,
    proxy_overhead_note,
)
from .figures import fmt_latency, fmt_rate
from .fitted_table import FOLD_NAMES, print_fitted

COLUMNS = ("backend", "op", "count", "hit %", "ops/s", "p50", "p90", "p99", "p99.9", "max", "errors")


def rows(document: ResultsDocument, uncorrected: bool = False) -> list[list[str]]:
    """One row per (run, phase, op); skipped and failed runs get one row with the reason.

    Reads the typed document (cachemark.results.schema): summaries recomputed from the
    histograms when a file has none.
    """
    out: list[list[str]] = []
    for run in document.runs:
        name = run.name
        phases = run.phases
        if run.status in ("skipped", "failed") and not phases:
            out.append([name, run.status, run.reason, *[""] * (len(COLUMNS) - 3)])
            continue
        many_phases = len(phases) > 1
        for phase in phases:
            for op_name, op in phase.ops.items():
                if not op.count:
                    continue
                summary = phase.summary_of(op, uncorrected)
                hit = summary.hit_ratio
                errors = op.error_total
                out.append([
                    name,
                    op_label(phase.name, op_name, many_phases),
                    f"{op.count:,}",
                    "-" if hit is None else f"{hit * 100:.1f}",
                    fmt_rate(summary.ops_per_s or 0.0),
                    *(latency_cell(op.count, field, getattr(summary, field), fmt_latency)
                      for field in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us")),
                    f"{errors:,}" if errors else "0",
                ])
    return out


def render(document: ResultsDocument, console: Console | None = None,
           title: str | None = None) -> None:
    console = console or Console()
    for block in headline_blocks(document):
        to_rich(block, console)
    measured = rows(document)
    table_rows = [_status_row(row) for row in measured]
    print_fitted(console, COLUMNS, table_rows, names=2, drop_order=_drop_order(table_rows), title=title,
                 sections=True)
    for line in _skipped_lines(measured):
        console.print(line, markup=False, highlight=False)
    runs = document.runs
    if len({run.profile for run in runs}) > 1:
        render_baseline(document, console)
    proxy_note = proxy_overhead_note(document)
    if proxy_note:
        console.print(proxy_note, markup=False, highlight=False)
    if any(p.mode == "open" for r in runs for p in r.phases):
        console.print("open loop: latency measured from each op's intended start (coordinated-omission "
                      "corrected); the uncorrected figures are in the results file.")
    for note in load_notes(document):
        console.print(note, markup=False, highlight=False)
    counts = [op.count for r in runs for p in r.phases for op in p.ops.values()]
    if has_few_samples(counts):
        console.print(FEW_SAMPLES_NOTE, markup=False, highlight=False)
    for block in verdict_blocks(document):
        console.print()
        to_rich(block, console)


def _status_row(row: list[str]) -> list[str]:
    """A skipped or failed run's row keeps its reason out of the figure columns: a figure column
    stretched to a sentence would push every figure off a narrow screen. A failure's reason
    folds in the op column; a skipped run's goes under the table (:func:`_skipped_lines`)."""
    if not _is_status_row(row):
        return row
    status = f"{row[1]}: {row[2]}" if row[1] == "failed" and row[2] else row[1]
    return [row[0], status, *[""] * (len(row) - 2)]


def _is_status_row(row: list[str]) -> bool:
    return row[1] in ("skipped", "failed") and not any(row[3:])  # a measured row's hit % is never empty


def _skipped_lines(table_rows: list[list[str]]) -> list[str]:
    return [f"{row[0]}: skipped: {row[2]}" for row in table_rows if _is_status_row(row) and row[1] == "skipped"
            and row[2]]


def _drop_order(table_rows: list[list[str]]) -> list[str]:
    """The main table's columns to leave out, least important first, while it does not fit;
    names break inside a word only once the columns left are worth more than whole words."""
    errors = COLUMNS.index("errors")
    no_errors = all(row[errors] in ("", "0") for row in table_rows)
    return ["p99.9", "p90", "max", *(["errors"] if no_errors else []), FOLD_NAMES, "count", "hit %", "p99",
            *([] if no_errors else ["errors"])]


# --- fitting a table to the console's width --------------------------------------------------


SAME_POINT = ", the same sweep point (value size)"
NETWORK_HEAD = ["backend", "network", "op", "mean", "p99", "vs baseline"]


def _sweep_head(field: str) -> str:
    return "value size (B)" if field == "value_size" else field


def network_baseline_table(document: ResultsDocument) -> tuple[list[str], list[list[str]], int]:
    """(columns, rows, left-aligned columns): per target, sweep point, phase and op, the mean latency
    under each network profile as % of the first profile's at the same sweep point.

    Reference 004's table: the time the same work takes where the cache lives, relative to the
    cache on the application's own host. A sweep (reference 001's value sizes) compares each
    point with its own baseline, under a column that names it: a 10 kB get is not a 1 kB one.
    """
    runs = document.runs
    fields = sorted({f for run in runs for f in (run.sweep or {})})
    out: list[list[str]] = []
    baselines: dict[tuple[str, str, str, str], float | None] = {}
    for run in runs:
        profile = run.profile or "-"
        point = [str((run.sweep or {}).get(f, "-")) for f in fields]
        phases = run.phases
        for phase in phases:
            phase_name = phase.name
            for name, op in phase.ops.items():
                if not op.count:
                    continue
                summary = phase.summary_of(op)
                mean = summary.mean_us
                key = (run.label, ",".join(point), phase_name, name)
                if key in baselines:
                    base = baselines[key]
                    relative = f"{100 * mean / base:.0f}%" if base and mean is not None else "-"
                    if op.count < 2:
                        relative = "-"  # one op: its own latency, not a figure to compare
                else:
                    baselines[key], relative = mean, "baseline"
                op_name = op_label(phase_name, name, len(phases) > 1)
                out.append([run.label, profile, *point, op_name, fmt_latency(mean), fmt_latency(summary.p99_us),
                            relative])
    columns = [*NETWORK_HEAD[:2], *map(_sweep_head, fields), *NETWORK_HEAD[2:]]
    return columns, out, 3 + len(fields)


def baseline_rows(document: ResultsDocument) -> list[list[str]]:
    """The rows of :func:`network_baseline_table`."""
    return network_baseline_table(document)[1]


def render_baseline(document: ResultsDocument, console: Console) -> None:
    columns, rows, left = network_baseline_table(document)
    print_fitted(console, tuple(columns), rows, names=left, drop_order=("p99", "mean"),
                 title="% of baseline: mean latency vs the first network profile of each target"
                       + (" at the same sweep point" if left > 3 else ""))
