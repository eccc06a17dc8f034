"""What an application's client costs per op over the wire floor, and what the driver protocol costs.

Part 1, side by side on one spawned server (redis or memcached, loopback), one connection,
closed loop, get-only on prefilled keys: the native engine (``client=engine``, the wire
floor), the Python client (redis-py / pymemcache) and every driver of another stack that
serves the server and is installed (Rails.cache, Symfony Cache, Node, Java, Go clients;
docs/drivers.md). Repeats rotate the order; the figures are medians of p50 latency and
ops/s, each client's p50 minus the engine's (its per-op overhead) and the ratio of the two.

Part 2, no server at all: each driver on its do-nothing client (``scheme: null``: Rails'
``NullStore``, and each other driver's own). Its timed loop is the driver's own floor per
op (the harness overhead the issue bounds: ≤ 1 µs compiled, ≤ 5 µs Ruby/PHP/Node); the
protocol's cost is what happens outside the clock — uploading the op stream, sending results
back (17 bytes per op) and turning them into histograms — per op.

    .venv/bin/python benchmarks/clients.py --ops 20000 --repeats 3 --server redis
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from cachemark.errors import BackendMissing
from cachemark.lab import server_class
from cachemark.run.driver import (
    DRIVERS,
    DriverFailed,
    DriverProcess,
    DriverSpec,
    PhaseTally,
    op_batch,
    setup_message,
)
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
    summary = outcome.phases[0].ops["get"].summary
    return summary.p50_us, summary.ops_per_s


def installed(server: str | None = None) -> list[DriverSpec]:
    """The drivers that can start here (and serve ``server``'s scheme); one line for each that cannot."""
    found = []
    for spec in DRIVERS.values():
        if server is not None and server not in spec.schemes:
            continue
        try:
            spec.command()
        except BackendMissing as exc:
            print(f"  (skipped: {exc})")
            continue
        found.append(spec)
    return found


def clients(args: argparse.Namespace) -> None:
    server = server_class(args.server)().start()
    python = "redis-py" if args.server == "redis" else "pymemcache"
    try:
        base = server.url()
        sep = "&" if "?" in base else "?"
        urls = {"engine": f"{base}{sep}client=engine&connections=1&threads=1", python: f"{base}{sep}client={python}"}
        urls |= {spec.name: f"{base}{sep}client={spec.name}" for spec in installed(args.server)}
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in urls}
        for repeat in range(args.repeats):
            names = list(urls)
            order = names[repeat % len(names):] + names[:repeat % len(names)]
            for name in order:
                figures[name].append(one_run(urls[name], args.ops))
    finally:
        server.stop()
    floor = statistics.median(p for p, _ in figures["engine"])
    print(f"part 1: {args.server}, get-only, 100-byte values, 1 connection, {args.ops:,} ops, "
          f"{args.repeats} repeats (medians)")
    print(f"  {'client':<20} {'p50 µs':>8} {'ops/s':>9} {'p50 over engine':>16} {'÷ engine':>9}")
    for name, rows in figures.items():
        p50 = statistics.median(p for p, _ in rows)
        rate = statistics.median(r for _, r in rows)
        print(f"  {name:<20} {p50:>8.1f} {rate:>9,.0f} {p50 - floor:>+13.1f} µs {p50 / floor:>8.2f}×")


def protocol_of(spec: DriverSpec, args: argparse.Namespace) -> list[float]:
    """ns per op: generate, upload, the timed loop, results back, histograms (medians of the repeats)."""
    target = parse_target("memcached://127.0.0.1:1")  # never connected: the driver runs its null client
    workload = Workload(keys=1000, key_dist="uniform", value_size=100, mix={"get": 1}, ops=args.ops, workers=1)
    phase = workload.effective_phases()[0]
    driver = DriverProcess(spec, 0)
    rows = []
    try:
        driver.recv(30)
        driver.request(dict(setup_message(target, workload, f"cm:{uuid.uuid4().hex[:8]}:", 0), scheme="null"),
                       expect="ready")
        for _ in range(args.repeats + 1):  # the first is the warm-up (a JIT's)
            t0 = time.perf_counter()
            batch = op_batch(workload, phase, 0, "timed", args.ops, None, None)
            t1 = time.perf_counter()
            driver.request({"type": "ops", "entries": [["get"]], "count": args.ops, "schedule": False},
                           batch.blob(), expect="loaded")
            t2 = time.perf_counter()
            reply, blob = driver.request({"type": "go", "verify_reads": 0.0, "verify_writes": 0.0}, expect="done")
            t3 = time.perf_counter()
            tally = PhaseTally(["get"], open_loop=False)
            tally.fold(batch, reply, blob)
            tally.result(reply)
            t4 = time.perf_counter()
            loop = reply["wall_ns"] / 1e9
            rows.append(((t1 - t0), (t2 - t1), loop, (t3 - t2) - loop, (t4 - t3)))
    finally:
        driver.close()
    return [statistics.median(r[i] for r in rows[1:]) / args.ops * 1e9 for i in range(5)]


def protocol(args: argparse.Namespace) -> None:
    print(f"part 2: each driver on its do-nothing client, {args.ops:,} get ops, {args.repeats} repeats after one "
          "warm-up (medians, ns per op)")
    specs = installed()
    print(f"  {'driver':<20} {'timed loop':>10} {'generate':>9} {'upload':>8} {'results':>8} {'histograms':>10} "
          f"{'protocol':>9}")
    for spec in specs:
        try:
            generate, upload, loop, back, histograms = protocol_of(spec, args)
        except DriverFailed as exc:
            print(f"  {spec.name:<20} failed: {exc}")
            continue
        print(f"  {spec.name:<20} {loop:>10,.0f} {generate:>9,.0f} {upload:>8,.0f} {back:>8,.0f} {histograms:>10,.0f} "
              f"{generate + upload + back + histograms:>9,.0f}")
    print("  timed loop: the driver's own floor per op (the clock runs); the rest is outside the clock")


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
