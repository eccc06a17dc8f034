"""Does the engine's GET latency agree with redis-benchmark's at the same load?

"c=50 vs c=50" compares different loads. By Little's law the requests in flight are
L = throughput × mean latency, and on a shared 2-core machine redis-benchmark keeps only
part of its connections busy: the rest of its cycle each connection spends waiting for
the client's own event loop, not for the server. So this benchmark equalises L instead
of the connection count:

1. redis-benchmark ``-t get -c C -P 1 -d 100 -r KEYS --csv``: its rps, mean and p50
   (redis-benchmark 7 prints them in ``--csv``), and L = rps × mean.
2. The engine (``run_load`` with ``target_config("redis://…?client=engine")``, 100 % GET,
   the same number of prefilled keys and value size, one thread, pipeline 1) at two
   connection counts whose in-flight L brackets redis-benchmark's; its rps, p50 and mean
   are interpolated linearly in L to redis-benchmark's L.
3. Repeated ``--repeat`` times, the sides back to back; the answer is the median of the
   paired p50 ratios (engine / redis-benchmark).

Both sides measure a request from its send to its reply. redis-benchmark keeps integer
microseconds in an HDR histogram with 8-µs buckets below about 2 ms and prints a
percentile as its bucket's upper edge (p50 39 means 32–39 µs), so the engine's p50 is
also shown rounded the same way ("p50 ratio, rb rounding"). At equal L the mean
latencies can only agree if the throughputs do (W = L / X), so the table also shows
1 / (rps ratio) next to the mean ratio, client CPU per op and how busy each client was
(getrusage of redis-benchmark; the engine's own figure; 1.00 = one core flat out, the
client is the bottleneck and its own event loop is inside its latency), and the server's
CPU utilisation during each run (cachemark's server sampler).

Measured here (2 shared cores, 2026-11-23): the p50s do not agree within 10 %; at equal L
the engine's is 15–30 % lower, and in every row p50 ratio ≈ mean ratio ≈ 1 / rps ratio.
Both sides obey Little's law, and the gap is throughput at equal L: neither run is
server-bound (server 45–65 % busy), so each request's latency is mostly client and kernel
time, and redis-benchmark spends 17–21 µs of CPU per op (four syscalls around each
request, inside its own timer) against the engine's 10–19. Equal L is also not equal
server load: each side's L counts what is inside its own timer.

    .venv/bin/python benchmarks/peer_agreement.py                 # ~6 min
    .venv/bin/python benchmarks/peer_agreement.py --clients 50 --repeat 7 --seconds 4
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import signal
import statistics
import subprocess
import sys
from dataclasses import dataclass

from cachemark.engine import Histogram, run_load, target_config
from cachemark.lab import server_class
from cachemark.measure.server_stats import ServerSampler

KEYS = 1000
VALUE = 100
GOAL = 0.10  # p50 within 10 % at equal in-flight


@dataclass
class Load:
    """One run's figures: throughput, latency, in-flight (Little's law), client and server CPU."""

    connections: float
    rps: float
    p50_us: float
    mean_us: float
    client_cpu_us: float  # client CPU per op
    server_cpu_pct: float | None = None

    @property
    def inflight(self) -> float:
        return self.rps * self.mean_us / 1e6

    @property
    def client_cores(self) -> float:
        """How busy the client was (1.0: one core flat out, i.e. the client is the bottleneck)."""
        return self.rps * self.client_cpu_us / 1e6


def rb_rounding(us: float) -> float:
    """A latency as redis-benchmark would print it: integer µs, up to its HDR bucket's upper
    edge (8-µs buckets below 2048 µs, twice as wide in each power of two above)."""
    width, limit = 8, 2048
    value = int(us)
    while value >= limit:
        width, limit = width * 2, limit * 2
    return (value // width + 1) * width - 1


def sampled(port: int, pid: int, run):
    """Runs ``run()`` with the server's CPU sampled around it; returns (result, server CPU %)."""
    sampler = ServerSampler(f"redis://127.0.0.1:{port}", pid).start()
    try:
        result = run()
    finally:
        server = sampler.stop(total_ops=1)
    return result, server.get("cpu_pct_mean")


