"""What going through Dask costs: the same fixed workload run by N agents of a LocalCluster
(``cachemark run --cluster local:N``) and by one process's workers (``cachemark run``), side by side.

Each repeat runs the pair back to back (the order alternates), each a ``cachemark run`` of
its own (so no Dask client shares the single run's process) against its own spawned redis,
and takes the ratio of throughputs (distributed ÷ single); the median of the paired ratios
is the figure. Goal: at most 5 % lower throughput for runs of 10 s or more.

    .venv/bin/python benchmarks/distributed.py --duration 10 --repeats 3 --agents 2 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # run from here: this file's folder (which holds a
# `distributed.py`: this one) must not come first on the commands' sys.path


def run_once(args: argparse.Namespace, cluster: bool, out: Path) -> tuple[float, float]:
    """One ``cachemark run`` (its own process, its own spawned redis): (ops/s, client CPU s)."""
    target = "spawn:redis" + ("?client=engine" if args.engine else "")
    command = [sys.executable, "-m", "cachemark", "run", "-t", target, "--duration", f"{args.duration}s",
               "--warmup", "1s", "--workers", str(args.workers), "--keys", "10000", "--value-size", "100",
               "--mix", "get=90,set=10", "--no-calibrate", "-o", str(out)]
    if cluster:
        command += ["--cluster", f"local:{args.agents}"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=args.duration * 4 + 180, cwd=ROOT,
                          start_new_session=True)  # each side in a scheduler autogroup of its own
    if proc.returncode != 0:
        raise SystemExit(f"cachemark run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    phase = json.loads(out.read_text())["runs"][0]["phases"][0]
    return sum(op["count"] for op in phase["ops"].values()) / phase["wall_s"], phase["client_cpu_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="total workers (Python path) or connections")
    parser.add_argument("--engine", action="store_true", help="the native engine instead of Python workers")
    args = parser.parse_args()

    print(f"config: {'engine' if args.engine else 'python'} path, {args.workers} workers in all; "
          f"`cachemark run --cluster local:{args.agents}` ({args.agents} agents) vs `cachemark run` (one "
          f"process); {args.duration:g} s closed loop, get 90 / set 10, 10,000 keys, 100-byte values, spawned "
          f"redis on loopback; {args.repeats} paired repeats, order alternating; {os.cpu_count()} CPUs", flush=True)
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            pair = {}
            order = ("single", "dask") if repeat % 2 == 0 else ("dask", "single")
            for side in order:
                started = time.monotonic()
                rate, cpu = run_once(args, side == "dask", Path(tmp) / f"{side}{repeat}.json")
                pair[side] = rate
                print(f"  repeat {repeat + 1} {side:6s}: {rate:10,.0f} ops/s, client CPU {cpu:.1f} s "
                      f"({time.monotonic() - started:.1f} s wall)", flush=True)
            ratios.append(pair["dask"] / pair["single"])
            print(f"  repeat {repeat + 1} ratio dask/single: {ratios[-1]:.3f}", flush=True)
    median = statistics.median(ratios)
    shown = ", ".join(f"{r:.3f}" for r in ratios)
    print(f"median ratio dask/single over {len(ratios)} pairs: {median:.3f} "
          f"({(1 - median) * 100:+.1f} % throughput lost through Dask); ratios {shown}")


if __name__ == "__main__":
    main()
