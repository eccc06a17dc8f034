"""The terminal table: backend × op with count, hit %, ops/s and latency percentiles.

Tables here fit the console or lose whole columns, never digits: a figure column never
shrinks below its longest word (a headline table's headers and worded cells may break
between words), name columns fold onto several lines, and when that is not enough the
least important columns are left out (one line says which). Widths are measured by rich
itself (:func:`fit_columns`), at the console's width, and printed exactly so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from rich.box import HEAVY_HEAD, Box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..results.names import op_label
from .blocks import headline_blocks, to_rich, verdict_blocks
from .data import (
    FEW_SAMPLES_NOTE,
    has_few_samples,
    latency_cell,
    load_notes,
    op_summary,
    proxy_overhead_note,
    run_name,
)

COLUMNS = ("backend", "op", "count", "hit %", "ops/s", "p50", "p90", "p99", "p99.9", "max", "errors")


def fmt_latency(us: float | None) -> str:
    if us is None:
        return "-"
    if us < 1:
        return f"{us * 1000:.0f}ns"
    if us < 1000:
        return f"{us:.3g}µs"
    if us < 1_000_000:
        return f"{us / 1000:.3g}ms"
    return f"{us / 1_000_000:.3g}s"


def fmt_factor(x: float) -> str:
    """A factor's digits, wherever one is printed (the verdict, a headline's "× fastest"): 2 decimals
    under 10×, 1 under 100×, none above (``3.14``, ``31.4``, ``1,314``), so one factor reads the same
    in both places."""
    if x < 10:
        return f"{x:.2f}"
    if x < 100:
        return f"{x:.1f}"
    return f"{x:,.0f}"


def fmt_rate(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.2f}M"
    if value >= 10_000:
        return f"{value / 1000:.1f}k"
    return f"{value:,.0f}"


def rows(document: dict[str, Any], uncorrected: bool = False) -> list[list[str]]:
    """One row per (run, phase, op); skipped and failed runs get one row with the reason.

    Reads only what the results schema guarantees (cachemark.results.schema): optional
    fields by ``get``, summaries recomputed from the histograms when a file has none.
    """
    out: list[list[str]] = []
    for run in document.get("runs", []):
        name = run_name(run)
        phases = run.get("phases", [])
        if run["status"] in ("skipped", "failed") and not phases:
            out.append([name, run["status"], run.get("reason", ""), *[""] * (len(COLUMNS) - 3)])
            continue
        many_phases = len(phases) > 1
        for phase in phases:
            for op_name, op in phase.get("ops", {}).items():
                if not op["count"]:
                    continue
                summary = op_summary(op, phase.get("wall_s") or 0.0, uncorrected)
                hit = summary.get("hit_ratio")
                errors = sum((op.get("errors") or {}).values())
                out.append([
                    name,
                    op_label(phase.get("name", "main"), op_name, many_phases),
                    f"{op['count']:,}",
                    "-" if hit is None else f"{hit * 100:.1f}",
                    fmt_rate(summary.get("ops_per_s") or 0.0),
                    *(latency_cell(op["count"], field, summary.get(field), fmt_latency)
                      for field in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us")),
                    f"{errors:,}" if errors else "0",
                ])
    return out


def render(document: dict[str, Any], console: Console | None = None, title: str | None = None) -> None:
    console = console or Console()
    for block in headline_blocks(document):
        to_rich(block, console)
    measured = rows(document)
    table_rows = [_status_row(row) for row in measured]
    print_fitted(console, COLUMNS, table_rows, names=2, drop_order=_drop_order(table_rows), title=title,
                 sections=True)
    for line in _skipped_lines(measured):
        console.print(line, markup=False, highlight=False)
    runs = document.get("runs", [])
    if len({(run.get("network") or {}).get("profile") for run in runs}) > 1:
        render_baseline(document, console)
    proxy_note = proxy_overhead_note(document)
    if proxy_note:
        console.print(proxy_note, markup=False, highlight=False)
    if any(p.get("mode") == "open" for r in runs for p in r.get("phases", [])):
        console.print("open loop: latency measured from each op's intended start (coordinated-omission "
                      "corrected); the uncorrected figures are in the results file.")
    for note in load_notes(document):
        console.print(note, markup=False, highlight=False)
    counts = [op.get("count", 0) for r in runs for p in r.get("phases", []) for op in p.get("ops", {}).values()]
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

FOLD_NAMES = "<fold names>"  # in a drop order: from here on, names may break inside a word
WRAP_WORDS = "<wrap words>"  # in a drop order: from here on, a figure column's header and text break between words
NAME_FLOOR = 10  # names folded narrower than this read as shards
INDENT = 2  # a row's figures under its names, when the console is too narrow for a table
WORD_CAP = 24  # a longer word (a URL in a reason) folds even before FOLD_NAMES
ALL_COLUMNS = "all columns: cachemark report -f markdown, or the results file"


class Fit(NamedTuple):
    """A layout that fits: the columns kept, the ones left out, and each column's content width."""

    keep: list[int]
    dropped: list[str]
    widths: list[int]


