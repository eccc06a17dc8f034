"""The HTML report: one self-contained file (inline CSS, a few lines of inline JS, SVG charts).

Owns :func:`html_parts` (the page, written as it is made) and :func:`render_html` (whole).
Sections: the summary table (with "% of baseline" columns when a baseline label is given),
server figures, the latency percentile spectrum per phase × op (HdrHistogram-style nines axis,
log latency), throughput and hit-ratio bars, per-second time series when phases carry
``timeseries``, sweep charts (ops/s, bandwidth and p99 vs the swept value with the saturation
point marked) when runs carry ``sweep``, the environment with its calibration, and the exact
spec as TOML to re-run. Nothing is fetched from the network; the charts are drawn here as SVG
(:mod:`.charts`), so the page renders the same offline, in a mail attachment or in a CI
artefact. It reads the typed document (:mod:`cachemark.results.schema`), as ``results.read``
returns it.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterator
from html import escape
from typing import Any

import numpy as np

from ..measure.histogram import Histogram
from ..measure.saturation import find_saturation
from ..measure.server_stats import timeseries as server_timeseries
from ..measure.summary import latency_histogram
from ..results import Phase, ResultsDocument, Run
from ..results.names import op_label
from ..results.schema import TimeseriesEntry
from ..sweep import LOAD_PARAMS
from . import page
from .answers import headline_blocks, verdict_blocks
from .blocks import to_html
from .charts import Marker, Series, bar_chart, color_for, line_chart, percentile_grid, percentile_to_x
from .data import (
    FEW_SAMPLES_NOTE,
    LOW_SAMPLES_MARK,
    LOW_SAMPLES_NOTE,
    OpRow,
    PhaseRow,
    baseline_for,
    baseline_rows,
    has_few_samples,
    latency_cell,
    load_notes,
    op_rows,
    phase_rows,
    proxy_overhead_note,
)
from .figures import fmt_latency, fmt_memory, fmt_percent, fmt_rate
from .table import SAME_POINT, network_baseline_table


def _fmt_us(value: float) -> str:
    return fmt_latency(value)


def _fmt_num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return fmt_rate(value)
    return f"{value:.3g}"


def _td(text: str, sort_value: Any = None, left: bool = False) -> str:
    v = text if sort_value is None else sort_value
    return f'<td{" class=l" if left else ""} data-v="{escape(str(v))}">{escape(text)}</td>'





class _Ids:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, stem: str) -> str:
        self.n += 1
        return f"{stem}-{self.n}"


def _summary_table(document: ResultsDocument, rows: list[OpRow], baseline: str | None) -> str:
    many_phases = len({r.phase.name for r in rows}) > 1
    base = baseline_rows(rows, baseline) if baseline else {}
    head = ["backend", "op", "count", "hit %", "ops/s", "p50", "p90", "p99", "p99.9", "max", "errors"]
    if baseline:
        head += ["ops/s vs base", "p50 vs base", "p99 vs base"]
    out = ['<table class="sortable"><thead><tr>'
           + "".join(f'<th class="{"l" if h in ("backend", "op") else ""}">{escape(h)}</th>' for h in head)
           + "</tr></thead><tbody>"]
    last = None
    for r in rows:
        sep = ' class="sep"' if last is not None and r.index != last else ""
        last = r.index
        op = op_label(r.phase.name, r.op_name, many_phases)
        hit, errors = r.summary.hit_ratio, r.op.error_total
        cells = [
            _td(r.name, left=True), _td(op, left=True), _td(f"{r.count:,}", r.count),
            _td("-" if hit is None else f"{hit * 100:.1f}", -1 if hit is None else hit),
            _td(fmt_rate(r.summary.ops_per_s or 0.0), r.summary.ops_per_s),
            *[_td(latency_cell(r.count, k, r.figure(k), fmt_latency), r.figure(k))
              for k in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us")],
            _td(f"{errors:,}", errors),
        ]
        if baseline:
            b = baseline_for(base, r)
            for key in ("ops_per_s", "p50_us", "p99_us"):
                mine, theirs = r.figure(key), b.figure(key) if b is not None else None
                if b is r:
                    cells.append(_td("--", 100))
                elif b and theirs and mine is not None and min(r.count, b.count) > 1:
                    pct = mine / theirs * 100
                    cells.append(_td(fmt_percent(pct), pct))
                else:
                    cells.append(_td("-", -1))
        out.append(f"<tr{sep}>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    skipped = [r for r in document.runs if r.status in ("skipped", "failed")]
    items = [f"{r.name}: {r.status} — {r.reason}" for r in skipped] + load_notes(document)
    if items:
        out.append("<ul>" + "".join(f"<li>{escape(item)}</li>" for item in items) + "</ul>")
    if has_few_samples([r.count for r in rows]):
        out.append(f'<p class="note">{escape(FEW_SAMPLES_NOTE)}</p>')
    if baseline:
        out.append(f'<p class="note">Baseline: {escape(baseline)}. Percentages are of the baseline\'s '
                   "figure for the same op: ops/s over 100 % is faster, latency over 100 % is slower.</p>")
    return "".join(out)


def _network_section(document: ResultsDocument) -> str:
    """Reference 004's "% of baseline" per network profile, and the proxy's own overhead beside it."""
    out = []
    if len({run.profile for run in document.runs}) > 1:
        head, rows, left = network_baseline_table(document)
        out += ["<h2>Where the cache lives: % of baseline</h2>",
                '<p class="note">Mean latency under each network profile, as a percentage of the first '
                f"profile's for the same target{SAME_POINT if left > 3 else ''} and op (reference 004's table).</p>",
                '<table><thead><tr>' + "".join(f'<th class="{"l" if i < left else ""}">{escape(h)}</th>'
                                                for i, h in enumerate(head)) + "</tr></thead><tbody>"]
        out += ["<tr>" + "".join(_td(cell, left=i < left) for i, cell in enumerate(row)) + "</tr>"
                for row in rows]
        out.append("</tbody></table>")
    note = proxy_overhead_note(document)
    if note:
        out.append(f'<p class="note proxy-overhead">{escape(note)}</p>')
    return "".join(out)


def _server_table(phases: list[PhaseRow]) -> str:
    rows = [p for p in phases if p.has_server]
    if not rows:
        return ""
    head = ["backend", "phase", "CPU µs/op", "CPU % p90", "bytes in/op", "bytes out/op", "net Mbps p90",
            "net Mbps p70", "used memory", "evictions"]
    out = ["<h2>Server</h2>",
           '<p class="note">From the server\'s own counters, sampled every second by one extra client '
           "connection (its own traffic is subtracted).</p>",
           '<table class="sortable"><thead><tr>'
           + "".join(f'<th class="{"l" if i < 2 else ""}">{escape(h)}</th>' for i, h in enumerate(head))
           + "</tr></thead><tbody>"]
    per_second = {1, 4, 5}  # CPU % p90, net Mbps p90 and p70: marked when from too few intervals
    memory = 6  # used memory, in the Markdown's units (25.1 MiB, not 26.32M)
    for p in rows:
        server = p.server
        values = [server.cpu_us_per_op, server.cpu_pct_p90, server.bytes_in_per_op, server.bytes_out_per_op,
                  server.net_mbps_p90, server.net_mbps_p70, server.used_memory_bytes, server.evictions]
        mark = f" {LOW_SAMPLES_MARK}" if p.low_samples else ""
        out.append("<tr>" + _td(p.name, left=True) + _td(p.phase.name, left=True) + "".join(
            _td("-" if v is None else (fmt_memory(float(v)) if i == memory else _fmt_num(float(v)))
                + (mark if i in per_second else ""), -1 if v is None else v)
            for i, v in enumerate(values)) + "</tr>")
    out.append("</tbody></table>")
    if any(p.low_samples for p in rows):
        out.append(f'<p class="note">{LOW_SAMPLES_MARK} {escape(LOW_SAMPLES_NOTE)}</p>')
    return "".join(out)


def _spectrum_charts(document: ResultsDocument, colors: dict[int, str], ids: _Ids) -> Iterator[str]:
    """The section's parts, a chart at a time. Each run's curve is read off its histograms as they
    are decoded, which are then let go: a decoded histogram is ~100x its encoded size, and holding
    every run's histograms (or every chart's points) at once took a 12 MB results file of 1,590 runs
    to 1.2 GB."""
    measured = [(index, run) for index, run in enumerate(document.runs) if run.measured]
    charts = list(dict.fromkeys((phase.name, name) for _, run in measured for phase in run.phases
                                for name in phase.ops))
    many_phases = len({p for p, _ in charts}) > 1
    opened = False
    for phase, op in charts:
        series = [curve for index, run in measured
                  if (curve := _spectrum(run, phase, op, colors[index])) is not None]
        if not series:
            continue
        if not opened:
            yield ("<h2>Latency percentile spectrum</h2><p class=\"note\">Successful ops (hits, misses, ok); "
                   "x: percentile on the nines scale, y: latency (log).</p><div class=\"charts\">")
            opened = True
        chart_id = ids("spectrum")
        title = f"{phase}: {op}" if many_phases else op
        svg = line_chart(series, title=f"latency by percentile — {title}", x_label="percentile",
                         y_label="latency", x_kind="percentile", y_kind="log", y_fmt=_fmt_us,
                         chart_id=chart_id)
        yield page.figure(svg, page.legend(chart_id, [(i, s.name, s.color) for i, s in enumerate(series)]))
    if opened:
        yield "</div>"


def _spectrum(run: Run, phase_name: str, op_name: str, color: str) -> Series | None:
    """``run``'s latency by percentile for one op of one phase (None when it has no sample there)."""
    for phase in run.phases:
        op = phase.ops.get(op_name) if phase.name == phase_name else None
        if op is None:
            continue
        hist = latency_histogram({k: Histogram.decode(v) for k, v in op.histograms.items()})
        if hist.total:
            grid = percentile_grid(hist.total)
            # an array of (x, y) rows, not tuples of floats: a sixth of the memory, for a chart of thousands of runs
            points = np.array([(percentile_to_x(p), v / 1000) for p, v in zip(grid, hist.percentiles(grid),
                                                                               strict=True)])
            return Series(run.name, points, color)
    return None


