"""``cachemark size`` as answer blocks: how big, in objects and in each server's bytes, and the curve.

A sampled curve (``--sample-rate``) is exact up to its near stack and estimated beyond: a figure
that comes from the sample is marked "≈", and where the sample leaves a figure uncertain by
more than 0.01 of hit ratio, the answer is "not resolved", never a number — in the terminal, the
Markdown and the JSON alike (``size_document``: null with the reason).
"""

from __future__ import annotations

import math
from typing import Any

from ..analysis.footprint import Footprint
from ..analysis.mrc import RESOLVED_ERROR, Curve
from ..analysis.sizing import ExpectedLatency, SizeAnswer
from ..units import fmt_bytes
from .blocks import Block
from .figures import fmt_latency

CURVE_SHARES = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
NOT_RESOLVED = "not resolved"
APPROX = "≈ "


def fmt_count(value: float) -> str:
    return f"{value:,.0f}"


def _approx(text: str, estimated: bool) -> str:
    return APPROX + text if estimated else text


def not_resolved_reason(curve: Curve) -> str:
    near = (f"beyond the {curve.exact_up_to:,.0f} objects counted exactly, "
            if 0 < curve.exact_up_to < math.inf else "")
    return (f"{near}the sample at rate {curve.sample_rate:g} leaves the hit ratio uncertain by more than 0.01 "
            f"(three standard errors over {RESOLVED_ERROR:.4f}); a higher --sample-rate, or a longer trace, "
            "resolves it")


def answer_block(curve: Curve, answers: list[SizeAnswer], footprints: list[Footprint], source: str,
                 latencies: list[ExpectedLatency] | None = None, latency_label: str = "") -> Block:
    sampled = f", SHARDS-sampled at {curve.sample_rate:g}" if curve.sample_rate < 1 else ""
    total = _approx(f"{curve.objects:,.0f}", not curve.objects_exact)
    uncounted = " (its deletes, which no cache size answers, not counted)" if source.startswith("trace") else ""
    lines = [f"{source}: {curve.requests:,} requests over {total} objects{uncounted}; "
             f"{curve.policy.upper()} curve{sampled}."]
    if footprints:
        lines.append("Bytes per item, measured on a spawned server with this size mix: " + "; ".join(
            f"{fp.server} {fp.version} {fp.bytes_per_item:,.0f} B ({fp.overhead_per_item:,.0f} B over the "
            f"{fp.payload_per_item:,.0f} B of key and value)" for fp in footprints) + ".")
    columns = ["hit ratio", "objects", "of all"]
    names = {"redis": "Redis maxmemory", "memcached": "memcached -m"}
    columns += [names.get(fp.server, fp.server) for fp in footprints]
    if latencies:
        columns += ["get mean", "get p99"]
    rows = []
    for i, answer in enumerate(answers):
        if not answer.resolved:
            row = [f"{answer.hit_ratio:.0%}", NOT_RESOLVED, "-", *["-"] * len(footprints)]
        elif answer.objects is None:
            row = [f"{answer.hit_ratio:.0%}", "unreachable", "-", *["-"] * len(footprints)]
        else:
            share = answer.share_of_objects or 0.0
            row = [f"{answer.hit_ratio:.0%}", _approx(fmt_count(answer.objects), answer.estimated),
                   _approx(f"{share:.1%}", answer.estimated or not curve.objects_exact),
                   *(_approx(fmt_bytes(answer.bytes_by_server[fp.server]), answer.estimated) for fp in footprints)]
        if latencies:  # an unreachable hit ratio has no size, so no latency at it
            reached = answer.resolved and answer.objects is not None
            row += [fmt_latency(latencies[i].mean_us), fmt_latency(latencies[i].p99_us)] if reached else ["-", "-"]
        rows.append(row)
    notes = []
    if any(a.resolved and a.objects is None for a in answers):
        notes.append("unreachable: first requests of each object miss at any size (cold misses: "
                     f"{curve.miss_ratios[-1]:.1%} of requests at the largest size).")
    if any(not a.resolved for a in answers):
        notes.append(f"{NOT_RESOLVED}: {not_resolved_reason(curve)}.")
    if any(a.estimated for a in answers) or not curve.objects_exact:
        notes.append(f"{APPROX.strip()} estimated from the sample"
                     + (f" (sizes up to {curve.exact_up_to:,.0f} objects are exact)"
                        if curve.exact_up_to < math.inf else "") + ".")
    if latencies:
        notes.append(f"get latency mixes {latency_label}'s measured hit and miss histograms in that proportion.")
    return Block("How big must the cache be", lines, columns, rows, notes, left=1)


