"""The decision as a reader takes it: what to deploy first, then the runner-up and every rejected candidate
with the need it fails, then the figures behind it — as blocks (terminal, Markdown), JSON, and one HTML page
with the miss-ratio curves by bytes (the chosen size and the verified point marked), latency against offered
rate (the budget line and the capacity knee) and the cost table.

It draws :class:`cachemark.analysis.decision.Decision` only; every figure is computed there or by the steps.
"""

from __future__ import annotations

from dataclasses import asdict
from html import escape
from typing import Any

from ..analysis.decision import Assessment, Decision
from . import page
from .blocks import Block, to_html, to_markdown
from .charts import Marker, Series, color_for, line_chart
from .figures import fmt_rate


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:.0f}µs" if x < 1 else f"{x:.3g}ms"


def _money(x: float | None, currency: str = "USD") -> str:
    return "-" if x is None else f"{x:,.0f} {currency}"


def _p99s(a: Assessment) -> str:
    if a.capacity is None or not a.capacity.p99_at_peak_ms:
        return "-"
    return ", ".join(f"{op} {_ms(v)}" for op, v in a.capacity.p99_at_peak_ms.items())


def _capacity(a: Assessment, peak: float) -> str:
    c = a.capacity
    if c is None:
        return "-"
    if c.ops_per_s is None:
        return f"< {fmt_rate(c.low)}/s" if c.low else "none"
    head = a.headroom(peak)
    width = f" ±{(c.high - c.low) / 2 / c.ops_per_s:.0%}" if c.high else " (not bracketed above)"
    return f"{fmt_rate(c.ops_per_s)}/s{width}" + (f" ({head:.1f}× peak)" if head is not None else "")


def _setting(a: Assessment) -> str:
    s = a.sizing
    if s is None or s.setting is None:
        return "-"
    return s.setting.shown


def _measured(a: Assessment) -> str:
    s = a.sizing
    if s is None:
        return "-"
    if s.measured is None:
        return f"{_ratio(s.predicted)} predicted, not verified"
    return f"{_ratio(s.predicted)} predicted, {_ratio(s.measured)} measured"


def _plan(a: Assessment) -> str:
    if a.plan is None:
        return "-"
    return f"{a.plan.nodes} × {a.plan.offering}"


def decision_lines(d: Decision) -> list[str]:
    """The answer in sentences: what to deploy, with which setting, how many of which node, and why;
    a capacity search its noise may have decided says so here, beside the answer it moves."""
    noisy = [a.label for a in d.assessments if a.capacity is not None and a.capacity.warnings]
    caution = ([f"Caution: the capacity search of {', '.join(noisy)} saw p99 fall as the rate rose (a busy host): "
                "the capacity, node count and p99 may be the noise's; re-run on a quiet host."] if noisy else [])
    return _answer_lines(d) + caution


def _answer_lines(d: Decision) -> list[str]:
    t = d.traffic
    chosen = d.chosen
    if chosen is None:
        lines = [f"No candidate meets every need (get hit ratio ≥ {d.target_hit_ratio:.2f}"
                 + "".join(f", {op} p99 ≤ {_ms(ms)}" for op, ms in d.budgets_ms.items())
                 + f" at the peak of {fmt_rate(t.peak_rate)} requests/s); closest below."]
        return lines
    lines = [f"Deploy {chosen.label} (through {chosen.client}): {_setting(chosen)}"
             + (f", {chosen.plan.nodes} × {chosen.plan.offering} at {_money(chosen.plan.monthly, chosen.plan.currency)}"
                " a month" if chosen.plan else "") + "."]
    s = chosen.sizing
    if s is not None and s.predicted is not None:
        measured = f", {s.measured:.3f} measured on the configured server" if s.measured is not None else ""
        lines.append(f"Get hit ratio {s.predicted:.3f} predicted{measured} (need ≥ {d.target_hit_ratio:.2f}).")
    c = chosen.capacity
    if c is not None:
        share = (f" ({fmt_rate(c.per_node_rate)}/s on each of {chosen.plan.load_nodes} nodes)"
                 if chosen.plan is not None and chosen.plan.load_nodes > 1 else "")
        how = "measured there"
        if not c.p99_at_peak_measured:
            how = "read off the search's steps"
        elif c.p99_at_peak_steps > 1:
            how += (f", the median of {c.p99_at_peak_steps} steps: the first was over budget where the search had"
                    " been within at a higher rate")
        at_peak = f"p99 at the peak of {fmt_rate(t.peak_rate)} requests/s{share}: {_p99s(chosen)} ({how})"
        cap = (f"; within the budget up to {_capacity(chosen, t.peak_rate)}" if c.ops_per_s is not None else "")
        lines.append(at_peak + cap + ".")
    if d.runner_up is not None:
        r = d.runner_up
        lines.append(f"Runner-up: {r.label}" + (f" at {_money(r.plan.monthly, r.plan.currency)} a month"
                                                 if r.plan else "") + ".")
    return lines


