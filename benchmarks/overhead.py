"""The harness's own cost per op: cachemark's timed loop vs a bare timing loop.

Both drive the do-nothing ``null://`` backend in this one process, side by side,
repeated; printed as ops/s and as a ratio. Goal: >= 1,000,000 timed ops/s through
cachemark's loop (op choice, key choice, timing, recording, verification sampling).

    python benchmarks/overhead.py [--ops 2000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from cachemark.backends import create_backend
from cachemark.run.worker import Worker, WorkerTask
from cachemark.spec import Workload
from cachemark.target import parse_target


def bare_loop(ops: int) -> float:
    """The floor: time one call per op, keep the latency in a list, nothing else."""
    backend = create_backend(parse_target("null://"), "cm:bench:")
    get, perf = backend.get, time.perf_counter_ns
    latencies: list[int] = []
    append = latencies.append
    key = "cm:bench:1"
    start = perf()
    for _ in range(ops):
        t0 = perf()
        get(key)
        append(perf() - t0)
    return ops / ((perf() - start) / 1e9)


def cachemark_loop(ops: int, mix: str, url: str) -> float:
    workload = Workload(keys=10_000, mix=mix, ops=ops, duration=None, warmup=0, workers=1, prefill=False)
    task = WorkerTask(parse_target(url), "cm:bench:", workload.model_dump(), 0, 1)
    worker = Worker(task)
    worker.backend.open()
    phase = workload.effective_phases()[0]
    start = time.perf_counter_ns()
    recorder = worker.run_phase(phase, ops, None)
    recorder.result()  # histograms and encoding count as harness cost too
    return ops / ((time.perf_counter_ns() - start) / 1e9)


def recording_cost(values: int = 1_000_000, repeat: int = 5) -> list[tuple[str, float]]:
    """ns per latency to turn the loop's list into histogram counts: numpy (used) vs the Rust Histogram."""
    import numpy as np

    from cachemark.engine import Histogram as RustHistogram
    from cachemark.measure.histogram import Histogram

    latencies = np.random.default_rng(1).integers(1_000, 10_000_000, size=values, dtype=np.int64).tolist()
    cases = [
        ("numpy bucket + bincount", lambda: Histogram().record_array(np.asarray(latencies, dtype=np.int64))),
        ("Rust Histogram.record_many", lambda: RustHistogram().record_many(latencies)),
    ]
    out = []
    for name, fn in cases:
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter_ns()
            fn()
            best = min(best, (time.perf_counter_ns() - start) / values)
        out.append((name, best))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cases = [
        ("bare loop (null get)", lambda: bare_loop(args.ops)),
        ("cachemark get=100, null miss", lambda: cachemark_loop(args.ops, "get=100", "null://")),
        ("cachemark get=100, null hit *", lambda: cachemark_loop(args.ops, "get=100", "null://?hit=true")),
        ("cachemark get=90,set=9,delete=1", lambda: cachemark_loop(args.ops, "get=90,set=9,delete=1", "null://")),
    ]
    print(f"config: 1 process, {args.ops:,} ops per measurement, median of {args.repeat}, interleaved")
    samples: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(args.repeat):
        for name, fn in cases:
            samples[name].append(fn())
    base = statistics.median(samples[cases[0][0]])
    print(f"{'case':36} {'ops/s':>12} {'ns/op':>8} {'vs bare':>8}")
    for name, _ in cases:
        rate = statistics.median(samples[name])
        print(f"{name:36} {rate:12,.0f} {1e9 / rate:8.0f} {rate / base:8.2f}")
    worst = min(statistics.median(samples[name]) for name, _ in cases[1:])
    print(f"goal >= 1,000,000 timed ops/s: {'met' if worst >= 1_000_000 else 'NOT met'} ({worst:,.0f})")
    print("* null's constant value fails the 1-in-16 read verification, so this row also pays the error path")
    print("recording (per latency, best of 5; the numpy path also sorts by op and outcome in the same pass):")
    for name, ns in recording_cost():
        print(f"  {name:30} {ns:6.1f} ns")


if __name__ == "__main__":
    main()
