"""``advise`` and ``cost`` as answer blocks (terminal, Markdown, the HTML report's top card)."""

from __future__ import annotations

from ..analysis.advise import FAIL, PASS, Advice, advise
from ..analysis.cost import Cost, PriceTable, load_prices
from ..errors import UserError
from ..needs import Needs, parse_needs
from ..results import ResultsDocument
from ..results.findings import QUALIFY_FIGURES, Kind
from .blocks import Block
from .verdict import findings

MARKS = {PASS: "pass", FAIL: "FAIL", "check": "check"}


def advice_block(advice: list[Advice]) -> Block:
    rows = []
    for rank, item in enumerate(advice, 1):
        for i, check in enumerate(item.checks):
            rows.append([f"{rank}" if i == 0 else "", item.label if i == 0 else "", check.need,
                         MARKS[check.result], check.why])
    passing = [a.label for a in advice if a.failed == 0]
    if passing:
        lines = [f"Meets every stated need: {', '.join(passing)}" +
                 (f"; {passing[0]} first, by the measured p99." if len(passing) > 1 else ".")]
        qualified = [a.label for a in advice if a.failed == 0 and any(c.caveats for c in a.checks)]
        if qualified:
            lines.append(f"{', '.join(qualified)} {'meets' if len(qualified) == 1 else 'meet'} them only on "
                         "figures with warnings (below).")
    else:
        lines = ["No target meets every stated need; they are ranked by how many they fail."]
    notes = ["pass / FAIL from the measured figures (a latency budget passes only when every repeat is "
             "inside it); check: the results cannot tell, see why.",
             "A p99 budget is judged on the load path named beside it; an open-loop tail through blocking "
             "clients (Python workers, drivers) is overstated, so it can pass but not FAIL one: the same target "
             "through ?client=engine judges it where the results have it."]
    notes += _warning_notes([line for item in advice for line in item.warnings])
    return Block("Which cache, for these needs", lines, ["#", "target", "need", "", "measured"], rows, notes,
                 left=5, kind="verdict")


def _warning_notes(lines: list[str]) -> list[str]:
    """The run's own warnings behind the figures shown, as its report words them (once each)."""
    if not lines:
        return []
    return ["", "Warnings that change how these figures read (from the run's own report):",
            *(f"- {line}" for line in dict.fromkeys(lines))]


def cost_block(costs: list[Cost], prices: PriceTable, load: float | None, data_gb: float | None) -> Block:
    monthly = load is not None or data_gb is not None
    warned = any(cost.caveats for cost in costs)
    columns = ["target", "offering", "ops/s measured", f"per million ops ({prices.currency})"]
    if monthly:
        columns.append("a month")
    if warned:
        columns.append("figures with warnings")
    rows = []
    for cost in costs:
        row = [cost.label, cost.offering.name, f"{cost.ops_per_s:,.0f}", f"{cost.per_million:.4g}"]
        if monthly:
            nodes = f"{cost.nodes} × " if cost.nodes else ""
            row.append("-" if cost.monthly is None else f"{nodes}{cost.monthly:,.2f}")
        if warned:
            row.append(", ".join(cost.caveats) or "-")
        rows.append(row)
    stated = []
    if load is not None:
        stated.append(f"{load:,.0f} ops/s sustained")
    if data_gb is not None:
        stated.append(f"{data_gb:g} GB of data")
    lines = [f"At {' and '.join(stated)}." if stated else "Per million operations at the measured throughput."]
    notes = [f"{o.name}: {o.source}" for o in {c.offering.name: c.offering for c in costs}.values()]
    notes += sorted({n for c in costs for n in c.notes})
    notes.append(f"prices from {prices.where}: edit a copy (--prices FILE) for your provider, region and discounts.")
    notes += _warning_notes([line for cost in costs for line in cost.warnings])
    return Block("What it costs", lines, columns, rows, notes, left=2)


def judged(document: ResultsDocument, needs: Needs, prices: PriceTable | None) -> list[Advice]:
    """:func:`advise` with the results' own warnings that change how a figure reads named beside the
    checks resting on them: the one way every command asks for advice."""
    # the verdict's own word on whose open-loop tail is overstated, beside the warnings that qualify figures
    found = [f for f in findings(document, document.runs) if f.kind in QUALIFY_FIGURES or f.kind == Kind.OPEN_LOOP]
    return advise(document, needs, prices, found)


def experiment_advice(document: ResultsDocument) -> list[Block]:
    """The advice block of a run whose experiment states ``[needs]`` (none otherwise)."""
    data = document.experiment.needs
    if not data:
        return []
    try:
        needs: Needs = parse_needs(data, "the experiment's [needs]")
        return [advice_block(judged(document, needs, load_prices()))]
    except UserError as exc:  # a saved file from elsewhere: say why, don't fail the report
        return [Block("Which cache, for these needs", [f"not evaluated: {exc}"], kind="verdict")]


def prices_blocks(prices: PriceTable) -> list[Block]:
    """The price table's offerings (``cachemark prices``), nodes apart from per-request services: the names
    ``cost --price LABEL=NAME`` and ``[needs] prices`` take."""
    money = prices.currency
    offerings = sorted(prices.offerings.values(), key=lambda o: (o.hourly, o.read_per_million, o.name))
    nodes = [[o.name, o.kind, f"{o.memory_gb:g}", f"{o.hourly:.4g}", f"{o.hourly * prices.hours_per_month:,.2f}",
              o.source or "-"] for o in offerings if o.kind == "instance"]
    requests = [[o.name, o.kind, f"{o.read_per_million:.4g}", f"{o.write_per_million:.4g}",
                 f"{o.gb_month:.4g}", o.source or "-"] for o in offerings if o.kind == "requests"]
    minimums = [f"{o.name}: billed for at least {o.min_gb:g} GB stored." for o in offerings
                if o.kind == "requests" and o.min_gb]
    blocks = [Block("Nodes, billed per hour", [f"{len(nodes) + len(requests)} offerings in {prices.where}, "
                                               f"in {money}; a month is {prices.hours_per_month:g} hours."],
                    ["offering", "kind", "memory (GB)", "hourly", "a month", "source"], nodes,
                    ["How many nodes: the larger of the data ÷ memory and the load ÷ one node's capacity "
                     "(cachemark capacity)."], left=2)]
    if requests:
        blocks.append(Block("Billed per request and per GB stored", [],
                            ["offering", "kind", "a million reads", "a million writes", "GB-month", "source"],
                            requests, minimums, left=2))
    blocks[-1].notes.append("Name one with cost --price LABEL=NAME or [needs] prices = { LABEL = \"NAME\" }; edit a "
                            "copy (--prices FILE) for your provider, region and discounts.")
    return blocks
