"""Terminal tables that fit the console, losing whole columns, never digits.

A figure column never shrinks below its longest word (a headline table's headers and worded
cells may break between words), name columns fold onto several lines, and when that is not
enough the least important columns are left out (one line says which). Widths are measured
by rich itself (:func:`fit_columns`), at the console's width, and printed exactly so. Knows
nothing of results: the run table, the answer blocks and compare all draw through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import NamedTuple

from rich.box import HEAVY_HEAD, Box
from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

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
    _print_by_lines(console, table)
    if fit.dropped:
        console.print(f"not shown at {console.width} columns: {', '.join(fit.dropped)} ({more})", markup=False,
                      highlight=False)
    return fit.dropped


def _print_by_lines(console: Console, table: Table, lines_at_once: int = 200) -> None:
    """``console.print(table)``, a few hundred lines at a time: rich renders a table row by row but
    ``print`` holds every segment of it until the end (19 MB for 600 runs' rows), so ``show`` of a
    large results file would take more memory for its table than for the file."""
    lines = Segment.split_lines(console.render(table, console.options))
    while chunk := list(islice(lines, lines_at_once)):
        console.print(Segments(segment for line in chunk for segment in (*line, Segment.line())), end="")


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