def _bar_charts(rows: list[OpRow], colors: dict[int, str], ids: _Ids) -> str:
    many_phases = len({r.phase.name for r in rows}) > 1
    runs = sorted({r.index for r in rows})
    legend_entries = [(run, next(r.name for r in rows if r.index == run), colors[run]) for run in runs]

    def op_of(r: OpRow) -> str:
        return op_label(r.phase.name, r.op_name, many_phases)

    ordered = sorted(rows, key=lambda r: (op_of(r), r.index))
    throughput_id = ids("throughput")
    bars = [(f"{r.name} · {op_of(r)}", r.summary.ops_per_s or 0.0, colors[r.index], r.index) for r in ordered]
    out = ["<h2>Throughput and hit ratio</h2><div class=\"charts\">",
           page.figure(bar_chart(bars, title="throughput per op", value_label="ops/s", fmt=_fmt_num,
                             chart_id=throughput_id), page.legend(throughput_id, legend_entries))]
    # reads only, as the title says: a delete's "hit" (the key existed) is not a read's
    reads = [r for r in ordered if r.summary.hit_ratio is not None and "delete" not in r.op_name.split("+")]
    if reads:
        hit_id = ids("hits")
        hit_bars = [(f"{r.name} · {op_of(r)}", (r.summary.hit_ratio or 0) * 100, colors[r.index], r.index)
                    for r in reads]
        out.append(page.figure(bar_chart(hit_bars, title="hit ratio (reads)", value_label="hit %",
                                     fmt=lambda v: f"{v:.1f}%", chart_id=hit_id, max_value=100.0),
                           page.legend(hit_id, legend_entries)))
    out.append("</div>")
    return "".join(out)


