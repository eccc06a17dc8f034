"""The terminal table: backend × op with count, hit %, ops/s and latency percentiles."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .blocks import headline_blocks, to_rich, verdict_blocks
from .data import load_notes, op_summary, run_name

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
                    f"{phase.get('name', 'main')}:{op_name}" if many_phases else op_name,
                    f"{op['count']:,}",
                    "-" if hit is None else f"{hit * 100:.1f}",
                    fmt_rate(summary.get("ops_per_s") or 0.0),
                    fmt_latency(summary.get("p50_us")),
                    fmt_latency(summary.get("p90_us")),
                    fmt_latency(summary.get("p99_us")),
                    fmt_latency(summary.get("p999_us")),
                    fmt_latency(summary.get("max_us")),
                    f"{errors:,}" if errors else "0",
                ])
    return out


def render(document: dict[str, Any], console: Console | None = None, title: str | None = None) -> None:
    console = console or Console()
    for block in headline_blocks(document):
        to_rich(block, console)
    table = Table(title=None if title is None else escape(title), header_style="bold", title_justify="left")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("backend", "op") else "right")
    last = None
    for row in rows(document):
        if last is not None and row[0] != last:
            table.add_section()
        last = row[0]
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    runs = document.get("runs", [])
    if len({(run.get("network") or {}).get("profile") for run in runs}) > 1:
        render_baseline(document, console)
    if any(p.get("mode") == "open" for r in runs for p in r.get("phases", [])):
        console.print("open loop: latency measured from each op's intended start (coordinated-omission "
                      "corrected); the uncorrected figures are in the results file.")
    for note in load_notes(document):
        console.print(note, markup=False, highlight=False)
    for block in verdict_blocks(document):
        console.print()
        to_rich(block, console)


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
                else:
                    baselines[key], relative = mean, "baseline"
                op_name = f"{phase_name}:{name}" if len(phases) > 1 else name
                out.append([run["label"], profile, op_name, fmt_latency(mean), fmt_latency(summary.get("p99_us")),
                            relative])
    return out


def render_baseline(document: dict[str, Any], console: Console) -> None:
    table = Table(title="% of baseline: mean latency vs the first network profile of each target",
                  header_style="bold", title_justify="left")
    for column in ("backend", "network", "op", "mean", "p99", "vs baseline"):
        table.add_column(column, justify="left" if column in ("backend", "network", "op") else "right")
    for row in baseline_rows(document):
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