def curve_block(curves: list[Curve], che: dict[float, float] | None = None) -> Block:
    """Hit ratio at a few shares of the objects, per policy (and Che's approximation beside)."""
    base = curves[0]
    columns = ["cache size", "of all", *(c.policy.upper() for c in curves)]
    if che:
        columns.append("Che (LRU)")
    rows = []
    unresolved = False
    for share in CURVE_SHARES:
        size = max(1.0, base.objects * share)
        cells = []
        for c in curves:
            hit = c.hit_ratio_at(size)
            unresolved |= hit is None
            cells.append(NOT_RESOLVED if hit is None else f"{hit:.3f}")
        row = [fmt_count(size), _approx(f"{share:.1%}", not base.objects_exact), *cells]
        if che:
            row.append(f"{che.get(share, float('nan')):.3f}")
        rows.append(row)
    notes = ["Hit ratio by cache size in objects" + (
        f" after {base.warmup:,} requests filled the cache (steady state)." if base.warmup else
        " (cold misses included: the trace's first request of each object misses at every size).")]
    notes += [note for note in base.notes]
    if unresolved:
        notes.append(f"{NOT_RESOLVED}: {not_resolved_reason(base)}.")
    if not base.objects_exact:
        notes.append(f"{APPROX.strip()} a share of the estimated number of objects.")
    if che:
        notes.append("Che's approximation: the steady-state LRU hit ratio for independent Zipf requests "
                     "(no cold misses), the analytic check on the simulated curve.")
    return Block("Hit ratio by cache size", [], columns, rows, notes, left=2)


def size_document(curves: list[Curve], answers: list[SizeAnswer], footprints: list[Footprint], source: str,
                  latencies: list[ExpectedLatency] | None = None, che: dict[float, float] | None = None,
                  ) -> dict[str, Any]:  # Any: the JSON output (`size --json`)
    """The same answers as JSON: a figure the sample does not resolve is null, with ``reason``;
    a figure estimated from the sample says so (``estimated``)."""
    base = curves[0]
    reason = not_resolved_reason(base)
    out_answers = []
    for i, a in enumerate(answers):
        item = {"hit_ratio": a.hit_ratio, "objects": a.objects, "share_of_objects": a.share_of_objects,
                "estimated": a.estimated, "bytes": dict(a.bytes_by_server) or None}
        if not a.resolved:
            item["reason"] = NOT_RESOLVED + ": " + reason
        elif a.objects is None:
            item["reason"] = "unreachable: first requests of each object miss at any size"
        if latencies:
            item["get_mean_us"], item["get_p99_us"] = latencies[i].mean_us, latencies[i].p99_us
        out_answers.append(item)
    points = []
    for share in CURVE_SHARES:
        size = max(1.0, base.objects * share)
        point = {"size": size, "share_of_objects": share, "share_estimated": not base.objects_exact}
        for c in curves:
            hit = c.hit_ratio_at(size)
            entry = {"hit_ratio": hit}
            if c.errors:
                entry["std_error"] = c.error_at(size)
                entry["estimated"] = size > c.exact_up_to
            if hit is None:
                entry["reason"] = NOT_RESOLVED + ": " + not_resolved_reason(c)
            point[c.policy] = entry
        if che:
            point["che_lru"] = che.get(share)
        points.append(point)
    return {
        "source": source,
        "requests": base.requests,
        "objects": base.objects,
        "objects_estimated": not base.objects_exact,
        "sample_rate": base.sample_rate,
        "exact_up_to_objects": base.exact_up_to if base.exact_up_to < math.inf else None,
        "warmup_requests": base.warmup,
        "footprints": [{"server": fp.server, "version": fp.version, "bytes_per_item": fp.bytes_per_item,
                        "overhead_per_item": fp.overhead_per_item, "payload_per_item": fp.payload_per_item}
                       for fp in footprints],
        "answers": out_answers,
        "curve": points,
        "notes": list(base.notes),
    }


COUNTED = ("get hits ÷ gets under the trace's own ops: a get that misses fills the cache (cache-aside), "
           "a set writes, a delete removes, a TTL expires on the trace's clock")


def _setting(param: str, setting: float) -> str:
    """A setting in its own unit: maxmemory in bytes, memory_mb in MiB, max_entries in entries."""
    if param == "maxmemory":
        return f"{setting:,.0f} B ({fmt_bytes(setting)})"
    return f"{setting:,.0f} entries" if param == "max_entries" else f"{setting:,.0f} MiB"