_TIMESERIES_METRICS = (
    ("ops", "ops per second", "ops/s", "linear"),
    ("p99_us", "p99 latency per second", "latency", "log"),
    ("p50_us", "p50 latency per second", "latency", "log"),
    ("server_ops_per_s", "server commands per second", "commands/s", "linear"),
    ("server_cpu_pct", "server CPU", "% of one core", "linear"),
    ("net_out_mbps", "server network out", "Mbps", "linear"),
    ("net_in_mbps", "server network in", "Mbps", "linear"),
)


def _phase_series(phase: Phase) -> list[TimeseriesEntry]:
    """The client's per-second entries, and the server sampler's when the runner did not merge them in."""
    entries = list(phase.timeseries or [])
    server = phase.server
    if server is not None and server.samples and not any(e.server_cpu_pct is not None for e in entries):
        samples = {"samples": [sample.model_dump() for sample in server.samples]}  # server_stats reads dicts
        entries += [TimeseriesEntry.model_construct(**entry) for entry in server_timeseries(samples)]
    return entries


def _timeseries_charts(document: ResultsDocument, colors: dict[int, str], ids: _Ids) -> str:
    per_phase: dict[str, list[tuple[int, str, list[TimeseriesEntry]]]] = defaultdict(list)
    for index, run in enumerate(document.runs):
        for phase in run.phases:
            entries = _phase_series(phase)
            if entries:
                per_phase[phase.name].append((index, run.name, entries))
    figures = []
    for phase_name, entries in per_phase.items():
        for key, title, unit, kind in _TIMESERIES_METRICS:
            series = []
            for index, name, points in entries:
                data = [(float(p.t), float(value)) for p in points if (value := getattr(p, key, None)) is not None]
                if data:
                    series.append(Series(name, data, colors[index], markers=len(data) <= 30))
            if not series:
                continue
            chart_id = ids("ts")
            y_fmt = _fmt_us if unit == "latency" else _fmt_num
            label = f"{title} ({phase_name})" if len(per_phase) > 1 else title
            figures.append(page.figure(
                line_chart(series, title=label, x_label="seconds", y_label=unit,
                           y_kind=kind, x_fmt=lambda v: f"{v:g}", y_fmt=y_fmt, chart_id=chart_id),
                page.legend(chart_id, [(i, s.name, s.color) for i, s in enumerate(series)])))
    if not figures:
        return ""
    return ("<h2>Per-second time series</h2><p class=\"note\">Client figures: seconds into the timed phase "
            "(the last second may be partial). Server figures: seconds since server sampling started.</p>"
            "<div class=\"charts\">" + "".join(figures) + "</div>")


