"""The engine's three memcached protocols side by side: text, meta, binary, and binary with SASL.

    python benchmarks/memcached_protocols.py [--seconds 3] [--rounds 3] [--connections 50]

Starts a plain memcached and a SASL one (``spawn:memcached?sasl=1``) on loopback and runs
100 % GETs of 100-byte prefilled values at pipeline 1 and 16, one client thread, the protocols
alternating within each round (the host is shared and noisy: compare ranges, not one run).
Prints ops/s and the engine's client CPU per op for every run, then each case's range.
SASL costs one exchange per connection, at connect: with it the load should run as fast as
plain binary.
"""

from __future__ import annotations

import argparse

from cachemark.engine import run_load, target_config
from cachemark.lab.memcached import MemcachedServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50)
    args = parser.parse_args()
    with MemcachedServer().start() as plain, MemcachedServer(sasl="1").start() as sasl:
        urls = {"text": plain.url() + "?client=engine", "meta": plain.url() + "?client=engine&protocol=meta",
                "binary": plain.url() + "?client=engine&protocol=binary",
                "binary+sasl": sasl.url() + "&client=engine"}
        seen: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for round_ in range(args.rounds):
            for pipeline in (1, 16):
                for name, url in urls.items():
                    cfg = target_config(url)
                    cfg.update(threads=1, connections=args.connections, pipeline=pipeline, duration_s=args.seconds,
                               prefill=round_ == 0, keys={"count": 10_000, "prefix": "cmbench:"},
                               values={"sizes": [[100, 1]]}, mix=[{"op": "get", "weight": 1}])
                    result = run_load(cfg)
                    get = result["ops"]["get"]
                    ops = get["count"] / result["wall_s"]
                    cpu_us = result["client_cpu_s"] / get["count"] * 1e6
                    seen.setdefault((name, pipeline), []).append((ops, cpu_us))
                    print(f"round {round_} {name:12s} P={pipeline:2d} {ops:>10,.0f} ops/s {cpu_us:6.2f} µs CPU/op "
                          f"hits {get['hits']:,} of {get['count']:,}", flush=True)
        for (name, pipeline), runs in sorted(seen.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            ops = sorted(o for o, _ in runs)
            cpu = sorted(c for _, c in runs)
            print(f"{name:12s} P={pipeline:2d} {ops[0]:>10,.0f}–{ops[-1]:,.0f} ops/s "
                  f"{cpu[0]:.2f}–{cpu[-1]:.2f} µs CPU/op")


if __name__ == "__main__":
    main()
