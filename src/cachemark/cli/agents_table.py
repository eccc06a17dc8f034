"""A distributed run's agents on the terminal: per-agent throughput and CPU, and the clock flags.

Printed after each ``cachemark run --cluster`` run (cli/session.py); ``cachemark show`` and the
reports draw the same figures from the results file (report/agents.py).
"""

from __future__ import annotations

from typing import Any

from ..report.agents import COLUMNS, agent_cells
from ..results import Run
from ..textfile import one_line


def print_agents(console: Any, run: Run) -> None:
    """After the run: per-agent throughput and CPU, a short table, and the clock flags."""
    from rich.table import Table
    from rich.text import Text

    dask = run.dask
    assert dask is not None
    clocks = {c.agent: c for c in dask.agents}
    label = one_line(run.label)  # the user's text: cut and escaped, and never read as markup
    for phase in run.phases:
        table = Table(title=Text(f"{label} · {phase.name}: agents"), title_justify="left")
        for column in COLUMNS:
            table.add_column(column, justify="left" if column in ("agent", "host") else "right")
        agents = phase.agents or []
        measuring = phase.measuring_agent
        for row in [*agents, *([measuring.row] if measuring is not None and measuring.row is not None else [])]:
            table.add_row(*agent_cells(row, clocks.get(row.agent)))
        total = sum(a.ops or 0 for a in agents)
        table.add_row("all", f"{len(dask.hosts)} host(s)", f"{phase.workers}", f"{total:,}",
                      f"{total / phase.wall_s:,.0f}" if phase.wall_s else "", f"{phase.client_cpu_s or 0:.2f}",
                      "", "", "")
        console.print(table)
        if measuring is not None:
            figures = ", ".join(f"{name} p50 {op.summary.p50_us:,.0f}µs p99 {op.summary.p99_us:,.0f}µs"
                                for name, op in measuring.ops.items() if op.summary is not None)
            console.print(f"{label} · {phase.name}: measuring agent {measuring.agent} "
                          f"({measuring.rate or 0:g} ops/s, open loop, apart from the load): {figures}",
                          markup=False, highlight=False)
        if phase.agents_missing:
            console.print(f"{label} · {phase.name}: missing: {'; '.join(phase.agents_missing)}",
                          markup=False, highlight=False)
    for c in dask.agents:
        if c.clock_skew_flagged:
            console.print(f"agent {c.agent} ({c.hostname}): clock offset {c.clock_offset_ms or 0:+.2f} ms "
                          f"± {c.clock_uncertainty_ms or 0:.2f} ms is above 1 ms: check NTP there; start times "
                          "and per-second series are corrected by it", markup=False, highlight=False)
