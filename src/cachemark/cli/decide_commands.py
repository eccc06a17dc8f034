"""``cachemark advise`` and ``cachemark cost``: from a results file to a decision."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from .terminal import make_console


def _show(blocks: list, markdown: bool) -> None:
    from ..report.blocks import to_markdown, to_rich

    console = make_console()
    if markdown:  # whole lines: a table row or a list item folded at the console's width is broken Markdown
        console.print("\n".join(to_markdown(b) for b in blocks), markup=False, highlight=False, soft_wrap=True)
        return
    for block in blocks:
        to_rich(block, console)


def advise(
    results: Annotated[Path, typer.Argument(help="A results JSON file.")],
    needs: Annotated[Path, typer.Option("--needs", help="A TOML file of needs (\\[needs] table or top level).")],
    prices: Annotated[Path | None, typer.Option(help="A price table (default: the shipped one).")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown instead of tables.")] = False,
) -> None:
    """Rank every measured target against stated needs: p99 budgets, throughput, shared, persistent, tags, cost.

    Example: cachemark advise results/cachemark-*.json --needs needs.toml
    """
    from ..analysis.advise import load_needs
    from ..analysis.cost import load_prices
    from ..report.advice_report import advice_block, judged
    from ..results import read

    document = read(results)
    stated = load_needs(needs)
    _show([advice_block(judged(document, stated, load_prices(prices)))], markdown)


def cost(
    results: Annotated[Path, typer.Argument(help="A results JSON file.")],
    price: Annotated[
        list[str], typer.Option("--price", help="label=offering (repeatable), e.g. redis=cache.m7g.large.")
    ],
    load: Annotated[float | None, typer.Option(help="Sustained ops/s to price a month at.")] = None,
    data_gb: Annotated[float | None, typer.Option(help="Data set size in GB (node count, storage).")] = None,
    prices: Annotated[Path | None, typer.Option(help="A price table (default: the shipped one).")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown instead of tables.")] = False,
    capacity: Annotated[Path | None, typer.Option(
        help="A `cachemark capacity -o` file: count nodes by load on each label's capacity within the p99 "
             "budget, not the run's throughput.")] = None,
) -> None:
    """Cost per million ops at the measured throughput, and a month at a stated load.

    Example: cachemark cost results/cachemark-*.json --price redis=cache.m7g.large --load 50000 --data-gb 10
    """
    from ..analysis.advise import bearing_on, caveats, offering_for
    from ..analysis.capacity import load_capacities
    from ..analysis.cost import cost_of, load_prices
    from ..plan import price_labels
    from ..report.advice_report import cost_block
    from ..report.verdict import reading_warnings
    from ..results import read as read_results

    for value, name in ((load, "--load"), (data_gb, "--data-gb")):
        if value is not None and not 0 < value < math.inf:
            raise UserError(f"{name} {value:g}: must be a finite number > 0")
    table = load_prices(prices)
    document = read_results(results)
    runs = {}
    for run in document.measured_runs:
        runs.setdefault(run.label, run)
    mapping: dict[str, str] = {}
    for item in price:
        label, sep, offering = item.partition("=")
        if not sep or not label or not offering:
            raise UserError(f"--price {item!r}: expected label=offering, e.g. redis=cache.m7g.large")
        mapping[label] = offering
    # a label keeps its price whatever client measured it: redis=… prices redis(engine) too
    priced = {label: offering for label, run in runs.items()
              if (offering := offering_for(mapping, label, run.target)) is not None}
    for label in mapping:
        if not any(label in price_labels(name, runs[name].target) for name in priced):
            raise UserError(f"--price {label}={mapping[label]}: no measured run labelled {label!r}; "
                            f"labels: {', '.join(runs)}")
    capacities = load_capacities(capacity) if capacity is not None else {}
    costs = [cost_of(runs[label], table.offering(offering), table, load, data_gb,
                     offering_for(capacities, label, runs[label].target))
             for label, offering in priced.items()]
    found = reading_warnings(document)
    for priced in costs:  # the throughput is the whole run's: its warnings about one op do not bear on it
        bearing = bearing_on(found, priced.label)
        priced.caveats, priced.warnings = caveats(bearing), tuple(f.text for f in bearing)
    _show([cost_block(costs, table, load, data_gb)], markdown)
