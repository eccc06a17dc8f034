"""Speed of the miss-ratio-curve simulator: requests per second, exact LRU and SHARDS, one core.

    python benchmarks/mrc_speed.py [--requests 10000000] [--objects 1000000] [--repeat 3]
    python benchmarks/mrc_speed.py --against /path/to/old/_engine.abi3.so --repeat 5

The stream (squared-uniform ids: a skewed popularity, like a Zipf head) is drawn once, as
u64 little-endian bytes in 1 M-request chunks, as `cachemark size` feeds it; only the
simulator's `feed` calls are timed. Also prints the peak RSS growth, to show memory follows
the objects kept (SHARDS keeps ~rate × objects, beside its fixed exact stack and denser
samples), not the requests. Goals: ≥ 10 M requests/s for SHARDS at 0.01 (issues 14 and 34)
and for exact LRU at 10⁶ objects. "plain" is SHARDS-adj alone (no exact near stack, no
denser samples: what `size` ran before issue 34), for the price of the exactness at small sizes.

`--against` loads another build of the extension from its file, beside this one, and runs
the two alternately (old, new, then new, old, ...): on a shared, noisy VM a single run moves
more than most changes, so the figure to quote is the median of the paired ratios new/old.
Peak RSS growth is then measured in a fresh child process per build and case (one process's
peak would mix the two builds): the peak above the one drawing the stream left, so a
simulator smaller than numpy's transient arrays reads 0. `--clock cpu` times the process's
CPU (the feeding thread and the threads a feed spawns) instead of the wall clock: steadier
while other work shares the cores.
`--only TEXT` runs the cases whose name contains TEXT ("LRU exact, sizes": sizes differ, so
the byte curve needs the exact bytes above each object).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's BLAS threads would spin beside the timed thread

import argparse
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import time
from types import ModuleType

import cachemark._engine as new_engine
import numpy as np


def _chunks(requests: int, objects: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out, left = [], requests
    while left:
        n = min(left, 1 << 20)
        out.append((rng.random(n) ** 2 * objects).astype("<u8").tobytes())
        left -= n
    return out


def _load(path: str) -> ModuleType:
    """Another build of `cachemark._engine`, from its file, under a name of its own (its init
    function is still `PyInit__engine`, so the last part of the name stays `_engine`)."""
    spec = importlib.util.spec_from_file_location("cachemark_against._engine", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load an extension module from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases(engine: ModuleType, objects: int) -> dict:
    return {
        "LRU exact": lambda: engine.StackDistances(1.0),
        "LRU exact, sizes": lambda: _Sized(engine.StackDistances(1.0)),
        "LRU SHARDS 0.01": lambda: engine.StackDistances(0.01),
        "LRU SHARDS 0.001": lambda: engine.StackDistances(0.001),
        "LRU SHARDS 0.01 plain": lambda: engine.StackDistances(0.01, near=0),
        "FIFO at 1 size": lambda: engine.PolicySim("fifo", [objects // 10]),
        "SIEVE at 1 size": lambda: engine.PolicySim("sieve", [objects // 10]),
        # byte-capacity caches under the ops (size's and decide's servers): gets, a tenth of the bytes
        "LRU by bytes, ops": lambda: _Ops(engine.OpsSim("lru", [objects // 10 * 5_050])),
        "Redis LRU by bytes, ops": lambda: _Ops(engine.OpsSim("redis", [objects // 10 * 5_050])),
    }


class _Ops:
    """Feeds an OpsSim the chunk as gets 100 µs apart, each object its own size (100 B to 10 kB)."""

    def __init__(self, sim) -> None:
        self.sim = sim

    def feed(self, chunk: bytes) -> None:
        self.sim.feed(*_OPS[id(chunk)])


class _Sized:
    """Feeds each chunk with a size per request (100 B to 10 kB, the object's own): the byte
    curve then needs the exact bytes above each object, not count × size."""

    def __init__(self, sim) -> None:
        self.sim = sim

    def feed(self, chunk: bytes) -> None:
        self.sim.feed(chunk, _sizes(chunk))


_SIZES: dict[int, bytes] = {}


def _sizes(chunk: bytes) -> bytes:
    """The sizes of a chunk's objects (drawn by `_draw_sizes`, before any timed feed)."""
    return _SIZES[id(chunk)]


_OPS: dict[int, tuple[bytes, ...]] = {}


def _draw_sizes(chunks: list[bytes]) -> None:
    start = 0
    for chunk in chunks:
        ids = np.frombuffer(chunk, dtype="<u8")
        _SIZES[id(chunk)] = (100 + (ids * 0x9E3779B97F4A7C15 >> np.uint64(40)) % 9_900).astype("<u4").tobytes()
        n = len(ids)
        t_us = (np.arange(start, start + n, dtype="<i8") * 100).tobytes()
        _OPS[id(chunk)] = (t_us, bytes(n), chunk, _SIZES[id(chunk)], bytes(8 * n))  # op 0: get; no TTL
        start += n


# cpu: the process's CPU time, so that the threads OpsSim.feed spawns count (the feeding thread's
# own time left them out: the byte-capacity cases read 3x too fast); nothing else runs meanwhile
_CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = _CLOCKS["wall"]


def _rate(make, chunks: list[bytes], requests: int) -> float:
    sim = make()
    start = _clock()
    for chunk in chunks:
        sim.feed(chunk)
    return requests / (_clock() - start)


def _peak_growth_mib(path: str | None, case: str, args) -> float:
    """Peak RSS growth of one run of `case`, in a fresh process (the build at `path`, or this one)."""
    argv = [sys.executable, __file__, "--child-memory", case, "--requests", str(args.requests),
            "--objects", str(args.objects)]
    if path:
        argv += ["--against", path]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["grown_mib"]


def _high_water_kib() -> int:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, a child's does not start at its parent's)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def _child_memory(args) -> None:
    engine = _load(args.against) if args.against else new_engine
    chunks = _chunks(args.requests, args.objects, 1)
    _draw_sizes(chunks)
    make = _cases(engine, args.objects)[args.child_memory]
    before = _high_water_kib()
    _rate(make, chunks, args.requests)
    print(json.dumps({"grown_mib": (_high_water_kib() - before) / 1024}))