def redis_benchmark(port: int, pid: int, clients: int, requests: int) -> Load:
    argv = ["redis-benchmark", "-p", str(port), "-t", "get", "-c", str(clients), "-P", "1", "-d", str(VALUE),
            "-r", str(KEYS), "-n", str(requests), "--csv"]

    def run():
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"redis-benchmark failed: {out.decode(errors='replace')[-300:]}")
        return out.decode(errors="replace"), usage.ru_utime + usage.ru_stime

    (out, cpu), server_pct = sampled(port, pid, run)
    rows = [r for r in csv.DictReader(io.StringIO(out[out.index('"test"'):])) if r.get("test") == "GET"]
    if not rows or "p50_latency_ms" not in rows[0]:
        raise RuntimeError(f"cannot read redis-benchmark's CSV (version 7 or later needed): {out[-300:]}")
    row = rows[0]
    return Load(clients, float(row["rps"]), float(row["p50_latency_ms"]) * 1000,
                float(row["avg_latency_ms"]) * 1000, cpu / requests * 1e6, server_pct)


def engine(port: int, pid: int, connections: int, seconds: float) -> Load:
    config = target_config(f"redis://127.0.0.1:{port}?client=engine") | {
        "threads": 1, "connections": connections, "pipeline": 1, "duration_s": seconds, "warmup_s": 0.3,
        "prefill": False, "keys": {"count": KEYS, "prefix": "cm:peer:"}, "values": {"sizes": [[VALUE, 1]]},
        "mix": [{"op": "get"}], "verify_fraction": 0.0,
    }
    result, server_pct = sampled(port, pid, lambda: run_load(config))
    op = result["ops"]["get"]
    if op["errors"] or op["misses"]:
        raise RuntimeError(f"engine: errors {op['errors']}, misses {op['misses']}: {result['errors_sample']}")
    merged = Histogram()
    for encoded in op["histograms"].values():
        merged.add(Histogram.decode(encoded))
    return Load(connections, op["count"] / result["wall_s"], merged.value_at_quantile(0.5) / 1000,
                merged.mean / 1000, result["client_cpu_s"] / op["count"] * 1e6, server_pct)


def prefill(port: int) -> None:
    """Every key of both sides written once: redis-benchmark's ``key:NNNNNNNNNNNN`` and the engine's."""
    subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set", "-r", str(KEYS), "-n", str(20 * KEYS),
                    "-d", str(VALUE), "-c", "10", "-P", "16", "-q"], check=True, capture_output=True)
    run_load(target_config(f"redis://127.0.0.1:{port}?client=engine") | {
        "prefill": True, "ops": 1, "keys": {"count": KEYS, "prefix": "cm:peer:"},
        "values": {"sizes": [[VALUE, 1]]}, "mix": [{"op": "get"}]})


def at_inflight(points: list[Load], target: float) -> tuple[Load, bool]:
    """The engine's figures interpolated linearly in L to ``target`` (extrapolated, and said, if outside)."""
    ordered = sorted(points, key=lambda p: p.inflight)
    below = [p for p in ordered if p.inflight <= target]
    above = [p for p in ordered if p.inflight >= target]
    inside = bool(below and above)
    a, b = (below[-1], above[0]) if inside else ((ordered[0], ordered[1]) if not below else (ordered[-2], ordered[-1]))
    span = b.inflight - a.inflight
    w = 0.0 if span == 0 else (target - a.inflight) / span

    def mix(x: float, y: float) -> float:
        return x + (y - x) * w

    server = None if a.server_cpu_pct is None or b.server_cpu_pct is None else mix(a.server_cpu_pct, b.server_cpu_pct)
    return Load(mix(a.connections, b.connections), mix(a.rps, b.rps), mix(a.p50_us, b.p50_us),
                mix(a.mean_us, b.mean_us), mix(a.client_cpu_us, b.client_cpu_us), server), inside


