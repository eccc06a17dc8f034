"""One row of vs_peers.py, paired many times: the engine and redis-benchmark on Redis GETs.

vs_peers.py runs each of its 18 rows two or three times per side, and on a shared host the
ratio of one row moves by ±0.1 between runs — too much to tell 0.58 from 0.62. This runs one
row only, engine and redis-benchmark alternately against one server (2 s each, the same
connections, pipeline and value size as vs_peers), and prints each pair's ratios and their
medians: the figure to judge the row by.

    python benchmarks/vs_redis_benchmark_pairs.py                 # c=50 P=16 d=100, 8 pairs
    python benchmarks/vs_redis_benchmark_pairs.py --pipeline 1 --pairs 12
"""

from __future__ import annotations

import argparse
import statistics
import subprocess

import vs_peers as vp
from cachemark.lab import server_class


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    c, p, d = args.connections, args.pipeline, args.value_size
    with server_class("redis")() as server:
        port = server.port
        k = vp.key_count(d)
        subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set", "-r", str(k), "-n", str(20 * k),
                        "-d", str(d), "-c", "10", "-P", "8", "-q"], check=True, capture_output=True)
        cpu, throughput = [], []
        print(f"c={c} P={p} d={d}, {args.seconds:g} s per run, engine then redis-benchmark, one server")
        for i in range(args.pairs):
            ops, eng_cpu, eng_user = vp.engine("resp2", port, c, p, d, args.seconds, [{"op": "get"}],
                                               prefill=i == 0)
            n = max(10_000, int(ops * args.seconds * 0.8))  # about as long a run
            peer_ops, peer_cpu, peer_user = vp.redis_peer(port, c, p, d, n)
            cpu.append(eng_cpu / peer_cpu)
            throughput.append(ops / peer_ops)
            print(f"pair {i + 1}: engine {ops:11,.0f} ops/s {eng_cpu:.3f} µs/op (user {eng_user:.3f})   "
                  f"redis-benchmark {peer_ops:11,.0f} ops/s {peer_cpu:.3f} µs/op (user {peer_user:.3f})   "
                  f"CPU {cpu[-1]:.3f}  throughput {throughput[-1]:.2f}", flush=True)
        print(f"\nmedians of {args.pairs} pairs: CPU per op {statistics.median(cpu):.3f} "
              f"(range {min(cpu):.3f}–{max(cpu):.3f}), throughput {statistics.median(throughput):.2f} "
              f"(range {min(throughput):.2f}–{max(throughput):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
