"""Speed of the miss-ratio-curve simulator: requests per second, exact LRU and SHARDS, one core.

    python benchmarks/mrc_speed.py [--requests 10000000] [--objects 1000000] [--repeat 3]

The stream (squared-uniform ids: a skewed popularity, like a Zipf head) is drawn once, as
u64 little-endian bytes in 1 M-request chunks, as `cachemark size` feeds it; only the
simulator's `feed` calls are timed. Also prints the peak RSS growth, to show memory follows
the objects kept (SHARDS keeps ~rate × objects, beside its fixed exact stack and denser
samples), not the requests. Goal (issues 14 and 34): ≥ 10 M requests/s for SHARDS at 0.01.
"plain" is SHARDS-adj alone (no exact near stack, no denser samples: what `size` ran before
issue 34), for the price of the exactness at small sizes.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import numpy as np
from cachemark._engine import PolicySim, StackDistances


def _chunks(requests: int, objects: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out, left = [], requests
    while left:
        n = min(left, 1 << 20)
        out.append((rng.random(n) ** 2 * objects).astype("<u8").tobytes())
        left -= n
    return out


def _rate(make, chunks: list[bytes], requests: int) -> float:
    sim = make()
    start = time.perf_counter()
    for chunk in chunks:
        sim.feed(chunk)
    return requests / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10_000_000)
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    chunks = _chunks(args.requests, args.objects, 1)
    print(f"{args.requests:,} requests over up to {args.objects:,} objects, 1 thread, median of {args.repeat}")
    cases = {
        "LRU exact": lambda: StackDistances(1.0),
        "LRU SHARDS 0.01": lambda: StackDistances(0.01),
        "LRU SHARDS 0.001": lambda: StackDistances(0.001),
        "LRU SHARDS 0.01 plain": lambda: StackDistances(0.01, near=0),
        "FIFO at 1 size": lambda: PolicySim("fifo", [args.objects // 10]),
        "SIEVE at 1 size": lambda: PolicySim("sieve", [args.objects // 10]),
    }
    for name, make in cases.items():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rates = [_rate(make, chunks, args.requests) for _ in range(args.repeat)]
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        print(f"{name:22} {statistics.median(rates) / 1e6:7.1f} M requests/s   "
              f"(runs: {', '.join(f'{r / 1e6:.1f}' for r in rates)}; peak RSS grew {grown:,.0f} MiB)")


if __name__ == "__main__":
    main()
