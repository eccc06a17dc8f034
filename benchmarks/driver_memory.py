"""A long phase through a driver takes the memory of a short one: peak RSS against the phase's length.

One phase of N gets runs through each installed driver's do-nothing client (``scheme: null``), fed by
cachemark's own loop (run/driver.py's ``_go``) in segments, as a replay's share or a long open-loop
schedule is (docs/drivers.md, "Segments and parts"). Each length runs in a fresh process, which prints
its own peak RSS and the driver's (VmHWM: each process's own), so one run's figures never carry into
the next's.

    .venv/bin/python benchmarks/driver_memory.py --requests 200000,2000000 [--driver go-redis …]

``--one NAME N`` runs one phase and prints "ops cachemark_bytes driver_bytes ns_per_op"
(tests/test_driver_conformance.py uses it).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

KEYS = 100_000


def _peak(pid: int | str) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def one_phase(name: str, requests: int) -> tuple[int, int, int, float]:
    """Ops counted, this process's peak RSS and the driver's, and the phase's wall time per op (ns: the
    driver's loop, the segments fed, the parts folded), for one phase of ``requests`` gets."""
    import numpy as np

    from cachemark.run import driver as d
    from cachemark.spec import Workload
    from cachemark.target import parse_target

    load = Workload(keys=KEYS, key_dist="uniform", value_size=100, mix={"get": 1}, workers=1, warmup=0)
    proc = d.DriverProcess(d.DRIVERS[name], 0)
    try:
        proc.recv(60)
        setup = d.setup_message(parse_target(f"redis://127.0.0.1:1?client={name}"), load, "cm:00000000:", 0)
        proc.request(dict(setup, scheme=None), expect="ready")

        def segments():
            for start in range(0, requests, d.SEGMENT_OPS):
                n = min(d.SEGMENT_OPS, requests - start)
                keys = (np.arange(start, start + n) % KEYS).astype("<u4")
                yield np.zeros(n, "u1"), keys, np.full(n, 100, "<u4"), None

        t0 = time.perf_counter()
        [(done, tally)] = d._go([proc], [d.OpFeed(segments(), cycle=False)], ["get"], load, None)
        ops, _ = tally.result(done)
        per_op = (time.perf_counter() - t0) / requests * 1e9
        return ops["get"].count, _peak("self"), _peak(proc.proc.pid), per_op
    finally:
        proc.close()


def measure(name: str, requests: int, env: dict[str, str] | None = None) -> tuple[int, int, int, float]:
    """:func:`one_phase` in a fresh process."""
    result = subprocess.run([sys.executable, str(Path(__file__)), "--one", name, str(requests)], capture_output=True,
                            text=True, timeout=600, env=env)
    if result.returncode != 0:
        raise RuntimeError(result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed")
    count, own, driver, per_op = result.stdout.split()
    return int(count), int(own), int(driver), float(per_op)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", default="200000,2000000", help="phase lengths, comma-separated")
    parser.add_argument("--driver", action="append", help="a driver (default: every installed one)")
    parser.add_argument("--one", nargs=2, metavar=("NAME", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(*one_phase(args.one[0], int(args.one[1])))
        return
    from cachemark.run.driver import DRIVERS

    lengths = [int(n) for n in args.requests.split(",")]
    print(f"  {'driver':<20} {'requests':>12} {'cachemark MiB':>14} {'driver MiB':>11} {'ns/op':>7}")
    for name in args.driver or list(DRIVERS):
        for n in lengths:
            try:
                count, own, driver, per_op = measure(name, n)
            except RuntimeError as exc:
                print(f"  {name:<20} not run: {exc}")
                break
            assert count == n, (count, n)
            print(f"  {name:<20} {n:>12,} {own / 2**20:>14.1f} {driver / 2**20:>11.1f} {per_op:>7,.0f}")


if __name__ == "__main__":
    main()