def decision_blocks(d: Decision) -> list[Block]:
    t = d.traffic
    budgets = ", ".join(f"{op} p99 ≤ {_ms(ms)}" for op, ms in d.budgets_ms.items()) or "no p99 budget"
    answer = Block("The decision", decision_lines(d), kind="verdict")
    rejected = Block("Rejected", columns=["candidate", "need it fails", "why"], left=2)
    for a in d.rejected:
        for need, why in a.fails:
            rejected.rows.append([a.label, need, why])
    figures = Block(
        "Each candidate",
        [f"Needs: get hit ratio ≥ {d.target_hit_ratio:.2f}, {budgets}"
         + (f", behind the network profile {d.network}" if d.network else "") + "."],
        columns=["candidate", "client", "setting", "get hit ratio", "p99 at peak (a node)",
                 "capacity in budget (a node)", "nodes", "a month"], left=2)
    for a in d.assessments:
        figures.rows.append([a.label, a.client, _setting(a), _measured(a), _p99s(a), _capacity(a, t.peak_rate),
                             _plan(a), _money(a.plan.monthly, a.plan.currency) if a.plan else "-"])
    for a in d.assessments:
        figures.notes += [f"{a.label}: {n}" for n in a.notes]
        if a.sizing is not None and a.sizing.why:
            figures.notes.append(f"{a.label}: {a.sizing.why}")
        if a.capacity is not None and a.capacity.trusted:
            figures.notes.append(f"{a.label}: tails judged on {a.capacity.trusted}")
        if a.capacity is not None:
            figures.notes += [f"{a.label}: capacity: {w}" for w in a.capacity.warnings]
    gets = t.gets
    traffic = Block("The traffic", [
        f"{t.source}: {t.requests:,} requests ({', '.join(f'{op} {n:,}' for op, n in t.op_counts.items() if n)}), "
        f"{t.objects:,} objects, {t.working_set_bytes / 2**20:,.1f} MiB working set; "
        f"peak {fmt_rate(t.peak_rate)} requests/s, mean {fmt_rate(t.mean_rate)}/s over {t.duration_s:,.0f} s; "
        f"{t.ttl_share:.0%} of writes with a TTL."
        + ("" if gets else " No gets: the hit ratio has nothing to count.")], notes=list(t.notes))
    blocks = [answer]
    if rejected.rows:
        blocks.append(rejected)
    blocks += [figures, traffic]
    if d.notes:
        blocks.append(Block("Notes", list(d.notes)))
    return blocks


def decision_markdown(d: Decision) -> str:
    return "\n".join(to_markdown(b) for b in decision_blocks(d))


def decision_json(d: Decision) -> dict[str, Any]:  # Any: the JSON output (`decide --json`)
    def one(a: Assessment) -> dict[str, Any]:  # ... one candidate's object in it
        out = asdict(a)
        out["fails"] = [{"need": n, "why": w} for n, w in a.fails]
        out["headroom"] = a.headroom(d.traffic.peak_rate)
        if a.capacity is not None:
            out["capacity"]["capacity_ops_per_s"] = a.capacity.ops_per_s
        return out

    chosen = d.chosen
    return {
        "decision": None if chosen is None else {
            "deploy": chosen.label, "url": chosen.url, "client": chosen.client,
            "setting": asdict(chosen.sizing.setting) if chosen.sizing and chosen.sizing.setting else None,
            "nodes": chosen.plan.nodes if chosen.plan else None,
            "offering": chosen.plan.offering if chosen.plan else None,
            "monthly": chosen.plan.monthly if chosen.plan else None,
        },
        "runner_up": d.runner_up.label if d.runner_up else None,
        "rejected": [{"candidate": a.label, "fails": [{"need": n, "why": w} for n, w in a.fails]}
                     for a in d.rejected],
        "needs": {"hit_ratio": d.target_hit_ratio, "p99_ms": d.budgets_ms},
        "network": d.network,
        "traffic": {**asdict(d.traffic), "gets": d.traffic.gets},
        "candidates": [one(a) for a in d.assessments],
        "seconds": d.seconds,
        "notes": d.notes,
    }


