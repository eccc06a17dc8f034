"""Answers as blocks: one neutral shape, rendered the same in the terminal, Markdown and HTML.

A :class:`Block` is what a reader should see first — a preset's headline figure
(:mod:`.headline`) or the verdict of a run (:mod:`.verdict`) — as plain strings: a
title, lines of prose, an optional table and notes under it. The figures are computed
once, by those modules; this one only draws them, so the terminal, the Markdown and the
HTML can never disagree about a number. It knows none of the modules that make blocks
(:mod:`.answers` puts a report's blocks together): they all import it, it imports none
of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape

from rich.box import SIMPLE_HEAD
from rich.console import Console
from rich.markup import escape as rich_escape

from .fitted_table import FOLD_NAMES, WRAP_WORDS, print_fitted


@dataclass
class Block:
    """A titled answer: prose ``lines``, then a table (``columns`` × ``rows``), then ``notes``.

    ``left`` is how many leading columns hold names (left-aligned); the rest are figures.
    ``kind`` says which module made it (``headline``, ``agents`` or ``verdict``): the HTML styles a
    verdict as the report's top card.
    """

    title: str
    lines: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    left: int = 1
    kind: str = "headline"


def to_rich(block: Block, console: Console) -> None:
    console.print(f"[bold]{rich_escape(block.title)}[/bold]")
    for line in block.lines:
        console.print(line, markup=False, highlight=False)
    if block.columns:
        # headers and figures break between words (never inside one: a number stays whole), then
        # names inside words too; a console too narrow even for that gets one line per row instead
        print_fitted(console, block.columns, block.rows, names=block.left, drop_order=(WRAP_WORDS, FOLD_NAMES),
                     box=None if block.kind == "verdict" else SIMPLE_HEAD)
    for note in block.notes:
        console.print(note, markup=False, highlight=False)
    console.print()


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(block: Block) -> str:
    out = [f"### {block.title}", ""]
    if block.lines:
        out += [*block.lines, ""]
    if block.columns:
        align = [":---" if i < block.left else "---:" for i in range(len(block.columns))]
        out.append("| " + " | ".join(_md_cell(c) for c in block.columns) + " |")
        out.append("| " + " | ".join(align) + " |")
        out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
        out.append("")
    if block.notes:
        out += [*block.notes, ""]
    return "\n".join(out)


def to_html(block: Block) -> str:
    css = "verdict card" if block.kind == "verdict" else "headline"
    out = [f'<section class="{css}"><h2>{escape(block.title)}</h2>']
    out += [f"<p>{_prose(line)}</p>" for line in block.lines]
    if block.columns:
        head = "".join(f'<th class="{"l" if i < block.left else "r"}">{escape(c)}</th>'
                       for i, c in enumerate(block.columns))
        body = "".join("<tr>" + "".join(f'<td class="{"l" if i < block.left else "r"}">{escape(c)}</td>'
                                        for i, c in enumerate(row)) + "</tr>" for row in block.rows)
        out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    out += [f'<p class="note">{_prose(note)}</p>' for note in block.notes]
    out.append("</section>")
    return "".join(out)


def _prose(text: str) -> str:
    """A line of a block as HTML: escaped, and its `code` spans as <code> (the Markdown's backticks, not
    printed literally)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))
