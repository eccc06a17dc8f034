"""Two builds of the native engine side by side: did a change make it cheaper per op?

On a shared, noisy VM one engine's CPU per op moves ±10 % from run to run, more than most
changes to it. This runs build A and build B alternately (ABBA…) against one local
redis-server (or memcached), each run in its own process, and prints per pair the ratio
B/A of client CPU per op, split into user and system time (getrusage of that process);
the medians of those paired ratios are the figures to quote. User time per op is the
steadiest: it is the engine's own code, while system time carries the host's noise (the
same TCP work for both builds).

A build is a source tree whose cachemark package holds its `_engine.abi3.so`, e.g.

    cp -r src /tmp/before && (change, rebuild, copy the .so into src/cachemark)
    python benchmarks/engine_ab.py /tmp/before src --pipeline 16 --pairs 8

or one tree run two ways (engine config keys for each side, JSON):

    python benchmarks/engine_ab.py src src --config-b '{"io": "epoll"}'
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

from cachemark.lab import server_class


def one_run(port: int, protocol: str, c: int, p: int, d: int, seconds: float, extra: dict) -> dict:
    """In the child: one engine run; its throughput, CPU per op and user/system ns per op."""
    from cachemark.engine import run_load

    mix = [{"op": "get"}] if protocol == "resp2" else [{"op": "get", "weight": 9}, {"op": "set", "weight": 1}]
    before = resource.getrusage(resource.RUSAGE_SELF)
    res = run_load({
        "protocol": protocol, "servers": [f"127.0.0.1:{port}"], "prefill": True, "threads": 1,
        "connections": c, "pipeline": p, "duration_s": seconds, "warmup_s": 0.3,
        "keys": {"count": 1000, "prefix": "cm:ab:"}, "values": {"sizes": [[d, 1]]}, "mix": mix,
        "verify_fraction": 0.01,
    } | extra)
    after = resource.getrusage(resource.RUSAGE_SELF)
    ops = sum(o["count"] for o in res["ops"].values())
    return {
        "ops_s": ops / res["wall_s"],
        "cpu_us": res["client_cpu_s"] / ops * 1e6,
        # the whole call (prefill and warm-up too): the same for both builds
        "user_ns": (after.ru_utime - before.ru_utime) / ops * 1e9,
        "sys_ns": (after.ru_stime - before.ru_stime) / ops * 1e9,
    }


def run_build(src: str, args, port: int, protocol: str, extra: dict) -> dict:
    argv = [sys.executable, __file__, "--child", str(port), protocol, str(args.connections), str(args.pipeline),
            str(args.value_size), str(args.seconds), json.dumps(extra)]
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        port, protocol, c, p, d, seconds, extra = sys.argv[2:9]
        print(json.dumps(one_run(int(port), protocol, int(c), int(p), int(d), float(seconds), json.loads(extra))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="source tree of build A (the reference)")
    ap.add_argument("b", help="source tree of build B")
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--memcached", action="store_true", help="memcached (90/10 get/set) instead of Redis GETs")
    ap.add_argument("--tls", action="store_true", help="a TLS redis-server (the lab's spawn:redis?tls=1)")
    ap.add_argument("--config-a", type=json.loads, default={}, help="engine config keys for A's runs (JSON)")
    ap.add_argument("--config-b", type=json.loads, default={}, help="engine config keys for B's runs (JSON)")
    args = ap.parse_args()
    tls: dict = {}
    if args.tls:
        from cachemark.engine import target_config

        server = server_class("redis")(tls=1).start()
        tls = {"tls": target_config(server.url() + "&client=engine")["tls"]}
        args.config_a, args.config_b = tls | args.config_a, tls | args.config_b
    else:  # the lab's servers: a port somebody took first is given up for another
        server = (server_class("memcached")(memory_mb=1024) if args.memcached else server_class("redis")()).start()
    port, protocol = server.port, "memcache_text" if args.memcached else "resp2"
    ratios: dict[str, list[float]] = {"cpu_us": [], "user_ns": [], "sys_ns": [], "ops_s": []}
    try:
        for i in range(args.pairs):
            order = ("a", "b") if i % 2 == 0 else ("b", "a")
            got = {side: run_build(getattr(args, side), args, port, protocol, getattr(args, f"config_{side}"))
                   for side in order}
            a, b = got["a"], got["b"]
            for k in ratios:
                ratios[k].append(b[k] / a[k])
            print(f"pair {i + 1}: A {a['ops_s']:>9,.0f} ops/s {a['cpu_us']:.3f} µs/op (user {a['user_ns']:.0f} ns)   "
                  f"B {b['ops_s']:>9,.0f} ops/s {b['cpu_us']:.3f} µs/op (user {b['user_ns']:.0f} ns)", flush=True)
    finally:
        server.stop()
    print(f"\nB/A, medians of {args.pairs} paired ratios (c={args.connections}, P={args.pipeline}, "
          f"d={args.value_size}, {args.seconds:g} s runs, {args.config_b.get('protocol', protocol)}"
          f"{' over TLS' if tls else ''}):")
    for k, label in (("cpu_us", "client CPU per op"), ("user_ns", "user time per op"),
                     ("sys_ns", "system time per op"), ("ops_s", "throughput")):
        print(f"  {label:<20} {statistics.median(ratios[k]):.3f}  (range {min(ratios[k]):.3f}–{max(ratios[k]):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
