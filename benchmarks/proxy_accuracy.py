"""How faithfully the network proxy adds the latency it is asked to add, by default and busy-polling.

For added round trips of 0, 0.2, 1 and 5 ms (split evenly up/down) this measures, against
a private echo server, round trips direct and through the proxy, interleaved on one
connection each, in several short rounds (the machine is shared, so one unlucky burst
of load should spoil one round, not the answer). Each round measures the proxy twice,
side by side: in its default mode (awake between segments only for as long as they have
lately followed each other, and only with a core to spare) and with the opt-in fixed busy-poll
window (``busy_poll_us``, ``--poll``), alternating which goes first. The proxy busy-polls
only while nothing is delayed, so for the delayed cases the second mode is an A/A control. It prints the added
RTT p50/p99 of both next to the configured value and the goal (p50 within ±5 % or ±30 µs,
whichever is larger; zero-delay overhead under 50 µs p50), and the proxy's own overhead
next to toxiproxy's published figures.

    .venv/bin/python benchmarks/proxy_accuracy.py            # ~40 s
    .venv/bin/python benchmarks/proxy_accuracy.py --rounds 3 --poll 100 --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys

from cachemark.lab.proxy import measure_added_latency, release_late_quantile

# Round trips (µs) and the samples per round that keep each round well under 2 s.
CASES = [(0, 1500), (200, 1000), (1000, 500), (5000, 150)]
DEFAULT_POLL_US = 200
TOXIPROXY_README_US = 100  # "you can expect a latency of < 100µs when no toxics are enabled"
TOXIPROXY_BRIEF_US = 1200  # the ~1.2 ms figure quoted in cachemark's issue


def tolerance_us(configured: float) -> float:
    return max(0.05 * configured, 30.0)


def _edge(label: str) -> float:
    digits = "".join(c for c in label if c.isdigit())
    return float(digits or 0) + (0.5 if label.startswith(">") else 0)


def _row(rtt: float, mode: str, config: dict, per_round: list[dict]) -> dict:
    added_p50 = statistics.median(r["added_p50"] for r in per_round)
    added_p99 = statistics.median(r["added_p99"] for r in per_round)
    return {
        "configured_us": rtt,
        "mode": mode,
        "config": config,
        "added_p50_us": added_p50,
        "added_p99_us": added_p99,
        "added_p50_rounds_us": [round(r["added_p50"], 1) for r in per_round],
        "direct_p50_us": statistics.median(r["direct_p50"] for r in per_round),
        "direct_p99_us": statistics.median(r["direct_p99"] for r in per_round),
        "proxy_release_error_mean_us": statistics.median(
            r["proxy_stats"]["release_error_mean_ns"] / 1000 for r in per_round
        ),
        "proxy_release_late_p99": max(
            (release_late_quantile(r["proxy_stats"]) for r in per_round), key=_edge, default=""
        ),
        "tolerance_us": tolerance_us(rtt),
        "within_goal": (added_p50 < 50) if rtt == 0 else abs(added_p50 - rtt) <= tolerance_us(rtt),
        "samples": sum(r["samples"] for r in per_round),
    }


def run(rounds: int, threads: int, poll_us: float) -> tuple[list[dict], list[float]]:
    """The rows, and the 1-minute load average read at the start of every round (the
    machine is shared: a figure means little without the load it was taken under)."""
    rows = []
    loads = []
    for rtt, samples in CASES:
        base = {"delay_up_us": rtt / 2, "delay_down_us": rtt / 2}
        modes = {"default": dict(base), "busy-poll": dict(base, busy_poll_us=poll_us)}
        results: dict[str, list[dict]] = {m: [] for m in modes}
        for i in range(rounds):
            loads.append(os.getloadavg()[0])
            # Interleave the modes, alternating which goes first, so drift in the
            # machine's state hits both alike.
            order = list(modes) if i % 2 == 0 else list(reversed(modes))
            for mode in order:
                results[mode].append(measure_added_latency(modes[mode], samples=samples, warmup=100, threads=threads))
        rows.extend(_row(rtt, mode, modes[mode], results[mode]) for mode in modes)
    return rows, loads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="proxy runtime worker threads")
    parser.add_argument(
        "--poll", type=float, default=DEFAULT_POLL_US, help="busy-poll window (µs) for the busy-poll mode"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args()

    rows, loads = run(args.rounds, args.threads, args.poll)
    print(
        f"proxy accuracy: {args.rounds} rounds per delay, 16-byte echo, 1 connection, "
        f"proxy threads={args.threads}, {os.cpu_count()} CPUs, load average {min(loads):.2f}–{max(loads):.2f} "
        f"(read at each round), {platform.platform()}"
    )
    print(
        f"modes, interleaved per round: default = {{delay_up_us, delay_down_us}} (adaptive spinning); "
        f"busy-poll = the same plus busy_poll_us={args.poll:g}"
    )
    print(
        "(the proxy spins only while nothing is delayed, so the delayed busy-poll rows run the "
        "default code path: they are an A/A control for the run's noise)"
    )
    print(
        f"{'configured RTT':>15} {'mode':>9} {'added p50':>10} {'added p99':>10} {'goal':>9} {'ok':>3} "
        f"{'direct p50':>11} {'proxy late p99':>14}  per-round p50"
    )
    for r in rows:
        goal = "<50" if r["configured_us"] == 0 else f"±{r['tolerance_us']:.0f}"
        print(
            f"{r['configured_us']:>12.0f} µs {r['mode']:>9} {r['added_p50_us']:>7.1f} µs {r['added_p99_us']:>7.1f} µs "
            f"{goal:>6} µs {'yes' if r['within_goal'] else 'NO':>3} {r['direct_p50_us']:>8.1f} µs "
            f"{r['proxy_release_late_p99'] or '-':>14}  "
            f"{r['added_p50_rounds_us']}"
        )
    for mode in ("default", "busy-poll"):
        zero = next(r for r in rows if r["configured_us"] == 0 and r["mode"] == mode)
        met = sum(r["within_goal"] for r in rows if r["mode"] == mode)
        total = sum(1 for r in rows if r["mode"] == mode)
        print(
            f"{mode:>9}: {met}/{total} goals met; zero-delay overhead p50 {zero['added_p50_us']:.1f} µs = "
            f"{zero['added_p50_us'] / TOXIPROXY_BRIEF_US:.1%} of the ~1.2 ms quoted for toxiproxy, "
            f"{zero['added_p50_us'] / TOXIPROXY_README_US:.0%} of toxiproxy README's '< 100 µs' bound"
        )
    print(f"direct loopback RTT p50 during the run: {rows[0]['direct_p50_us']:.1f} µs")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0 if all(r["within_goal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
