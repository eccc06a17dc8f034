"""A distributed run's agents (``--cluster``; run/distributed.py): per agent, its share of the load,
its throughput and its CPU, from the results document — so ``show``, the Markdown and the HTML say
what the terminal said after the run."""

from __future__ import annotations

from typing import Any

from .blocks import Block

COLUMNS = ["agent", "host", "workers", "ops", "ops/s", "CPU s", "cores", "start lag ms", "clock ms"]


def agent_blocks(document: dict[str, Any]) -> list[Block]:
    blocks = []
    for run in document.get("runs") or []:
        cluster = run.get("cluster") if isinstance(run, dict) else None
        if not isinstance(cluster, dict):
            continue
        clocks = {c.get("agent"): c for c in cluster.get("agents") or [] if isinstance(c, dict)}
        for phase in run.get("phases") or []:
            agents = [a for a in phase.get("agents") or [] if isinstance(a, dict)]
            if not agents:
                continue
            measuring = phase.get("measuring_agent") or {}
            rows = [_row(a, clocks.get(a.get("agent"), {})) for a in [*agents, *([measuring["row"]] if
                                                                                   measuring.get("row") else [])]]
            total = sum(a.get("ops") or 0 for a in agents)
            wall = phase.get("wall_s") or 0.0
            rows.append(["all", f"{len(cluster.get('hosts') or [])} host(s)", f"{phase.get('workers', '')}",
                         f"{total:,}", f"{total / wall:,.0f}" if wall else "",
                         f"{phase.get('client_cpu_s') or 0:.2f}", "", "", ""])
            notes = []
            if measuring.get("ops"):
                notes.append(f"Measuring agent {measuring.get('agent')} ({measuring.get('rate', 0):g} ops/s, open "
                             "loop, apart from the load): " + ", ".join(
                                 f"{name} p50 {op['summary']['p50_us']:,.0f} µs p99 {op['summary']['p99_us']:,.0f} µs"
                                 for name, op in measuring["ops"].items() if op.get("summary")))
            if phase.get("agents_missing"):
                notes.append("Missing: " + "; ".join(phase["agents_missing"]))
            title = f"{run.get('label', '?')} · {phase.get('name', 'main')}: agents"
            blocks.append(Block(title, columns=COLUMNS, rows=rows, notes=notes, left=2, kind="agents"))
    return blocks


def _row(agent: dict[str, Any], clock: dict[str, Any]) -> list[str]:
    offset = clock.get("clock_offset_ms")
    workers = agent.get("workers") or [0, 0]
    cores, lag = agent.get("cpu_cores"), agent.get("start_lag_ms")
    return [
        f"{agent.get('agent')}" + (" (measure)" if agent.get("role") == "measure" else ""),
        " ".join(str(x) for x in (agent.get("hostname"), agent.get("host")) if x),
        f"{workers[1]}", f"{agent.get('ops') or 0:,}", f"{agent.get('ops_per_s') or 0:,.0f}",
        f"{agent.get('client_cpu_s') or 0:.2f}", "" if cores is None else f"{cores:.2f}",
        "" if lag is None else f"{lag:.2f}",
        "" if offset is None else f"{offset:+.2f}" + (" !" if clock.get("clock_skew_flagged") else ""),
    ]
