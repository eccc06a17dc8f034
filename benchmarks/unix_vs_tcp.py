"""The engine over a Unix domain socket vs TCP loopback vs TLS, on one redis-server, side by side.

One redis-server listens on all three (``port``, ``unixsocket``, ``tls-port``); each round runs
the same closed-loop GET load over each transport in turn, so the machine's drift hits all of
them alike. Prints ops/s and client CPU µs per op per transport, and the ratios to TCP.

    .venv/bin/python benchmarks/unix_vs_tcp.py [--seconds 3] [--rounds 3] [--connections 50] [--pipeline 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
from urllib.parse import quote

from cachemark.engine import run_load, target_config
from cachemark.lab.base import free_port, wait_for_port, wait_for_socket
from cachemark.lab.certs import make_certs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--pipeline", type=int, default=1)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="cachemark-bench-")
    port, tls_port = free_port(), free_port()
    sock = os.path.join(tmp, "redis.sock")
    certs = make_certs(tmp)
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--unixsocket", sock, "--unixsocketperm", "700",
         "--tls-port", str(tls_port), "--tls-cert-file", certs.cert, "--tls-key-file", certs.key,
         "--tls-ca-cert-file", certs.ca, "--tls-auth-clients", "no", "--save", "", "--appendonly", "no",
         "--dir", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port("127.0.0.1", port, 10, proc)
        wait_for_socket(sock, 10, proc)
        urls = {
            "tcp": f"redis://127.0.0.1:{port}/0",
            "unix": f"redis+unix://{quote(sock)}?db=0",
            "tls": f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={quote(certs.ca)}",
        }
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in urls}
        for round_ in range(args.rounds):
            for name, url in urls.items():
                cfg = target_config(url)
                cfg.update(connections=args.connections, pipeline=args.pipeline, duration_s=args.seconds,
                           keys={"count": 10_000, "prefix": f"cmb{round_}{name}:"}, values={"sizes": [[100, 1]]},
                           mix=[{"op": "get"}], verify_fraction=0.0)
                result = run_load(cfg)
                ops = result["ops"]["get"]["count"]
                figures[name].append((ops / result["wall_s"], result["client_cpu_s"] / ops * 1e6))
        tcp = statistics.median(f[0] for f in figures["tcp"])
        print(f"redis-server, engine closed loop GET 100 B, {args.connections} connections, pipeline {args.pipeline}, "
              f"{args.seconds:g} s x {args.rounds} rounds (median)")
        for name, values in figures.items():
            rate = statistics.median(v[0] for v in values)
            cpu = statistics.median(v[1] for v in values)
            print(f"  {name:5s} {rate:10,.0f} ops/s  {cpu:6.2f} µs client CPU/op  x{rate / tcp:.2f} of tcp")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
