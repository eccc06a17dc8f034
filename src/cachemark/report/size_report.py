"""``cachemark size`` as answer blocks: how big, in objects and in each server's bytes, and the curve."""

from __future__ import annotations

from ..analysis.footprint import Footprint
from ..analysis.mrc import Curve
from ..analysis.sizing import ExpectedLatency, SizeAnswer
from .blocks import Block
from .table import fmt_latency

CURVE_SHARES = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def fmt_bytes(value: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f} B"


def fmt_count(value: float) -> str:
    return f"{value:,.0f}"


def answer_block(curve: Curve, answers: list[SizeAnswer], footprints: list[Footprint], source: str,
                 latencies: list[ExpectedLatency] | None = None, latency_label: str = "") -> Block:
    sampled = f", SHARDS-sampled at {curve.sample_rate:g}" if curve.sample_rate < 1 else ""
    lines = [f"{source}: {curve.requests:,} requests over {curve.objects:,.0f} objects; "
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
        if answer.objects is None:
            row = [f"{answer.hit_ratio:.0%}", "unreachable", "-", *["-"] * len(footprints)]
        else:
            row = [f"{answer.hit_ratio:.0%}", fmt_count(answer.objects), f"{answer.share_of_objects:.1%}",
                   *(fmt_bytes(answer.bytes_by_server[fp.server]) for fp in footprints)]
        if latencies:
            row += [fmt_latency(latencies[i].mean_us), fmt_latency(latencies[i].p99_us)]
        rows.append(row)
    notes = []
    if any(a.objects is None for a in answers):
        notes.append("unreachable: first requests of each object miss at any size (cold misses: "
                     f"{curve.miss_ratios[-1]:.1%} of requests at the largest size).")
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
    for share in CURVE_SHARES:
        size = max(1.0, base.objects * share)
        row = [fmt_count(size), f"{share:.1%}", *(f"{c.hit_ratio_at(size):.3f}" for c in curves)]
        if che:
            row.append(f"{che.get(share, float('nan')):.3f}")
        rows.append(row)
    notes = ["Hit ratio by cache size in objects" + (
        f" after {base.warmup:,} requests filled the cache (steady state)." if base.warmup else
        " (cold misses included: the trace's first request of each object misses at every size).")]
    if che:
        notes.append("Che's approximation: the steady-state LRU hit ratio for independent Zipf requests "
                     "(no cold misses), the analytic check on the simulated curve.")
    return Block("Miss-ratio curve", [], columns, rows, notes, left=2)
