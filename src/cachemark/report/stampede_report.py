"""A stampede measurement as an answer block: origin calls per expiry and the latency spike."""

from __future__ import annotations

from ..run.stampede import StampedeResult
from .blocks import Block
from .figures import fmt_latency


def stampede_block(target: str, results: list[StampedeResult], rate: float, delta_s: float, ttl_s: float,
                   clients: int) -> Block:
    herd = rate * delta_s
    lines = [f"{target}: one hot key, TTL {ttl_s:g} s, read {rate:g} times/s by {clients} clients; "
             f"the origin takes {delta_s * 1000:g} ms. Unprotected, about λ·Δ = {herd:.1f} clients recompute "
             "at each expiry."]
    rows = []
    for r in results:
        hist = r.latency
        calls = r.calls_per_expiry
        rows.append([r.strategy, f"{r.mean_calls_per_expiry:.2f}", str(max(calls) if calls else 0), str(r.expiries),
                     f"{r.reads:,}", fmt_latency(hist.percentile(50) / 1000), fmt_latency(hist.percentile(99) / 1000),
                     fmt_latency(hist.max / 1000), f"{r.stale_reads:,}", f"{r.errors:,}"])
    for r in results:
        if r.missed and r.missed >= 0.01 * r.scheduled:
            lines.append(f"warning: {r.strategy}: the clients fell behind the rate: {r.missed:,} of {r.scheduled:,} "
                         f"reads due were never sent ({r.missed / r.scheduled:.0%}): fewer clients or a lower rate "
                         "gives a figure of the rate asked for")
    best = min(results, key=lambda r: (r.mean_calls_per_expiry, r.latency.percentile(99)))
    notes = [f"Fewest origin calls per expiry, then the lowest p99: {best.strategy}.",
             "origin calls per expiry: calls grouped into the expiry they answer (a gap of over half a TTL "
             "starts a new group); stale: reads served the old value (or none yet) while one client "
             "recomputed."]
    return Block(f"Stampede: {target}", lines,
                 ["strategy", "origin calls/expiry", "max", "expiries", "reads", "p50", "p99", "max latency",
                  "stale", "errors"], rows, notes)
