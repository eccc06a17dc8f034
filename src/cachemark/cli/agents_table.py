"""A distributed run's agents on the terminal: per-agent throughput and CPU, and the clock flags.

Printed after each ``cachemark run --cluster`` run (cli/session.py); ``cachemark show`` and the
reports draw the same figures from the results file (report/agents.py).
"""

from __future__ import annotations

from typing import Any

from ..textfile import one_line


def print_agents(console: Any, outcome: Any) -> None:
    """After the run: per-agent throughput and CPU, a short table, and the clock flags."""
    from rich.table import Table
    from rich.text import Text

    dask = outcome.dask
    label = one_line(outcome.label)  # the user's text: cut and escaped, and never read as markup
    for phase in outcome.phases:
        table = Table(title=Text(f"{label} · {phase['name']}: agents"), title_justify="left")
        for column in ("agent", "host", "workers", "ops", "ops/s", "CPU s", "cores", "start lag ms", "clock ms"):
            table.add_column(column, justify="left" if column in ("agent", "host") else "right")
        rows = list(phase.get("agents", []))
        if phase.get("measuring_agent"):
            rows.append(phase["measuring_agent"]["row"])
        clocks = {c["agent"]: c for c in dask.get("agents", [])}
        for row in rows:
            clock = clocks.get(row["agent"], {})
            offset = clock.get("clock_offset_ms")
            table.add_row(
                f"{row['agent']}" + (" (measure)" if row["role"] == "measure" else ""),
                " ".join(x for x in (row.get("hostname"), row["host"]) if x),
                f"{row['workers'][1]}", f"{row['ops']:,}", f"{row['ops_per_s']:,.0f}", f"{row['client_cpu_s']:.2f}",
                "" if row["cpu_cores"] is None else f"{row['cpu_cores']:.2f}",
                "" if row["start_lag_ms"] is None else f"{row['start_lag_ms']:.2f}",
                "" if offset is None else f"{offset:+.2f}" + (" !" if clock.get("clock_skew_flagged") else ""),
            )
        total = sum(r["ops"] for r in phase.get("agents", []))
        table.add_row("all", f"{len(dask.get('hosts', []))} host(s)", f"{phase['workers']}", f"{total:,}",
                      f"{total / phase['wall_s']:,.0f}" if phase["wall_s"] else "", f"{phase['client_cpu_s']:.2f}",
                      "", "", "")
        console.print(table)
        measuring = phase.get("measuring_agent")
        if measuring:
            figures = ", ".join(f"{name} p50 {op['summary']['p50_us']:,.0f}µs p99 {op['summary']['p99_us']:,.0f}µs"
                                for name, op in measuring["ops"].items())
            console.print(f"{label} · {phase['name']}: measuring agent {measuring['agent']} "
                          f"({measuring['rate']:g} ops/s, open loop, apart from the load): {figures}",
                          markup=False, highlight=False)
        if phase.get("agents_missing"):
            console.print(f"{label} · {phase['name']}: missing: {'; '.join(phase['agents_missing'])}",
                          markup=False, highlight=False)
    skewed = [c for c in dask.get("agents", []) if c.get("clock_skew_flagged")]
    for c in skewed:
        console.print(f"agent {c['agent']} ({c['hostname']}): clock offset {c['clock_offset_ms']:+.2f} ms "
                      f"± {c['clock_uncertainty_ms']:.2f} ms is above 1 ms: check NTP there; start times and "
                      "per-second series are corrected by it", markup=False, highlight=False)