def _new_table(title: str | None = None, box: Box | None = HEAVY_HEAD) -> Table:
    """Every terminal table here: the probe that measures a layout is built by the same call.

    A light box (a rule under the header, spaces between the columns) gets no edge and pads
    each cell on its left only: columns two spaces apart, as in a table without lines, so the
    presets' headline tables fit 80 columns (rich's collapse_padding miscounts fixed widths)."""
    light = box is not None and box.head_vertical == " "
    return Table(title=None if title is None else Text(title), header_style="bold", title_justify="left", box=box,
                 show_edge=not light, padding=(0, 0, 0, 1) if light else (0, 1))


def _layout_width(console: Console, widths: list[int], box: Box | None = HEAVY_HEAD) -> int:
    """Columns of exactly these content widths, with borders and padding: measured by rich."""
    probe = _new_table(box=box)
    for width in widths:
        probe.add_column(width=width)
    return console.measure(probe, options=console.options.update_width(10 * sum(widths) + 1000)).maximum


def _longest_word(column: str, cells: Iterable[str]) -> int:
    return max([cell_len(word) for text in (column, *cells) for word in text.split()] or [0])


def fit_columns(console: Console, columns: Sequence[str], table_rows: list[list[str]], names: int,
                drop_order: Sequence[str], box: Box | None = HEAVY_HEAD) -> Fit | None:
    """Which columns fit ``console.width`` with every figure whole: (indices kept, names left out, widths).

    The first ``names`` columns hold names: they wrap between words and, from ``FOLD_NAMES``
    in ``drop_order`` on (from the start when it is absent), fold inside words down to
    ``NAME_FLOOR`` cells. Every other column needs its longest cell (or header) on one line;
    from ``WRAP_WORDS`` on, only its longest word (a number is one word: it is never cut, a
    header like "Comparison to Baseline" takes three lines). Columns in ``drop_order`` go, in
    that order, until the rest fits; None when even the last ones do not fit.
    """
    cells = [[row[i] for row in table_rows] for i in range(len(columns))]
    needs = [max([cell_len(column), *map(cell_len, cells[i])]) for i, column in enumerate(columns)]
    words = [_longest_word(column, cells[i]) for i, column in enumerate(columns)]
    whole = [min(need, words[i], max(WORD_CAP, cell_len(columns[i]))) if i < names else need
             for i, need in enumerate(needs)]
    widths = whole if FOLD_NAMES in drop_order else _folded(columns, needs, names, whole)
    keep = list(range(len(columns)))
    dropped: list[str] = []
    order = list(drop_order)
    while _layout_width(console, [widths[i] for i in keep], box) > console.width:
        if not order:
            return None
        step = order.pop(0)
        if step == FOLD_NAMES:
            widths = _folded(columns, needs, names, widths)
        elif step == WRAP_WORDS:
            widths = [width if i < names else words[i] for i, width in enumerate(widths)]
        elif step in columns and columns.index(step) in keep:
            keep.remove(columns.index(step))
            dropped.append(step)
    return Fit(keep, dropped, _widen_names(console, widths, keep, needs, names, box))


def _widen_names(console: Console, widths: list[int], keep: list[int], needs: list[int], names: int,
                 box: Box | None) -> list[int]:
    """The room a layout leaves, given to its name columns up to their whole width, leftmost first
    (rich, left to choose, would narrow the widest column instead, inside a word)."""
    widths = list(widths)
    for i in keep:
        if i < names:
            room = console.width - _layout_width(console, [widths[j] for j in keep], box)
            widths[i] = max(widths[i], min(needs[i], widths[i] + room))
    return widths