def _alone(args, chunks: list[bytes]) -> None:
    print(f"{args.requests:,} requests over up to {args.objects:,} objects, 1 thread, median of {args.repeat}")
    for name, make in _cases(new_engine, args.objects).items():
        if args.only not in name:
            continue
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rates = [_rate(make, chunks, args.requests) for _ in range(args.repeat)]
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        print(f"{name:22} {statistics.median(rates) / 1e6:7.1f} M requests/s   "
              f"(runs: {', '.join(f'{r / 1e6:.1f}' for r in rates)}; peak RSS grew {grown:,.0f} MiB)")


def _paired(args, chunks: list[bytes]) -> None:
    old_cases = _cases(_load(args.against), args.objects)
    new_cases = _cases(new_engine, args.objects)
    print(f"{args.requests:,} requests over up to {args.objects:,} objects, 1 thread; "
          f"old = {args.against}, new = this build; {args.repeat} pairs, alternating order; medians; "
          f"{args.clock} clock")
    print(f"{'case':22} {'old M/s':>8} {'new M/s':>8} {'new/old':>8}  {'pairs':24} {'RSS old':>8} {'RSS new':>8}")
    for name in (n for n in new_cases if args.only in n):
        old, new = [], []
        for i in range(args.repeat):
            order = [(old, old_cases[name]), (new, new_cases[name])]
            for rates, make in order if i % 2 == 0 else order[::-1]:
                rates.append(_rate(make, chunks, args.requests))
        ratios = [n / o for n, o in zip(new, old)]
        rss_old = _peak_growth_mib(args.against, name, args)
        rss_new = _peak_growth_mib(None, name, args)
        print(f"{name:22} {statistics.median(old) / 1e6:8.1f} {statistics.median(new) / 1e6:8.1f} "
              f"{statistics.median(ratios):8.2f}  {', '.join(f'{r:.2f}' for r in ratios):24} "
              f"{rss_old:6,.0f} MiB {rss_new:4,.0f} MiB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10_000_000)
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", metavar="OLD_SO", help="another build's _engine .so to compare with, side by side")
    parser.add_argument("--clock", choices=list(_CLOCKS), default="wall",
                        help="cpu: the process's CPU time (steadier when other work shares the cores)")
    parser.add_argument("--only", metavar="TEXT", default="", help="run only the cases whose name contains TEXT")
    parser.add_argument("--child-memory", metavar="CASE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global _clock
    _clock = _CLOCKS[args.clock]
    if args.child_memory:
        return _child_memory(args)
    chunks = _chunks(args.requests, args.objects, 1)
    _draw_sizes(chunks)
    if args.against:
        _paired(args, chunks)
    else:
        _alone(args, chunks)


if __name__ == "__main__":
    main()
