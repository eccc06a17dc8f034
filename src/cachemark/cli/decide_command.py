"""``cachemark decide``: from the traffic and the needs to what to deploy, in one command.

Parses the flags, reads the traffic (a trace, or a workload drawn as one), draws the steps' progress with
the time left, and prints the decision first (:mod:`cachemark.report.decision_report`); the steps are
:mod:`cachemark.analysis.decide`'s.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import UserError
from .terminal import make_console

#: requests drawn for a synthetic source (a trace brings its own)
SYNTHETIC_REQUESTS = 200_000
OUT_FORMATS = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown", ".json": "json"}


class _Progress:
    """Each step on stderr with the time since the start: a decision runs for minutes."""

    def __init__(self) -> None:
        self.console = make_console(stderr=True)
        self.started = time.monotonic()

    def __call__(self, text: str) -> None:
        self.console.print(f"[{time.monotonic() - self.started:5.0f} s] {text}", markup=False, highlight=False)


def _requests(source: str | None, trace_format: str | None, keys: int | None, key_dist: str | None,
              value_size: str | None, requests: int | None, rate: float | None) -> Any:
    """The traffic as columns: a trace file read whole, or a workload (a file, a preset, the flags) drawn
    as cache-aside gets at ``rate`` a second."""
    from ..analysis import requests as rq

    if source is not None and not source.endswith(".toml") and (Path(source).is_file() or "/" in source
                                                               or "." in Path(source).name):
        path = Path(source)
        if not path.exists():
            raise UserError(f"{source}: no such file")
        return rq.from_trace(path, trace_format)
    from .sources import experiment_from, resolve_source

    data, where = resolve_source(source)
    flags = {k: v for k, v in {"keys": keys, "key_dist": key_dist, "value_size": value_size}.items()
             if v is not None}
    workload = experiment_from(data, where, ["memory://"], flags).workload
    n = requests or SYNTHETIC_REQUESTS
    if not 1_000 <= n <= 50_000_000:
        raise UserError(f"--requests {n}: between 1,000 and 50,000,000")
    return rq.from_workload(workload.keys, workload.key_dist, workload.value_size, n, seed=workload.seed,
                            rate=rate or workload.rate or 10_000.0)


def decide(
    source: Annotated[str | None, typer.Argument(
        help="The traffic: a trace file (any format `trace stats` reads), or an experiment TOML or preset whose "
             "workload is drawn as one (with the flags below over it).")] = None,
    needs: Annotated[Path | None, typer.Option("--needs", help="A TOML file of needs: hit_ratio, p99_ms, "
                                               "ops_per_s, app_servers, persistent, monthly_budget, prices.")]
    = None,
    target: Annotated[list[str] | None, typer.Option(
        "--target", "-t", help="A candidate (repeat): spawn:redis, spawn:memcached?client=pylibmc, memory://. "
                               "Default: Redis and memcached, and an in-process cache where the needs allow.")]
    = None,
    network: Annotated[str | None, typer.Option(help="Where the cache would live: a network profile (same-zone, "
                                                "cross-zone, 2ms, …) the capacity is measured behind.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the decision: .html, .md or .json.")]
    = None,
    trace_format: Annotated[str | None, typer.Option("--format", help="The trace's format (default: detected).")]
    = None,
    prices: Annotated[Path | None, typer.Option(help="A price table (default: the shipped one; "
                                                "`cachemark prices` lists it).")] = None,
    verify: Annotated[bool, typer.Option("--verify/--no-verify", help="Configure each size on a real server and "
                                         "replay the traffic to measure its hit ratio.")] = True,
    keys: Annotated[int | None, typer.Option(help="Synthetic: number of distinct keys.")] = None,
    key_dist: Annotated[str | None, typer.Option(help="Synthetic: uniform | zipf[:S] | hotspot[:F,P]")] = None,
    value_size: Annotated[str | None, typer.Option(help="Synthetic: 100 | 100-1000 | 100:9,10000:1")] = None,
    requests: Annotated[int | None, typer.Option(help=f"Synthetic: requests to draw (default "
                                                 f"{SYNTHETIC_REQUESTS:,}).")] = None,
    rate: Annotated[float | None, typer.Option(help="Synthetic: the traffic's rate, requests/s (default: the "
                                               "workload's, else 10,000).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown instead of tables.")] = False,
) -> None:
    """Which cache, how big, how many nodes, at what cost: sized, verified on a real server, load-tested
    within the p99 budget and priced — from your traffic, in one command.

    Example: cachemark decide app.trace.zst --needs needs.toml -o decision.html
    \f
    Over 80 lines for its 15 options (typer reads them from this signature; ``\\f`` keeps this out of
    --help): the body, under 50 lines, reads the inputs and hands each step to analysis/decide.py.
    """
    from .. import outfile
    from ..analysis.advise import load_needs
    from ..analysis.cost import load_prices
    from ..analysis.decide import characterise, default_candidates
    from ..analysis.decide import decide as run_decision
    from ..needs import Needs
    from ..report.blocks import to_rich
    from ..report.decision_report import decision_blocks, decision_html, decision_json, decision_markdown

    if markdown and json_out:
        raise UserError("--markdown and --json: choose one")
    fmt = None
    if out is not None:
        fmt = OUT_FORMATS.get(out.suffix.lower())
        if fmt is None:
            raise UserError(f"-o {out}: write .html, .md or .json")
        outfile.check(out, "the decision")
    stated = load_needs(needs) if needs is not None else Needs()
    table = load_prices(prices)
    from ..lab.network import one_profile

    profile = one_profile(network, "where the cache would live")
    progress = _Progress()
    progress("reading the traffic")
    traffic_requests = _requests(source, trace_format, keys, key_dist, value_size, requests, rate)
    traffic = characterise(traffic_requests)
    urls = list(target) if target else default_candidates(stated)
    decision = run_decision(traffic_requests, traffic, stated, urls, table, network=profile, verify=verify,
                            progress=progress)
    document = decision_json(decision)
    if out is not None:
        if fmt == "html":
            outfile.write_text(out, decision_html(decision), "the decision")
        elif fmt == "markdown":
            outfile.write_text(out, decision_markdown(decision), "the decision")
        else:
            outfile.write_json(out, document, "the decision")
    if json_out:
        sys.stdout.write(outfile.json_text(document) + "\n")
        return
    console = make_console()
    if markdown:
        console.print(decision_markdown(decision), markup=False, highlight=False, soft_wrap=True)
    else:
        for block in decision_blocks(decision):
            to_rich(block, console)
    if out is not None:
        console.print(f"decision written to {out}", markup=False, highlight=False)