def _folded(columns: Sequence[str], needs: list[int], names: int, widths: list[int]) -> list[int]:
    """``widths`` with the name columns allowed to break inside a word, down to ``NAME_FLOOR``."""
    return [min(need, max(NAME_FLOOR, cell_len(columns[i]))) if i < names else widths[i]
            for i, need in enumerate(needs)]


def print_fitted(console: Console, columns: Sequence[str], table_rows: list[list[str]], names: int,
                 drop_order: Sequence[str], title: str | None = None, sections: bool = False,
                 more: str = ALL_COLUMNS, box: Box | None = HEAVY_HEAD) -> list[str]:
    """Print ``table_rows`` as a table that fits the console: names fold, figures stay whole.

    Columns that do not fit are left out (``drop_order``) with one line naming them and where
    to find them (``more``); a console too narrow even for the rest gets one block of
    ``column=value`` lines per row instead. ``box`` is rich's (None: no lines). Returns the
    columns left out.
    """
    fit = fit_columns(console, columns, table_rows, names, drop_order, box)
    if fit is None:
        _print_as_lines(console, columns, table_rows, names, title)
        return []
    table = _new_table(title, box)
    for i in fit.keep:  # at the widths measured above: rich never has to choose what to shrink
        if i < names:
            table.add_column(Text(columns[i]), justify="left", overflow="fold", width=fit.widths[i])
        else:  # a figure breaks between words only where its column is narrower than its longest cell
            whole = fit.widths[i] >= max([cell_len(columns[i]), *(cell_len(row[i]) for row in table_rows)])
            table.add_column(Text(columns[i]), justify="right", no_wrap=whole, width=fit.widths[i])
    last = None
    for row in table_rows:
        if sections and last is not None and row[0] != last:
            table.add_section()
        last = row[0]
        table.add_row(*(Text(row[i]) for i in fit.keep))  # plain text: labels are not markup
    console.print(table)
    if fit.dropped:
        console.print(f"not shown at {console.width} columns: {', '.join(fit.dropped)} ({more})", markup=False,
                      highlight=False)
    return fit.dropped


def _print_as_lines(console: Console, columns: Sequence[str], table_rows: list[list[str]], names: int,
                    title: str | None) -> None:
    """Narrower than any table: each row as its names, then ``column=value`` words that wrap whole,
    indented under the names (continuation lines too)."""
    if title:
        console.print(Text(title, style="bold"))
    for row in table_rows:
        console.print(Text(" · ".join(cell for cell in row[:names] if cell), style="bold"))
        words = Text("  ".join(f"{column.replace(' ', '_')}={cell}"
                               for column, cell in zip(columns[names:], row[names:]) if cell))
        for line in words.wrap(console, max(console.width - INDENT, 1)):
            console.print(Text(" " * INDENT) + line, soft_wrap=True)


def baseline_rows(document: dict[str, Any]) -> list[list[str]]:
    """Per target, phase and op: mean latency under each network profile as % of the first.

    Reference 004's table: the time the same work takes where the cache lives, relative
    to the cache on the application's own host.
    """
    out: list[list[str]] = []
    baselines: dict[tuple[str, str, str], float | None] = {}
    for run in document.get("runs", []):
        profile = (run.get("network") or {}).get("profile") or "-"
        phases = run.get("phases", [])
        for phase in phases:
            phase_name = phase.get("name", "main")
            for name, op in phase.get("ops", {}).items():
                if not op["count"]:
                    continue
                summary = op_summary(op, phase.get("wall_s") or 0.0)
                mean = summary.get("mean_us")
                key = (run["label"], phase_name, name)
                if key in baselines:
                    base = baselines[key]
                    relative = f"{100 * mean / base:.0f}%" if base and mean is not None else "-"
                    if op["count"] < 2:
                        relative = "-"  # one op: its own latency, not a figure to compare
                else:
                    baselines[key], relative = mean, "baseline"
                op_name = op_label(phase_name, name, len(phases) > 1)
                out.append([run["label"], profile, op_name, fmt_latency(mean), fmt_latency(summary.get("p99_us")),
                            relative])
    return out


def render_baseline(document: dict[str, Any], console: Console) -> None:
    print_fitted(console, ("backend", "network", "op", "mean", "p99", "vs baseline"), baseline_rows(document),
                 names=3, drop_order=("p99", "mean"),
                 title="% of baseline: mean latency vs the first network profile of each target")