def _curve_chart(d: Decision) -> str:
    series, markers = [], []
    for i, a in enumerate(d.assessments):
        s = a.sizing
        if s is None or not s.curve.get("bytes"):
            continue
        color = color_for(i)
        pts = [(b / 2**20, h) for b, h in zip(s.curve["bytes"], s.curve["hit_ratio"], strict=True) if b > 0]
        series.append(Series(f"{a.label}: predicted", pts, color))
        if s.setting is not None:
            mib = s.setting.bytes / 2**20
            if s.predicted is not None:
                series.append(Series(f"{a.label}: chosen size", [(mib, s.predicted)], color, markers=True,
                                     tooltips=[f"{a.label}: {s.setting.shown} → {s.predicted:.3f} predicted"]))
            if s.measured is not None:
                series.append(Series(f"{a.label}: verified", [(mib, s.measured)], color, markers=True, dashed=True,
                                     tooltips=[f"{a.label}: {s.measured:.3f} measured on the real server"]))
    if not series:
        return ""
    series.append(Series("need", [(min(x for s in series for x, _ in s.points),
                                   d.target_hit_ratio),
                                  (max(x for s in series for x, _ in s.points), d.target_hit_ratio)],
                         "#444", dashed=True))
    return _framed(series, line_chart(series, title="Get hit ratio by cache memory", x_label="memory (MiB)",
                                      y_label="get hit ratio", x_kind="log", x_fmt=lambda v: f"{v:.3g}",
                                      y_fmt=lambda v: f"{v:.2f}", markers=markers, chart_id="decide-curves"),
                   "decide-curves")


def _latency_chart(d: Decision) -> str:
    series, markers = [], []
    budget = max(d.budgets_ms.values()) if d.budgets_ms else None
    for i, a in enumerate(d.assessments):
        c = a.capacity
        if c is None or not c.points:
            continue
        color = color_for(i)
        pts = sorted((p["rate"], max(p["p99_ms"].values())) for p in c.points if p.get("p99_ms"))
        series.append(Series(f"{a.label}: p99", pts, color, markers=True))
        if c.ops_per_s is not None and a is d.chosen:  # one knee marked: the labels of several would overlap
            markers.append(Marker(c.ops_per_s, f"{a.label}: capacity", color))
    if not series:
        return ""
    if budget is not None:
        xs = [x for s in series for x, _ in s.points]
        series.append(Series("budget", [(min(xs), budget), (max(xs), budget)], "#444", dashed=True))
    markers.insert(0, Marker(d.traffic.peak_rate, "peak", "#888"))
    return _framed(series, line_chart(series, title="p99 against offered rate (open loop)",
                                      x_label="offered rate (ops/s)", y_label="p99 (ms)", y_kind="log",
                                      x_kind="log", x_fmt=fmt_rate, y_fmt=lambda v: f"{v:.3g}", markers=markers,
                                      chart_id="decide-latency"), "decide-latency")


def _framed(series: list[Series], svg: str, chart_id: str) -> str:
    """The chart in the run report's frame, with its legend (a click hides or shows a series)."""
    return page.figure(svg, page.legend(chart_id, [(i, s.name, s.color) for i, s in enumerate(series)]))


# the candidates' table is wide (eight columns of sentences): its cells wrap, where a run's figures do not
_WRAPPED = "td{white-space:normal}"


def decision_html(d: Decision) -> str:
    blocks = decision_blocks(d)
    charts = [c for c in (_curve_chart(d), _latency_chart(d)) if c]
    body = [to_html(blocks[0])]
    if charts:
        body.append('<h2>Curves</h2><div class="charts">' + "".join(charts) + "</div>")
    body += [to_html(b) for b in blocks[1:]]
    title = "cachemark decide: " + (d.chosen.label if d.chosen else "no candidate meets every need")
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{page.CSS}{_WRAPPED}</style></head><body><h1>{escape(title)}</h1>{''.join(body)}"
            f'<p class="note">Made by cachemark decide in {d.seconds:,.0f} s.</p><script>{page.JS}</script>'
            "</body></html>")