def server_block(sized: list[Any]) -> Block:
    """Per server and target: the setting the simulation of that server chose, and what it predicts
    (``sized``: :class:`~cachemark.analysis.server_size.ServerSize`, one per server and target)."""
    names = {"redis": "Redis maxmemory", "memcached": "memcached -m"}
    rows = []
    for s in sized:
        if s.setting is None:
            rows.append([names[s.server], f"{s.target:.0%}", "unreachable", "-", "-"])
            continue
        naive = "-" if s.naive_bytes is None else f"{fmt_bytes(s.naive_bytes)} → {s.naive_predicted:.3f}"
        rows.append([names[s.server], f"{s.target:.0%}" if s.target is not None else "-",
                     _setting(s.param, s.setting), f"{s.predicted:.3f}", naive])
    notes = [f"Counted: {COUNTED}.",
             "Each server simulated as it accounts and evicts: Redis's sampled LRU against used_memory (its "
             "base memory and per-key bytes measured on a spawned server), memcached's slab classes with one LRU "
             "each (every class in use holds a page even beyond -m).",
             "objects × mean: the old sizing (an LRU of objects counting every request, times the mean bytes "
             "per item, no base memory) and the hit ratio the server would really give at it."]
    seen = set()
    for s in sized:
        for note in s.notes:
            if note not in seen:
                seen.add(note)
                notes.append(note)
    return Block("What to set", [], ["server", "target", "setting", "predicted", "objects × mean → real"],
                 rows, notes, left=3)


def byte_curve_block(curves: list[Any], named: tuple[float, ...] = (), shown: int = 10) -> Block:
    """Get hit ratio by cache bytes, per policy (``curves``: OpsCurve by bytes); the named sizes
    (``--sizes``) always shown, the grid thinned to about ``shown`` rows."""
    by_bytes = [c for c in curves if c.unit == "bytes"]
    if not by_bytes:
        return Block("By bytes", ["no byte curve"], [], [], [])
    sizes = by_bytes[0].sizes
    step = max(1, len(sizes) // shown)
    keep = {x for i, x in enumerate(sizes) if i % step == 0 or i == len(sizes) - 1} | {float(x) for x in named}
    rows = []
    for i, size in enumerate(sizes):
        if size in keep:
            mark = " *" if size in named else ""
            rows.append([fmt_bytes(size) + mark, *(f"{c.hit_ratios[i]:.3f}" for c in by_bytes)])
    sampled = by_bytes[0].sample_rate
    notes = [f"Get hit ratio by cache bytes (an object costs its key + value bytes); counted: {COUNTED}."]
    if named:
        notes.append("* a size asked for with --sizes.")
    if sampled < 1:
        notes.append(f"SHARDS at {sampled:g}: the objects whose hash falls in the sample, at a capacity scaled "
                     "alike (estimates).")
    return Block("By bytes", [], ["cache bytes", *(c.policy.upper() for c in by_bytes)], rows, notes, left=1)


def byte_curve_document(curves: list[Any]) -> list[dict[str, Any]]:  # Any: the JSON output's points
    """Each byte-curve point: its ``bytes`` and each policy's ``hit_ratio`` and ``miss_ratio``."""
    by_bytes = [c for c in curves if c.unit == "bytes"]
    if not by_bytes:
        return []
    return [{"bytes": size, **{c.policy: {"hit_ratio": c.hit_ratios[i], "miss_ratio": 1 - c.hit_ratios[i]}
                                for c in by_bytes}}
            for i, size in enumerate(by_bytes[0].sizes)]


def verified_block(checks: list[Any]) -> Block:
    """Measured beside predicted (``checks``: :class:`~cachemark.analysis.server_size.Verification`)."""
    rows = [[c.server, f"{c.setting:,}", f"{c.predicted:.3f}", f"{c.measured:.3f}", f"{c.difference:+.3f}",
             "yes" if c.within else "NO"] for c in checks]
    notes = ["Each setting configured on a spawned server, the traffic replayed under cache-aside (a get miss "
             "sets the object, sets and deletes as recorded, TTLs kept) and the get hit ratio read from the "
             "server's own counters; predicted: simulated on the clock the replay kept."]
    for c in checks:
        notes += [f"{c.server}: {note}" for note in c.notes]
    return Block("Verified on the real server", [], ["server", "setting", "predicted", "measured", "difference",
                                                     "within 0.02"], rows, notes, left=2)