def engine_at(port: int, pid: int, target: float, seconds: float) -> tuple[Load, list[Load], bool]:
    """Engine runs at connection counts around ``target`` in-flight until two bracket it (at most four)."""
    first = max(1, round(target))
    points = [engine(port, pid, first, seconds)]
    while len(points) < 4:
        below = [p for p in points if p.inflight <= target]
        above = [p for p in points if p.inflight >= target]
        if below and above and len(points) >= 2:
            break
        tried = {int(p.connections) for p in points}
        if not above:  # need more load: scale by how far short the highest point fell
            top = max(points, key=lambda p: p.inflight)
            nxt = max(int(top.connections) + 1, round(top.connections * target / max(top.inflight, 1e-9)))
        else:
            low = min(points, key=lambda p: p.inflight)
            nxt = min(int(low.connections) - 1, round(low.connections * target / low.inflight))
        if nxt < 1 or nxt in tried:
            break
        points.append(engine(port, pid, nxt, seconds))
    if len(points) < 2:
        points.append(engine(port, pid, first + 1, seconds))
    load, inside = at_inflight(points, target)
    return load, points, inside


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 5, 10, 25, 50], help="redis-benchmark -c values")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each run")
    ap.add_argument("--repeat", type=int, default=5, help="paired runs per C")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the server started here is stopped
    if not shutil.which("redis-benchmark"):
        print("redis-benchmark not installed (Debian: redis-tools)", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    server = server_class("redis")().start()
    port, pid = server.port, server.pid()
    summary = []
    try:
        prefill(port)
        head = f"{'rps':>8} {'p50':>7} {'mean':>7} {'L':>5} {'cpu/op':>6} {'cli':>4} {'srv%':>4}"
        print(f"{'C':>3} {'rep':>3} | rb {head} | {'eng conns':>9} {head} | p50 ratio")
        for clients in args.clients:
            pairs = []
            for rep in range(args.repeat):
                # size redis-benchmark's run to about --seconds from a short probe
                probe = redis_benchmark(port, pid, clients, 5000)
                rb = redis_benchmark(port, pid, clients, max(10_000, int(probe.rps * args.seconds)))
                eng, points, inside = engine_at(port, pid, rb.inflight, args.seconds)
                pairs.append((rb, eng))
                conns = "/".join(str(int(p.connections)) for p in sorted(points, key=lambda p: p.connections))
                print(f"{clients:>3} {rep + 1:>3} | {_row(rb)} | {conns + ('' if inside else '*'):>9} {_row(eng)} | "
                      f"{eng.p50_us / rb.p50_us:9.3f}", flush=True)
            summary.append((clients, pairs))
    finally:
        server.stop()
    print()
    print(f"Config: {os.cpu_count()} CPUs shared by redis-server, the client and this script; loopback; "
          f"GET of {VALUE}-byte values over {KEYS} prefilled keys; -P 1 / pipeline 1; one client thread each; "
          f"{args.seconds:g} s per run; {args.repeat} paired repeats; medians below. Load average (1 min) "
          f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after: other work on the machine skews both sides.")
    print("* = extrapolated: no two engine connection counts bracketed redis-benchmark's L.")
    print()
    print("| C | rb rps | rb p50 µs | rb mean µs | rb L | engine conns | engine rps | engine p50 µs | engine mean µs "
          "| engine L | p50 ratio engine/rb (paired median) | p50 ratio, rb rounding | mean ratio | 1 / rps ratio "
          "| client CPU µs/op rb / engine | client cores busy rb / engine | server CPU % rb / engine | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for clients, pairs in summary:
        def med(values):
            return statistics.median(values)

        rb = [p[0] for p in pairs]
        eng = [p[1] for p in pairs]
        ratio = med(e.p50_us / r.p50_us for r, e in pairs)
        rounded = med(rb_rounding(e.p50_us) / r.p50_us for r, e in pairs)
        mean_ratio = med(e.mean_us / r.mean_us for r, e in pairs)
        inverse_rps = med(r.rps / e.rps for r, e in pairs)
        verdict = "agree" if abs(rounded - 1) <= GOAL else "differ"
        print(f"| {clients} | {med(r.rps for r in rb):,.0f} | {med(r.p50_us for r in rb):.0f} | "
              f"{med(r.mean_us for r in rb):.0f} | {med(r.inflight for r in rb):.1f} | "
              f"{med(e.connections for e in eng):.1f} | {med(e.rps for e in eng):,.0f} | "
              f"{med(e.p50_us for e in eng):.0f} | {med(e.mean_us for e in eng):.0f} | "
              f"{med(e.inflight for e in eng):.1f} | **{ratio:.3f}** | {rounded:.3f} | {mean_ratio:.3f} | "
              f"{inverse_rps:.3f} | "
              f"{med(r.client_cpu_us for r in rb):.1f} / {med(e.client_cpu_us for e in eng):.1f} | "
              f"{med(r.client_cores for r in rb):.2f} / {med(e.client_cores for e in eng):.2f} | "
              f"{_pct(rb)} / {_pct(eng)} | {verdict} |")
    return 0


def _pct(loads: list[Load]) -> str:
    values = [x.server_cpu_pct for x in loads if x.server_cpu_pct is not None]
    return f"{statistics.median(values):.0f}" if values else "-"


def _row(load: Load) -> str:
    server = "-" if load.server_cpu_pct is None else f"{load.server_cpu_pct:.0f}"
    return (f"{load.rps:8,.0f} {load.p50_us:7.0f} {load.mean_us:7.0f} {load.inflight:5.1f} "
            f"{load.client_cpu_us:6.1f} {load.client_cores:4.2f} {server:>4}")


if __name__ == "__main__":
    sys.exit(main())
