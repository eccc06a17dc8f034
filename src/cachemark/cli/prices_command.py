"""``cachemark prices``: the offerings of the price table, so nobody has to read prices.toml to name one."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from .terminal import make_console


def prices(
    prices_file: Annotated[Path | None, typer.Option("--prices", help="A price table (default: the shipped one).")]
    = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown instead of a table.")] = False,
) -> None:
    """List the offerings `cost` and `advise` price with: name, kind, memory, hourly and monthly price, source.

    Example: cachemark prices            (then: cachemark cost r.json --price redis=cache.m7g.large --load 50000)
    """
    from ..analysis.cost import load_prices
    from ..report.advice_report import prices_blocks
    from ..report.blocks import to_markdown, to_rich

    if json_out and markdown:
        raise UserError("--markdown and --json: choose one")
    table = load_prices(prices_file)
    if json_out:
        import json
        from dataclasses import asdict

        document = {"currency": table.currency, "hours_per_month": table.hours_per_month, "where": table.where,
                    "offerings": [asdict(o) | ({"monthly": o.hourly * table.hours_per_month}
                                               if o.kind == "instance" else {}) for o in table.offerings.values()]}
        sys.stdout.write(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
        return
    console = make_console()
    for block in prices_blocks(table):
        if markdown:
            console.print(to_markdown(block), markup=False, highlight=False, soft_wrap=True)
        else:
            to_rich(block, console)