def _as_number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and abs(number) <= 1e15 else None  # axis spans stay finite


def saturation_point(throughput: list[tuple[float, float]], p99: list[tuple[float, float]]) -> float | None:
    """The swept load where throughput stopped rising while p99 climbed (measure/saturation.py's rule)."""
    by_x = dict(p99)
    points = [(x, ops, by_x[x]) for x, ops in throughput if x in by_x]
    return find_saturation(points) if len(points) >= 3 else None


def _sweep_charts(document: ResultsDocument, colors: dict[int, str], ids: _Ids) -> str:
    phases = [p for p in phase_rows(document) if p.sweep_values]
    if not phases:
        return ""
    groups: dict[tuple[str, ...], list[PhaseRow]] = defaultdict(list)
    for p in phases:
        groups[tuple(sorted(p.sweep_values))].append(p)
    label_color: dict[str, str] = {}
    for p in phases:
        label_color.setdefault(p.label, colors[p.index])
    figures = ['<h2>Sweeps</h2><p class="note">Repeats of a point are averaged. When the swept field is a '
               "load (workers, rate, connections, pipeline), the saturation point (dashed) is where throughput "
               "stopped rising (under 5 % more) while p99 latency climbed (over 25 % more).</p>"]
    for fields, members in groups.items():
        # x: the swept value; several swept fields are shown as one category per combination
        raw = [",".join(str(m.sweep_values[f]) for f in fields) for m in members]
        numbers = [_as_number(v) for v in raw] if len(fields) == 1 else [None] * len(raw)
        numeric = all(n is not None for n in numbers)
        categories: list[str] = []
        if numeric:
            xs = [float(n) for n in numbers if n is not None]
        else:
            categories = sorted(set(raw), key=lambda v: (_as_number(v) is None, _as_number(v) or 0, v))
            xs = [float(categories.index(v)) for v in raw]
        positive = numeric and min(xs) > 0
        x_kind = "log" if positive and max(xs) / min(xs) >= 20 else ("linear" if numeric else "category")
        agg: dict[tuple[str, str], dict[float, list[PhaseRow]]] = defaultdict(lambda: defaultdict(list))
        for x, m in zip(xs, members, strict=True):
            agg[(m.label, m.phase.name)][x].append(m)
        many_phases = len({ph for _, ph in agg}) > 1

        def series_of(metric: Any, agg: Any = agg, many: bool = many_phases) -> list[Series]:
            out = []
            for (label, phase), points in agg.items():
                data = []
                for x in sorted(points):
                    values = [v for v in (metric(m) for m in points[x]) if v is not None]
                    if values:
                        data.append((x, sum(values) / len(values)))
                name = f"{label} ({phase})" if many else label
                out.append(Series(name, data, label_color[label], markers=True))
            return out

        def bandwidth(m: PhaseRow) -> float | None:
            return m.server.net_mbps_p90 if m.server.net_mbps_p90 is not None else m.payload_mbps

        server_bw = any(m.server.net_mbps_p90 is not None for m in members)
        x_label = " × ".join(fields)
        x_fmt = (lambda v: f"{v:g}") if numeric else str
        charts = [
            ("sweep throughput", "ops/s", lambda m: m.ops_per_s, "linear", _fmt_num, True),
            ("sweep bandwidth (" + ("server net Mbps p90" if server_bw else "client payload") + ")", "Mbps",
             bandwidth, "linear", _fmt_num, True),
            ("sweep p99 latency (worst op)", "latency", lambda m: m.p99_us_max, "log", _fmt_us, False),
        ]
        charts += _server_sweep_charts(members)
        load_sweep = len(fields) == 1 and fields[0] in LOAD_PARAMS and numeric
        p99_series = {s.name: s.points for s in series_of(lambda m: m.p99_us_max)}
        throughput_series = {s.name: s.points for s in series_of(lambda m: m.ops_per_s)}
        for title, unit, metric, y_kind, y_fmt, saturates in charts:
            series = series_of(metric)
            markers = []
            if saturates and load_sweep:
                for s in series:
                    x = saturation_point(throughput_series[s.name], p99_series[s.name])
                    if x is not None:
                        markers.append(Marker(x, f"{s.name}: saturates at {x:g}", s.color))
            # the server's own curves (reference 001's) get their own id stem
            chart_id = ids("server-sweep" if title.startswith("sweep server") else "sweep")
            svg = line_chart(series, title=f"{title} vs {x_label}", x_label=x_label, y_label=unit,
                             x_kind=x_kind, y_kind=y_kind, x_fmt=x_fmt, y_fmt=y_fmt, categories=categories,
                             markers=markers, chart_id=chart_id)
            legend = page.legend(chart_id, [(i, s.name, s.color) for i, s in enumerate(series)])
            figures.append(page.figure(svg, legend))
    return figures[0] + '<div class="charts">' + "".join(figures[1:]) + "</div>"


