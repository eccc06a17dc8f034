"""``cachemark capacity``: the highest open-loop rate each target keeps within a p99 budget.

The search is analysis/capacity.py's (``find_capacity``); this module parses the flags, draws
the progress with the time left, and prints the answer (report/capacity_report.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import EXIT_INTERRUPTED, UserError
from ..units import fmt_span
from .terminal import make_console


class _Progress:
    """The search's steps on stderr: one line per step, the time left beside it."""

    def __init__(self, label: str) -> None:
        self.console = make_console(stderr=True)
        self.label = label

    def __call__(self, p: Any) -> None:
        if p.point is None:
            what = "closed loop (the most the load path drives)" if p.step == 0 else f"{p.rate:,.0f} ops/s offered"
            left = f", about {fmt_span(p.eta_s)} left" if p.eta_s is not None else ""
            self.console.print(f"{self.label} · step {p.step} of ~{p.steps_planned}: {what} for "
                               f"{p.step_s:.1f} s{left}", markup=False, highlight=False)
        else:
            mark = "within" if p.point.within else "OVER"
            self.console.print(f"{self.label} · step {p.step}: {p.point.achieved:,.0f} ops/s done, {mark}: "
                               f"{p.point.why}", markup=False, highlight=False)


def capacity(
    target: Annotated[list[str], typer.Option("--target", "-t", help="Target URL (repeat for several).")],
    p99: Annotated[str, typer.Option("--p99", help="p99 budget per op: get=1ms,set=2ms (a bare number is ms).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the JSON to this file.")] = None,
    mix: Annotated[str | None, typer.Option(help="Op mix, e.g. get=90,set=10 (default: the budgeted ops "
                                            "alone, evenly).")] = None,
    keys: Annotated[int, typer.Option(help="Number of distinct keys.")] = 10_000,
    key_dist: Annotated[str, typer.Option(help="uniform | zipf[:S] | sequential | hotspot[:F,P]")] = "zipf:0.99",
    value_size: Annotated[str, typer.Option(help="100 | 100-1000 | 100:9,10000:1")] = "100-1000",
    workers: Annotated[int, typer.Option(help="Python worker processes (Python clients and drivers).")] = 2,
    prefill: Annotated[bool, typer.Option("--prefill/--no-prefill", help="Write every key before each step.")]
    = True,
    network: Annotated[str | None, typer.Option(help="One network profile: same-zone, cross-zone, 2ms, …")]
    = None,
    precision: Annotated[float, typer.Option(help="Stop when the bracket is narrower than this share of the rate.")]
    = 0.05,
    min_samples: Annotated[int, typer.Option(help="Samples of each budgeted op per step (its p99 rests on "
                                             "the slowest 1 %).")] = 5000,
    max_steps: Annotated[int, typer.Option(help="Open-loop steps at most.")] = 10,
    label: Annotated[list[str] | None, typer.Option("--label", help="Label per target (same order).")] = None,
) -> None:
    """The highest rate at which every budgeted op's p99 stays within budget (open loop, Poisson arrivals).

    A short closed loop bounds the search; open-loop steps then bracket and bisect the rate, each long
    enough for the p99 to rest on thousands of samples. Use ?client=engine for a figure to trust: only the
    engine keeps an open loop open (Python workers and drivers block on each reply and overstate the tail).

    Example: cachemark capacity -t "spawn:redis?client=engine" --p99 get=1ms,set=2ms --json -o capacity.json
    """
    from .. import outfile
    from ..analysis.capacity import find_capacity, parse_budgets
    from ..lab.network import one_profile
    from ..plan import labels_for
    from ..report.blocks import to_rich
    from ..report.capacity_report import capacity_blocks, capacity_document
    from ..spec import Workload, build_experiment

    budgets = parse_budgets(p99)
    if out is not None:
        outfile.check(out, "capacity JSON")
    profile = one_profile(network, "capacity is searched behind one at a time")
    if min_samples < 100 or max_steps < 1:
        raise UserError("--min-samples must be ≥ 100 and --max-steps ≥ 1")
    fields: dict[str, Any] = {"keys": keys, "key_dist": key_dist, "value_size": value_size, "workers": workers,
                              "prefill": prefill, "mix": mix or {op: 1 for op in budgets}}
    # checked as an experiment's workload is: one line naming the field
    workload: Workload = build_experiment({"targets": target, "workload": fields}, "capacity").workload
    labels = labels_for(target, label)
    results = []
    started = time.monotonic()
    for url, name in zip(target, labels, strict=True):
        results.append(find_capacity(url, budgets, workload, network=profile, progress=_Progress(name), label=name,
                                     precision=precision, min_samples=min_samples, max_steps=max_steps))
        if results[-1].status == "interrupted":
            break  # Ctrl-C: what was measured is printed (and written), then exit 130
    document = capacity_document(results)
    if out is not None:
        outfile.write_json(out, document, "capacity JSON")
    if json_out:
        import json

        sys.stdout.write(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
        _exit_status(results)
        return
    console = make_console()
    for block in capacity_blocks(results):
        to_rich(block, console)
    if len(results) > 1:
        console.print(f"{len(results)} targets in {fmt_span(time.monotonic() - started)}.", markup=False,
                      highlight=False)
    _exit_status(results)


def _exit_status(results: list[Any]) -> None:
    if any(r.status == "interrupted" for r in results):
        raise typer.Exit(EXIT_INTERRUPTED)  # as every command stopped by a signal exits
    if all(r.status == "skipped" for r in results):
        raise UserError("nothing was measured: " + "; ".join(f"{r.label}: {r.reason}" for r in results))
