"""What an application's client costs per op over the wire floor, and what the driver protocol costs.

Part 1, side by side on one spawned server (redis or memcached, loopback), one connection,
closed loop, get-only on prefilled keys: the native engine (``client=engine``, the wire
floor), the Python client (redis-py / pymemcache) and Rails.cache through the Ruby driver
(``client=ruby-activesupport``). Repeats alternate the order; the figures are medians of
p50 latency and ops/s, and each client's p50 minus the engine's: its per-op overhead.

Part 2, no server at all: the Ruby driver on Rails' ``NullStore`` (a do-nothing client).
Its timed loop is the driver's own floor per op; the protocol's cost is what happens
outside the clock — uploading the op stream, sending results back (17 bytes per op) and
turning them into histograms — per op.

    .venv/bin/python benchmarks/clients.py --ops 20000 --repeats 3 --server redis
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from cachemark.lab import server_class
from cachemark.run.driver import DRIVERS, DriverProcess, op_batch, setup_message, worker_result
from cachemark.run.runner import run_target
from cachemark.spec import Workload
from cachemark.target import parse_target


def one_run(url: str, ops: int) -> tuple[float, float]:
    """(p50 µs, ops/s) of a get-only, one-worker run."""
    workload = Workload(keys=1000, key_dist="uniform", value_size=100, mix={"get": 1}, ops=ops, workers=1,
                        warmup_ops=min(ops, 2000))
    outcome = run_target(url, workload, sample_server=False)
    if outcome.status != "ok":
        raise SystemExit(f"{url}: {outcome.status}: {outcome.reason}")
    summary = outcome.phases[0]["ops"]["get"]["summary"]
    return summary["p50_us"], summary["ops_per_s"]


def clients(args: argparse.Namespace) -> None:
    server = server_class(args.server)().start()
    python = "redis-py" if args.server == "redis" else "pymemcache"
    try:
        base = server.url()
        sep = "&" if "?" in base else "?"
        urls = {"engine": f"{base}{sep}client=engine&connections=1&threads=1", python: f"{base}{sep}client={python}",
                "ruby-activesupport": f"{base}{sep}client=ruby-activesupport"}
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in urls}
        for repeat in range(args.repeats):
            order = list(urls) if repeat % 2 == 0 else list(reversed(urls))
            for name in order:
                figures[name].append(one_run(urls[name], args.ops))
    finally:
        server.stop()
    floor = statistics.median(p for p, _ in figures["engine"])
    print(f"part 1: {args.server}, get-only, 100-byte values, 1 connection, {args.ops:,} ops, "
          f"{args.repeats} repeats (medians)")
    print(f"  {'client':<20} {'p50 µs':>8} {'ops/s':>9} {'p50 over engine':>16}")
    for name, rows in figures.items():
        p50 = statistics.median(p for p, _ in rows)
        rate = statistics.median(r for _, r in rows)
        print(f"  {name:<20} {p50:>8.1f} {rate:>9,.0f} {p50 - floor:>+13.1f} µs")


def protocol(args: argparse.Namespace) -> None:
    target = parse_target("memcached://127.0.0.1:1")  # never connected: the driver runs NullStore
    workload = Workload(keys=1000, key_dist="uniform", value_size=100, mix={"get": 1}, ops=args.ops, workers=1)
    phase = workload.effective_phases()[0]
    driver = DriverProcess(DRIVERS["ruby-activesupport"], 0)
    rows = []
    try:
        driver.recv(30)
        driver.request(dict(setup_message(target, workload, f"cm:{uuid.uuid4().hex[:8]}:", 0), scheme="null"),
                       expect="ready")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            batch = op_batch(workload, phase, 0, "timed", args.ops, None, None)
            t1 = time.perf_counter()
            driver.request({"type": "ops", "entries": [["get"]], "count": args.ops, "schedule": False},
                           batch.blob(), expect="loaded")
            t2 = time.perf_counter()
            reply, blob = driver.request({"type": "go", "verify_reads": 0.0, "verify_writes": 0.0}, expect="done")
            t3 = time.perf_counter()
            worker_result(["get"], batch, reply, blob)
            t4 = time.perf_counter()
            loop = reply["wall_ns"] / 1e9
            rows.append(((t1 - t0), (t2 - t1), loop, (t3 - t2) - loop, (t4 - t3)))
    finally:
        driver.close()
    per_op = [statistics.median(r[i] for r in rows) / args.ops * 1e9 for i in range(5)]
    print(f"part 2: ruby-activesupport on NullStore, {args.ops:,} get ops, {args.repeats} repeats (medians, ns per op)")
    for label, value in zip(("generate ops (Python)", "upload ops (ops → loaded)", "timed loop (NullStore#read)",
                             "results back (after the loop → done)", "histograms (Python)"), per_op, strict=True):
        print(f"  {label:<38} {value:>8.0f}")
    outside = per_op[0] + per_op[1] + per_op[3] + per_op[4]
    print(f"  {'protocol, all outside the clock':<38} {outside:>8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--server", choices=["redis", "memcached"], default="redis")
    args = parser.parse_args()
    protocol(args)
    clients(args)


if __name__ == "__main__":
    main()