def _server_sweep_charts(members: list[PhaseRow]) -> list[tuple[str, str, Any, str, Any, bool]]:
    """Reference 001's two curves against the swept value, where the server was sampled: bytes out
    alone (what its alarms watch, CloudWatch's NetworkBytesOut) and the server's CPU."""
    charts: list[tuple[str, str, Any, str, Any, bool]] = []
    if any(m.server.net_out_mbps_p90 is not None for m in members):
        charts.append(("sweep server net out Mbps p90 (bytes out)", "Mbps",
                       lambda m: m.server.net_out_mbps_p90, "linear", _fmt_num, False))
    if any(m.server.cpu_pct_p90 is not None for m in members):
        charts.append(("sweep server CPU % p90 (of one core)", "CPU %",
                       lambda m: m.server.cpu_pct_p90, "linear", _fmt_num, False))
    return charts


def _environment(document: ResultsDocument) -> str:
    env = document.environment
    out = ["<h2>Environment</h2><table>"]
    for key, value in env.saved.items():  # every field of the fingerprint, in the file's order
        if key in ("packages", "calibration"):
            continue
        out.append(f'<tr><th class="l">{escape(str(key))}</th><td class="l w">{escape(str(value))}</td></tr>')
    packages = env.packages or {}
    if packages:
        listing = ", ".join(f"{k} {v}" for k, v in packages.items())
        out.append(f'<tr><th class="l">packages</th><td class="l w">{escape(listing)}</td></tr>')
    out.append("</table>")
    calibration = env.calibration
    if calibration is not None and not calibration.is_empty:
        rtt = calibration.loopback_rtt
        out.append("<h3>Calibration</h3><table><tr><th class=l>measure</th><th>p50</th><th>p99</th></tr>")
        for mode in ("busy", "idle"):
            figures = getattr(rtt, mode) if rtt is not None else None
            if figures is not None and not figures.is_empty:
                out.append(f"<tr><td class=l>loopback round trip, {mode} core</td>"
                           f"<td>{escape(fmt_latency(figures.p50_us))}</td>"
                           f"<td>{escape(fmt_latency(figures.p99_us))}</td></tr>")
        idle_gap = rtt.idle_gap_ms if rtt is not None else None
        out.append(f"</table><p class=\"note\">timer resolution {calibration.timer_resolution_ns} ns; "
                   f"idle gap {idle_gap} ms. Latencies near these floors measure the machine, "
                   "not the backend.</p>")
    else:
        out.append('<p class="note">No calibration in this results file (run without --no-calibrate to get '
                   "one).</p>")
    return "".join(out)


