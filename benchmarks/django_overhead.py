"""What going through Django's cache API costs, against the direct client, side by side.

For Redis and memcached on local private servers, the same seeded workload runs through
``redis://`` / ``memcached://`` (redis-py, pymemcache) and through the matching Django
backend (RedisCache, PyMemcacheCache): one in-process worker, interleaved repeats,
medians; printed as ops/s, p50 and the Django/direct ratios.

    python benchmarks/django_overhead.py [--ops 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from cachemark.lab import spawn_server
from cachemark.measure.histogram import Histogram
from cachemark.run.worker import Worker, WorkerTask
from cachemark.spec import Workload
from cachemark.target import parse_target


def measure(url: str, ops: int, seed: int) -> tuple[float, float]:
    """(ops/s, p50 µs) of one in-process worker running get=90,set=10 on 1,000 keys."""
    workload = Workload(keys=1000, mix="get=90,set=10", value_size=200, ops=ops, duration=None, warmup=0,
                        workers=1, seed=seed)
    worker = Worker(WorkerTask(parse_target(url), f"cm:bench{seed}:", workload.model_dump(), 0, 1))
    worker.backend.open()
    worker.prefill()
    start = time.perf_counter()
    recorder = worker.run_phase(workload.effective_phases()[0], ops, None)
    elapsed = time.perf_counter() - start
    result = recorder.result()
    worker.backend.clear_namespace([f"cm:bench{seed}:{i}" for i in range(1000)])
    worker.backend.close()
    hist = Histogram()
    for op in result.values():
        for encoded in op["histograms"].values():
            hist.add(Histogram.decode(encoded))
    return ops / elapsed, hist.percentile(50) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with spawn_server("redis") as redis, spawn_server("memcached") as memcached:
        mc = memcached.url().removeprefix("memcached://")
        pairs = [
            ("redis", redis.url(), f"django://?BACKEND=redis&LOCATION={redis.url()}"),
            ("memcached", memcached.url(), f"django://?BACKEND=pymemcache&LOCATION={mc}"),
        ]
        print(f"config: 1 in-process worker, get=90,set=10, 1,000 keys, 200 B values, {args.ops:,} ops, "
              f"median of {args.repeat} interleaved repeats, private servers on 127.0.0.1")
        samples: dict[str, list[tuple[float, float]]] = {}
        for repeat in range(args.repeat):
            for name, direct, django in pairs:
                samples.setdefault(f"{name} direct", []).append(measure(direct, args.ops, repeat))
                samples.setdefault(f"{name} django", []).append(measure(django, args.ops, repeat))
    print(f"{'path':18} {'ops/s':>10} {'p50':>9}")
    medians = {}
    for name, values in samples.items():
        rate = statistics.median(v[0] for v in values)
        p50 = statistics.median(v[1] for v in values)
        medians[name] = (rate, p50)
        print(f"{name:18} {rate:10,.0f} {p50:8.1f}µs")
    for name, _, _ in pairs:
        (d_rate, d_p50), (j_rate, j_p50) = medians[f"{name} direct"], medians[f"{name} django"]
        print(f"{name}: django/direct throughput {j_rate / d_rate:.2f}x, p50 {j_p50 / d_p50:.2f}x "
              f"(+{j_p50 - d_p50:.1f}µs per op through Django)")


if __name__ == "__main__":
    main()
