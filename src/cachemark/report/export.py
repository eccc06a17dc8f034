"""Exports of a results document: Markdown, CSV and JSON (written through :mod:`cachemark.outfile`).

Owns :func:`to_markdown` (tables ready for a README or a blog post: the summary per
backend × op like reference 003, the server figures when sampled, and — given a baseline
label — a "% of baseline" table like reference 004), :func:`to_csv` (one row per
run × phase × op with every summary and server figure) and :func:`to_json` (the document
without histograms: the file's own JSON, so :mod:`cachemark.results` slims it).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from ..results import ResultsDocument
from ..results.names import op_label
from ..results.store import without_histograms
from .answers import headline_blocks, verdict_blocks
from .blocks import to_markdown as to_block_markdown
from .data import (
    FEW_SAMPLES_NOTE,
    LOW_SAMPLES_MARK,
    LOW_SAMPLES_NOTE,
    SERVER_FIELDS,
    SUMMARY_FIELDS,
    OpRow,
    PhaseRow,
    baseline_for,
    baseline_rows,
    has_few_samples,
    latency_cell,
    load_notes,
    op_rows,
    pct_of,
    phase_rows,
    proxy_overhead_note,
)
from .figures import fmt_latency, fmt_memory, fmt_rate
from .table import SAME_POINT, network_baseline_table


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(header: list[str], rows: list[list[Any]], right_from: int = 2) -> str:
    align = [":---" if i < right_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _op_name(row: OpRow, many_phases: bool) -> str:
    return op_label(row.phase.name, row.op_name, many_phases)


def to_markdown(document: ResultsDocument, baseline: str | None = None) -> str:
    rows = op_rows(document)
    many_phases = len({r.phase.name for r in rows}) > 1
    name = document.experiment.name
    out = [f"## cachemark: {name}", ""]
    out += [to_block_markdown(block) for block in headline_blocks(document)]
    out.append(_md_table(
        ["backend", "op", "count", "hit %", "ops/s", "p50", "p90", "p99", "p99.9", "max", "errors"],
        [[r.name, _op_name(r, many_phases), f"{r.count:,}",
          "-" if r.summary.hit_ratio is None else f"{r.summary.hit_ratio * 100:.1f}",
          fmt_rate(r.summary.ops_per_s or 0.0),
          *(latency_cell(r.count, f, r.figure(f), fmt_latency) for f in ("p50_us", "p90_us", "p99_us", "p999_us",
                                                                         "max_us")),
          f"{r.op.error_total:,}"]
         for r in rows]))
    if has_few_samples([r.count for r in rows]):
        out += ["", FEW_SAMPLES_NOTE]
    skipped = [r for r in document.runs if r.status in ("skipped", "failed")]
    notes = [f"- {r.name}: {r.status} — {r.reason}" for r in skipped]
    notes += [f"- {note}" for note in load_notes(document)]
    if notes:
        out += ["", *notes]
    server = [p for p in phase_rows(document) if p.has_server]
    if server:
        out += ["", "### Server", ""]
        out.append(_md_table(
            ["backend", "phase", "CPU µs/op", "bytes in/op", "bytes out/op", "net Mbps p90", "net Mbps p70",
             "used memory", "evictions"],
            [[p.name, p.phase.name, _num(p.server.cpu_us_per_op, 3), _num(p.server.bytes_in_per_op, 4),
              _num(p.server.bytes_out_per_op, 4), _low(p, _num(p.server.net_mbps_p90, 4)),
              _low(p, _num(p.server.net_mbps_p70, 4)), _bytes(p.server.used_memory_bytes),
              _num(p.server.evictions, 9)] for p in server]))
        if any(p.low_samples for p in server):
            out += ["", f"{LOW_SAMPLES_MARK} {LOW_SAMPLES_NOTE}"]
    if baseline:
        base = baseline_rows(rows, baseline)
        table = []
        for r in rows:
            b = baseline_for(base, r)
            same = b is r
            if b is not None and min(r.count, b.count) < 2:
                b = None  # a single op has no percentile to compare
            mine, theirs = r.summary, b.summary if b is not None else None
            table.append([
                r.name, _op_name(r, many_phases),
                fmt_rate(mine.ops_per_s or 0.0), "--" if same else pct_of(mine.ops_per_s, theirs and theirs.ops_per_s),
                fmt_latency(mine.p50_us), "--" if same else pct_of(mine.p50_us, theirs and theirs.p50_us),
                fmt_latency(mine.p99_us), "--" if same else pct_of(mine.p99_us, theirs and theirs.p99_us),
            ])
        out += ["", f"### Comparison to baseline ({baseline})", "",
                "Each figure as a percentage of the baseline's for the same op "
                "(latency: over 100 % is slower; ops/s: over 100 % is faster).", ""]
        out.append(_md_table(["backend", "op", "ops/s", "% of baseline", "p50", "% of baseline", "p99",
                              "% of baseline"], table))
    profiles = {run.profile for run in document.runs}
    if len(profiles) > 1:
        columns, table, left = network_baseline_table(document)
        out += ["", "### Where the cache lives: % of baseline", "",
                "Mean latency under each network profile, as a percentage of the first profile's "
                f"for the same target{SAME_POINT if left > 3 else ''} and op (reference 004's table).", ""]
        out.append(_md_table(columns, table, right_from=left))
    proxy_note = proxy_overhead_note(document)
    if proxy_note:
        out += ["", proxy_note]
    out += ["", *(to_block_markdown(block) for block in verdict_blocks(document))]
    env = document.environment
    if not env.is_empty:
        out += ["", f"cachemark {_given(env.cachemark)}, Python {_given(env.python)}, "
                    f"{_given(env.cpu)} × {_given(env.cpus)}, {_given(env.os)}; "
                    f"results created {_given(document.created)}."]
    return "\n".join(out) + "\n"


def _given(value: Any) -> Any:
    """A field of the fingerprint, or ``?`` where the file gives none."""
    return "?" if value is None else value


def _low(row: PhaseRow, text: str) -> str:
    """A per-second server figure, marked when it rests on fewer than two full intervals."""
    return f"{text} {LOW_SAMPLES_MARK}" if row.low_samples and text != "-" else text


def _num(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 10 ** digits else f"{value:.{digits}g}"


def _bytes(value: float | None) -> str:
    return fmt_memory(value)


def csv_columns(row: OpRow) -> dict[str, Any]:  # Any: the CSV's own output row, column → cell
    """One line of the CSV: the run, phase and op, every summary figure and the phase's server figures."""
    run, phase, op, server = row.run, row.phase, row.op, row.server
    return {
        "run": row.index, "label": run.label, "name": row.name, "target": run.target, "status": run.status,
        "sweep": row.sweep, "repeat": run.repeat, "phase": phase.name, "mode": phase.mode,
        "workers": phase.workers, "wall_s": row.wall_s, "client_cpu_s": phase.client_cpu_s,
        "op": row.op_name, "count": op.count, "hits": op.hits, "misses": op.misses, "bytes_in": op.bytes_in,
        "bytes_out": op.bytes_out, "errors": op.error_total,
        **{k: row.figure(k) for k in SUMMARY_FIELDS},
        **{f"server_{k}": getattr(server, k) for k in SERVER_FIELDS},
    }


def to_csv(document: ResultsDocument) -> str:
    rows = [csv_columns(row) for row in op_rows(document)]
    buffer = io.StringIO()
    if not rows:
        return ""
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


# Any: the results file's own JSON (the one input a report takes besides the model: the JSON summary keeps its order)
def strip_histograms(document: dict[str, Any] | ResultsDocument) -> dict[str, Any]:
    """The document without the (large) encoded histograms (``results.store.without_histograms``): the
    file's own dict, in its key order, is the one input a report takes besides the typed document."""
    return without_histograms(document)


def to_json(document: dict[str, Any] | ResultsDocument) -> str:  # Any: as strip_histograms
    return json.dumps(strip_histograms(document), indent=1, default=str) + "\n"

