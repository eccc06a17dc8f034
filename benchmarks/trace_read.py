"""How fast cachemark reads traces (records/s), and that its memory does not grow with the trace.

Generates one trace of ``--records`` requests (Zipf α 1.0 over ``--keys`` keys, Twitter-like
keys of 20–40 bytes, 80 % get / 18 % set / 2 % delete, TTLs on sets) and writes it in every
format cachemark reads — libCacheSim oracleGeneral, Twitter cache-trace CSV, CacheLib KV CSV,
cachemark's own CSV — plain and zstd (level 3). Then, for each file, reads every record
(``TraceReader.batches``) ``--repeat`` times and prints the median records/s, plus the time
of reading *and* computing statistics once. The CSV formats are read both ways, alternately: by the
numpy block parsers and by the Rust ones (``cachemark._engine``, when built), with the ratio; records/s
is given by wall time and by the process's CPU time (steadier on a shared machine). Finally, in a
fresh process per case, the peak RSS of reading 1 M and 4 M records (``--memory``), to show it stays flat.

Example:  python benchmarks/trace_read.py --records 2000000 --repeat 5 --memory
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zstandard

from cachemark.workload.traces import StatsBuilder, TraceWriter, fastcsv, open_trace, oracle_bytes

OPS = np.array(["get", "set", "delete"])
TW_OP = {"get": b"get", "set": b"set", "delete": b"delete"}
CL_OP = {"get": b"GET", "set": b"SET", "delete": b"DELETE"}
BLOCK = 250_000


def _workload(n: int, keys: int, seed: int = 1):  # noqa: ANN202 — yields column blocks
    rng = np.random.default_rng(seed)
    p = np.arange(1, keys + 1, dtype=np.float64) ** -1.0
    cdf = np.cumsum(p / p.sum())
    names = [b"nz:u:%0*x" % (15 + i % 20, i * 2654435761 % (1 << 60)) for i in range(keys)]
    for start in range(0, n, BLOCK):
        m = min(BLOCK, n - start)
        ids = np.minimum(np.searchsorted(cdf, rng.random(m)), keys - 1)
        ops = OPS[np.searchsorted([0.8, 0.98], rng.random(m), side="right")]
        sizes = rng.lognormal(6, 1.2, m).astype(np.int64).clip(1, 1 << 20)
        ttl = np.where(ops == "set", rng.integers(60, 86400, m), 0)
        t = (start + np.arange(m)) // 100_000  # 100k requests a second
        yield ids, ops, sizes, ttl, t, names


def generate(n: int, keys: int, directory: Path) -> dict[str, Path]:
    files = {}
    with open(directory / "t.oracleGeneral.bin", "wb") as oracle, open(directory / "t.twitter.csv", "wb") as twitter, \
            open(directory / "t.kv.csv", "wb") as cachelib, TraceWriter(directory / "t.cmtrace") as own:
        cachelib.write(b"op_time,key,key_size,op,op_count,size,cache_hits,ttl\n")
        for ids, ops, sizes, ttl, t, names in _workload(n, keys):
            oracle.write(oracle_bytes(t, ids, sizes))
            rows = list(zip(ids.tolist(), ops.tolist(), sizes.tolist(), ttl.tolist(), t.tolist()))
            twitter.write(b"".join(b"%d,%s,%d,%d,%d,%s,%d\n" % (tt, names[i], len(names[i]), s, i % 50, TW_OP[o], tl)
                                   for i, o, s, tl, tt in rows))
            cachelib.write(b"".join(b"%d,%s,%d,%s,1,%d,0,%d\n" % (tt, names[i], len(names[i]), CL_OP[o], s, tl)
                                    for i, o, s, tl, tt in rows))
            for i, o, s, tl, tt in rows:
                own.write(tt * 1_000_000, o, names[i], s, tl, i % 50)
    for name, fmt in (("t.oracleGeneral.bin", "oracle"), ("t.twitter.csv", "twitter"), ("t.kv.csv", "cachelib"),
                      ("t.cmtrace", "cachemark")):
        path = directory / name
        files[f"{fmt}"] = path
        zst = path.with_name(name + ".zst")
        with open(path, "rb") as src, open(zst, "wb") as dst:
            zstandard.ZstdCompressor(level=3).copy_stream(src, dst)
        files[f"{fmt}.zst"] = zst
    return files


class parser_path:  # noqa: N801 — a context manager, named for what it does
    """``with parser_path(native=False):`` reads the CSV formats with numpy even if the extension is built."""

    def __init__(self, native: bool) -> None:
        self.native = native

    def __enter__(self) -> None:
        self.saved = dict(fastcsv.NATIVE)
        if not self.native:
            fastcsv.NATIVE.clear()

    def __exit__(self, *exc: object) -> None:
        fastcsv.NATIVE.clear()
        fastcsv.NATIVE.update(self.saved)


def timed_read(path: Path, native: bool) -> tuple[int, float, float]:
    """(records, wall seconds, CPU seconds) of one read of ``path``."""
    with parser_path(native):
        wall, cpu = time.perf_counter(), time.process_time()
        count = read_all(path)
        return count, time.perf_counter() - wall, time.process_time() - cpu


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "?")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cpus ({model}), load average {load}"


def read_all(path: Path) -> int:
    n = 0
    for batch in open_trace(path).batches():
        n += len(batch)
    return n


def read_and_stats(path: Path) -> int:
    builder = StatsBuilder()
    reader = open_trace(path)
    for batch in reader.batches():
        builder.add(batch.records)
    return builder.finish().requests


def _status_kib(field: str) -> int:
    """A figure of /proc/self/status (VmRSS, VmHWM) in KiB. Not ru_maxrss: Linux keeps that across
    exec, so a child would report its parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def child(path: str, limit: int) -> None:
    """Peak RSS of reading ``limit`` records of ``path`` (the file holds at least that many)."""
    import cachemark.workload.traces  # noqa: F401 — imports before the baseline

    before = _status_kib("VmRSS")
    n = 0
    for batch in open_trace(path).batches():
        n += len(batch)
        if n >= limit:
            break
    print(f"{n} {before} {_status_kib('VmHWM')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory", action="store_true", help="also measure peak RSS at 1 M and 4 M records")
    parser.add_argument("--skip-speed", action="store_true", help="only the memory figures")
    parser.add_argument("--only", default="", help="comma-separated formats (oracle,twitter,cachelib,cachemark)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    n = max(args.records, 4_000_000) if args.memory else args.records
    print(f"config: {n:,} records, Zipf 1.0 over {args.keys:,} keys, repeat {args.repeat} (median); "
          f"python {platform.python_version()}, numpy {np.__version__}, zstandard {zstandard.__version__}; "
          f"Rust CSV parsers: {'built' if fastcsv.NATIVE else 'NOT BUILT (numpy only)'}")
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="trace-read-") as tmp:
        started = time.perf_counter()
        files = generate(n, args.keys, Path(tmp))
        print(f"generated in {time.perf_counter() - started:.1f} s")
        only = set(filter(None, args.only.split(",")))
        print("records/s, median of the repeats, by wall time (cpu: by the process's CPU time); "
              "oracle has one path (numpy)")
        print(f"{'file':<14} {'MB':>6} {'numpy':>11} {'(cpu)':>11} {'rust':>11} {'(cpu)':>11} {'rust/numpy':>10} "
              f"{'read+stats /s':>14}")
        for name, path in files.items():
            if (only and name.split(".")[0] not in only) or args.skip_speed:
                continue
            paths = [False] if name.startswith("oracle") or not fastcsv.NATIVE else [False, True]
            runs: dict[bool, list] = {native: [] for native in paths}
            for _ in range(args.repeat):  # alternate the paths, so a change in the machine's load hits both
                for native in paths:
                    count, wall, cpu = timed_read(path, native)
                    assert count == n, (name, native, count)
                    runs[native].append((wall, cpu))
            rate = {native: (n / statistics.median(w for w, _ in r), n / statistics.median(c for _, c in r))
                    for native, r in runs.items()}
            t0 = time.perf_counter()
            read_and_stats(path)
            with_stats = time.perf_counter() - t0
            rust = f"{rate[True][0]:>11,.0f} {rate[True][1]:>11,.0f} {rate[True][0] / rate[False][0]:>9.1f}×" \
                if True in rate else f"{'—':>11} {'—':>11} {'—':>10}"
            print(f"{name:<14} {path.stat().st_size / 1e6:>6.1f} {rate[False][0]:>11,.0f} {rate[False][1]:>11,.0f} "
                  f"{rust} {n / with_stats:>14,.0f}", flush=True)
        if args.memory:
            print("peak RSS while reading (fresh process each; MiB above the RSS after imports, and the peak):")
            for name, path in files.items():
                if only and name.split(".")[0] not in only:
                    continue
                figures = []
                for limit in (1_000_000, 4_000_000):
                    out = subprocess.run([sys.executable, __file__, "--child", str(path), str(limit)],
                                         capture_output=True, text=True, check=True).stdout.split()
                    read, before, after = (int(x) for x in out)
                    figures.append(f"{read / 1e6:.0f} M: +{(after - before) / 1024:5.1f} (peak {after / 1024:.0f})")
                print(f"  {name:<14} " + "   ".join(figures), flush=True)


if __name__ == "__main__":
    main()
