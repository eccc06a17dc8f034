"""A distributed run's agents (``--cluster``; run/distributed.py): per agent, its share of the load,
its throughput and its CPU, from the results document — so ``show``, the Markdown and the HTML say
what the terminal said after the run."""

from __future__ import annotations

from ..results import ResultsDocument
from ..results.schema import AgentRow, DaskAgent
from .blocks import Block

COLUMNS = ["agent", "host", "workers", "ops", "ops/s", "CPU s", "cores", "start lag ms", "clock ms"]


def agent_blocks(document: ResultsDocument) -> list[Block]:
    blocks = []
    for run in document.runs:
        dask = run.dask  # a file before it was named so wrote it as the run's "cluster": migrated on load
        if dask is None:
            continue
        clocks = {c.agent: c for c in dask.agents}
        for phase in run.phases:
            agents = phase.agents or []
            if not agents:
                continue
            measuring = phase.measuring_agent
            rows = [agent_cells(a, clocks.get(a.agent)) for a in [*agents, *([measuring.row] if
                                                                        measuring and measuring.row else [])]]
            total = sum(a.ops or 0 for a in agents)
            wall = phase.wall_s or 0.0
            workers = phase.workers if "workers" in phase.model_fields_set else ""
            rows.append(["all", f"{len(dask.hosts)} host(s)", f"{workers}",
                         f"{total:,}", f"{total / wall:,.0f}" if wall else "",
                         f"{phase.client_cpu_s or 0:.2f}", "", "", ""])
            notes = []
            if measuring is not None and measuring.ops:
                notes.append(f"Measuring agent {measuring.agent} ({measuring.rate or 0:g} ops/s, open "
                             "loop, apart from the load): " + ", ".join(
                                 f"{name} p50 {op.summary.p50_us:,.0f} µs p99 {op.summary.p99_us:,.0f} µs"
                                 for name, op in measuring.ops.items() if op.summary and op.summary.model_fields_set))
            if phase.agents_missing:
                notes.append("Missing: " + "; ".join(phase.agents_missing))
            title = f"{run.label} · {phase.name}: agents"
            blocks.append(Block(title, columns=COLUMNS, rows=rows, notes=notes, left=2, kind="agents"))
    return blocks


def agent_cells(agent: AgentRow, clock: DaskAgent | None) -> list[str]:
    """One agent's row (the terminal's table after a run draws the same cells)."""
    offset = clock.clock_offset_ms if clock is not None else None
    workers = agent.workers or [0, 0]
    cores, lag = agent.cpu_cores, agent.start_lag_ms
    return [
        f"{agent.agent}" + (" (measure)" if agent.role == "measure" else ""),
        " ".join(str(x) for x in (agent.hostname, agent.host) if x),
        f"{workers[1]}", f"{agent.ops or 0:,}", f"{agent.ops_per_s or 0:,.0f}",
        f"{agent.client_cpu_s or 0:.2f}", "" if cores is None else f"{cores:.2f}",
        "" if lag is None else f"{lag:.2f}",
        "" if offset is None else f"{offset:+.2f}" + (" !" if clock is not None and clock.clock_skew_flagged else ""),
    ]