def _spec(document: ResultsDocument) -> str:
    from ..plan import as_given
    from ..spec import to_toml  # the experiment models: only the HTML page needs them (formats imports us)

    experiment = as_given(document.experiment.saved)  # the spec as saved, to re-run
    toml = to_toml(experiment)
    return ("<h2>Re-run this experiment</h2><p class=\"note\">Save as <code>experiment.toml</code> and run "
            "<code>cachemark run experiment.toml</code>. Target URLs are redacted in results: put passwords "
            f"back first.</p><pre id=\"spec-toml\">{escape(toml)}</pre>"
            "<details><summary>the spec as saved (JSON)</summary>"
            f"<pre>{escape(json.dumps(experiment, indent=1))}</pre></details>")


def render_html(document: ResultsDocument, baseline: str | None = None) -> str:
    """The whole report as one HTML string."""
    return "".join(html_parts(document, baseline))


def html_parts(document: ResultsDocument, baseline: str | None = None) -> Iterator[str]:
    """The report's page, section by section: written as made, a report of many runs never holds
    its whole text (the spectrum and time-series charts are most of it)."""
    rows = op_rows(document)
    summary = _summary_table(document, rows, baseline)  # first: an unknown baseline is refused before any output
    phases = phase_rows(document)
    colors = {i: color_for(i) for i in range(len(document.runs))}
    ids = _Ids()
    experiment = document.experiment
    name = experiment.name
    sweeps = {r.sweep_key for r in document.runs if r.sweep}
    created = document.created if document.created is not None else "?"
    yield ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
           f"<title>cachemark: {escape(name)}</title><style>{page.CSS}</style></head><body>"
           f"<h1>cachemark: {escape(name)}</h1>"
           f"<p class=\"note\">{escape(experiment.description or '')} results created "
           f"{escape(created)} · schema {escape(str(document.schema_))} · "
           f"{len(document.runs)} runs{f' · {len(sweeps)} sweep points' if sweeps else ''}</p>")
    yield from (to_html(block) for block in verdict_blocks(document))
    yield from (to_html(block) for block in headline_blocks(document))
    yield "<h2>Summary</h2>"
    yield summary
    yield _network_section(document)
    yield _server_table(phases)
    del phases
    if rows:
        yield from _spectrum_charts(document, colors, ids)
        yield _bar_charts(rows, colors, ids)
    del rows
    yield _timeseries_charts(document, colors, ids)
    yield _sweep_charts(document, colors, ids)
    yield _environment(document)
    yield _spec(document)
    yield f"<script>{page.JS}</script></body></html>"
