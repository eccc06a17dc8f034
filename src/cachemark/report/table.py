"""The terminal table: backend × op with count, hit %, ops/s and latency percentiles."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

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
    """One row per (run, phase, op); skipped and failed runs get one row with the reason."""
    out: list[list[str]] = []
    for run in document["runs"]:
        if run["status"] in ("skipped", "failed") and not run["phases"]:
            out.append([run.get("display", run["label"]), run["status"], run["reason"],
                        *[""] * (len(COLUMNS) - 3)])
            continue
        many_phases = len(run["phases"]) > 1
        for phase in run["phases"]:
            for name, op in phase["ops"].items():
                if not op["count"]:
                    continue
                summary = op.get("summary_uncorrected" if uncorrected else "summary") or op["summary"]
                hit = summary["hit_ratio"]
                errors = sum(op.get("errors", {}).values())
                out.append([
                    run.get("display", run["label"]),
                    f"{phase['name']}:{name}" if many_phases else name,
                    f"{op['count']:,}",
                    "-" if hit is None else f"{hit * 100:.1f}",
                    fmt_rate(summary["ops_per_s"]),
                    fmt_latency(summary["p50_us"]),
                    fmt_latency(summary["p90_us"]),
                    fmt_latency(summary["p99_us"]),
                    fmt_latency(summary["p999_us"]),
                    fmt_latency(summary["max_us"]),
                    f"{errors:,}" if errors else "0",
                ])
    return out


def render(document: dict[str, Any], console: Console | None = None, title: str | None = None) -> None:
    console = console or Console()
    table = Table(title=title, header_style="bold", title_justify="left")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("backend", "op") else "right")
    last = None
    for row in rows(document):
        if last is not None and row[0] != last:
            table.add_section()
        last = row[0]
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    if len({(run.get("network") or {}).get("profile") for run in document["runs"]}) > 1:
        render_baseline(document, console)
    if any(p.get("mode") == "open" for r in document["runs"] for p in r["phases"]):
        console.print("open loop: latency measured from each op's intended start (coordinated-omission "
                      "corrected); the uncorrected figures are in the results file.")


def baseline_rows(document: dict[str, Any]) -> list[list[str]]:
    """Per target, phase and op: mean latency under each network profile as % of the first.

    Reference 004's table: the time the same work takes where the cache lives, relative
    to the cache on the application's own host.
    """
    out: list[list[str]] = []
    baselines: dict[tuple[str, str, str], float] = {}
    for run in document["runs"]:
        profile = (run.get("network") or {}).get("profile", "-")
        for phase in run["phases"]:
            for name, op in phase["ops"].items():
                if not op["count"]:
                    continue
                mean = op["summary"]["mean_us"]
                key = (run["label"], phase["name"], name)
                if key in baselines:
                    relative = f"{100 * mean / baselines[key]:.0f}%" if baselines[key] else "-"
                else:
                    baselines[key], relative = mean, "baseline"
                op_name = f"{phase['name']}:{name}" if len(run["phases"]) > 1 else name
                out.append([run["label"], profile, op_name, fmt_latency(mean), fmt_latency(op["summary"]["p99_us"]),
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
