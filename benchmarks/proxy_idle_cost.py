"""What the zero-delay proxy costs, per polling mode: the latency it adds and the CPU it burns.

What the default (learnt spin windows, only with a core to spare) costs against a fixed
``busy_poll_us`` window (docs/network.md, "Staying awake between segments"). Against a local
redis-server, one client connection does 16-byte GETs three ways in every round, direct and
through one proxy per polling mode (``poll=0``, the default, and each ``--polls`` window), the
modes in a rotated order each round so drift in the machine's state hits all alike:

- ``closed``: back-to-back GETs (the client never pauses; a spinning proxy spins throughout);
- ``paced``:  one GET per ``--interval`` (a light load: the machine idles between requests,
  which is where an idle vCPU's wake-up shows);
- ``saturate``: ``redis-benchmark -c 8`` GETs as fast as they go (when redis-benchmark is
  installed): the machine's cores are all busy, so a proxy that spins would take CPU from the
  client or the server — this is where that shows, as ops/s and the server's CPU per op;
- ``idle``:   a connected client that sends nothing for ``--idle`` seconds (proxies only).

Each proxy runs in its own process, so its CPU is measured exactly (the kernel's per-process
CPU clock, ns) apart from the client's; the server's CPU is redis' own ``INFO cpu``
(used_cpu_user + used_cpu_sys), read on a separate direct connection before and after. It
prints, as medians of the paired rounds: latency p50/p99, the proxy's added p50/p99 (minus
the direct path's in the same round), the proxy's CPU per op and as % of a core, and the
server's CPU per op as a ratio of the direct path's in the same round (a spinning proxy on
a 2-core machine could make the server slower per op by competing for a core).

    PYTHONPATH=src .venv/bin/python benchmarks/proxy_idle_cost.py                  # ~1 min
    PYTHONPATH=src .venv/bin/python benchmarks/proxy_idle_cost.py --polls 30,50,200 --rounds 7 --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cachemark.lab.redis import RedisServer

_PROXY_CHILD = """
import sys
sys.path.insert(0, sys.argv[3])
from cachemark._engine import Proxy
p = Proxy(sys.argv[1], sys.argv[2], "127.0.0.1:0", 1)
print(p.port, flush=True)
sys.stdin.read()  # serve until the parent closes our stdin
p.close()
"""
VALUE = b"v" * 16
GET = b"*2\r\n$3\r\nGET\r\n$2\r\ncm\r\n"
REPLY_LEN = len(b"$16\r\n") + 16 + 2


def cpu_ns(pid: int) -> int:
    """CPU time (user + system, all threads) of another process: its kernel CPU clock, in ns."""
    return time.clock_gettime_ns(((~pid) << 3) | 2)  # CPUCLOCK_SCHED, process-wide (man clock_getcpuclockid)


class ProxyProcess:
    """The native proxy in a process of its own, so its CPU is counted apart from the client's."""

    def __init__(self, upstream: str, poll_us: float) -> None:
        self.poll_us = poll_us
        config = json.dumps({"busy_poll_us": poll_us, "connect_delay_us": 0})
        src = str(Path(__import__("cachemark").__file__).resolve().parent.parent)
        self.proc = subprocess.Popen([sys.executable, "-c", _PROXY_CHILD, upstream, config, src],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())

    def cpu_ns(self) -> int:
        return cpu_ns(self.proc.pid)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def get(sock: socket.socket) -> int:
    start = time.perf_counter_ns()
    sock.sendall(GET)
    got = 0
    while got < REPLY_LEN:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("server closed the connection")
        got += len(chunk)
    return time.perf_counter_ns() - start


def server_cpu_s(info_sock: socket.socket) -> float:
    info_sock.sendall(b"*2\r\n$4\r\nINFO\r\n$3\r\ncpu\r\n")
    data = b""
    while not data.endswith(b"\r\n") or data.count(b"\r\n") < 2:
        data += info_sock.recv(65536)
    fields = dict(line.split(":", 1) for line in data.decode().splitlines() if ":" in line)
    return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(port: int, proxy: ProxyProcess | None, info: socket.socket, load: str, ops: int,
            interval_s: float) -> dict[str, Any]:
    with connect(port) as sock:
        for _ in range(50):  # warm the connection (and the proxy's upstream connect) up
            get(sock)
        cpu0, srv0, t0 = proxy.cpu_ns() if proxy else 0, server_cpu_s(info), time.perf_counter()
        lat: list[float] = []
        for i in range(ops):
            if load == "paced":
                pause = t0 + i * interval_s - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
            lat.append(get(sock) / 1000)
        wall = time.perf_counter() - t0
        cpu1, srv1 = proxy.cpu_ns() if proxy else 0, server_cpu_s(info)
    return {
        "p50_us": quantile(lat, 0.5), "p99_us": quantile(lat, 0.99), "ops_per_s": ops / wall,
        "proxy_cpu_us_per_op": (cpu1 - cpu0) / 1000 / ops if proxy else 0.0,
        "proxy_cpu_pct": 100 * (cpu1 - cpu0) / 1e9 / wall if proxy else 0.0,
        "server_cpu_us_per_op": (srv1 - srv0) * 1e6 / ops,
    }


def measure_saturated(port: int, proxy: ProxyProcess | None, info: socket.socket, ops: int) -> dict[str, Any]:
    """``redis-benchmark`` (8 connections, GET) through ``port``: the machine's cores all busy."""
    cpu0, srv0, t0 = proxy.cpu_ns() if proxy else 0, server_cpu_s(info), time.perf_counter()
    subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "8", "-n", str(ops), "-t", "get",
                    "-q"], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    cpu1, srv1 = proxy.cpu_ns() if proxy else 0, server_cpu_s(info)
    return {
        "p50_us": 0.0, "p99_us": 0.0, "ops_per_s": ops / wall,
        "proxy_cpu_us_per_op": (cpu1 - cpu0) / 1000 / ops if proxy else 0.0,
        "proxy_cpu_pct": 100 * (cpu1 - cpu0) / 1e9 / wall if proxy else 0.0,
        "server_cpu_us_per_op": (srv1 - srv0) * 1e6 / ops,
    }


def measure_idle(proxy: ProxyProcess, seconds: float) -> float:
    """Proxy CPU (ms) over ``seconds`` with a connected client that has just gone quiet."""
    with connect(proxy.port) as sock:
        for _ in range(50):
            get(sock)
        cpu0 = proxy.cpu_ns()
        time.sleep(seconds)
        return (proxy.cpu_ns() - cpu0) / 1e6


def run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    polls = [0.0] + [float(p) for p in args.polls.split(",") if p.strip()]
    with RedisServer() as server:
        port = server.port
        proxies = {f"poll={p:g}": ProxyProcess(f"127.0.0.1:{port}", p) for p in polls}
        try:
            with connect(port) as info:
                info.sendall(b"*3\r\n$3\r\nSET\r\n$2\r\ncm\r\n$16\r\n" + VALUE + b"\r\n")
                info.recv(64)
                modes = ["direct", *proxies]
                rows: list[dict[str, Any]] = []
                loads = []
                for i in range(args.rounds):
                    loads.append(os.getloadavg()[0])
                    order = modes[i % len(modes):] + modes[:i % len(modes)]
                    for load, ops in (("closed", args.ops), ("paced", args.paced_ops)):
                        for mode in order:
                            proxy = proxies.get(mode)
                            r = measure(proxy.port if proxy else port, proxy, info, load, ops, args.interval / 1e6)
                            rows.append({"round": i, "mode": mode, "load": load, **r})
                    if args.saturate_ops and shutil.which("redis-benchmark"):
                        for mode in order:
                            proxy = proxies.get(mode)
                            r = measure_saturated(proxy.port if proxy else port, proxy, info, args.saturate_ops)
                            rows.append({"round": i, "mode": mode, "load": "saturate", **r})
                    for mode in order:
                        if mode in proxies:
                            rows.append({"round": i, "mode": mode, "load": "idle",
                                         "proxy_cpu_ms": measure_idle(proxies[mode], args.idle)})
        finally:
            for proxy in proxies.values():
                proxy.close()
    return rows, [f"{x:.2f}" for x in loads]


def summarise(rows: list[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """Per load and mode: medians over rounds, added latency and server-CPU ratio paired per round."""
    out = []
    by = {(r["round"], r["mode"], r["load"]): r for r in rows}
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    for load in ("closed", "paced", "saturate"):
        if not any(r["load"] == load for r in rows):
            continue
        for mode in modes:
            own = [by[(i, mode, load)] for i in range(rounds)]
            direct = [by[(i, "direct", load)] for i in range(rounds)]
            med = {k: statistics.median(r[k] for r in own) for k in own[0] if k.endswith(("_us", "_pct", "_op", "_s"))}
            out.append({
                "load": load, "mode": mode, **med,
                "added_p50_us": statistics.median(o["p50_us"] - d["p50_us"] for o, d in zip(own, direct)),
                "added_p50_rounds_us": [round(o["p50_us"] - d["p50_us"], 1) for o, d in zip(own, direct)],
                "added_p99_us": statistics.median(o["p99_us"] - d["p99_us"] for o, d in zip(own, direct)),
                "ops_ratio": statistics.median(o["ops_per_s"] / d["ops_per_s"] for o, d in zip(own, direct)),
                "server_cpu_ratio": statistics.median(
                    o["server_cpu_us_per_op"] / d["server_cpu_us_per_op"] for o, d in zip(own, direct)
                    if d["server_cpu_us_per_op"] > 0),
            })
    for mode in modes:
        idle = [r["proxy_cpu_ms"] for r in rows if r["mode"] == mode and r["load"] == "idle"]
        if idle:
            out.append({"load": "idle", "mode": mode, "proxy_cpu_ms": statistics.median(idle),
                        "proxy_cpu_ms_max": max(idle)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", default="50,200", help="busy-poll windows (µs) to compare with poll=0")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=2000, help="back-to-back GETs per closed measurement")
    parser.add_argument("--paced-ops", type=int, default=500, help="GETs per paced measurement")
    parser.add_argument("--interval", type=float, default=1000, help="µs between paced GETs")
    parser.add_argument("--idle", type=float, default=2.0, help="seconds of the idle measurement")
    parser.add_argument("--saturate-ops", type=int, default=20000,
                        help="GETs per redis-benchmark measurement (0: skip the saturated load)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows, loads = run(args)
    summary = summarise(rows, args.rounds)
    print(f"proxy idle cost: {args.rounds} paired rounds, redis GET 16 B, 1 connection, proxy threads=1, "
          f"{os.cpu_count()} CPUs, {platform.platform()}; load average at each round: {', '.join(loads)}")
    print(f"closed = {args.ops} back-to-back GETs; paced = {args.paced_ops} GETs, one per {args.interval:g} µs; "
          f"idle = {args.idle:g} s with a quiet connection. Medians over rounds; 'added' and 'server CPU ×' are "
          "paired with the direct path of the same round.")
    print(f"{'load':>8} {'mode':>10} {'p50':>8} {'p99':>8} {'added p50':>10} {'added p99':>10} {'ops/s ×':>7} "
          f"{'proxy CPU':>11} {'proxy %core':>11} {'server CPU':>11} {'server ×':>8}  added p50 per round")
    for s in summary:
        if s["load"] == "idle":
            continue
        timed = s["load"] != "saturate"  # redis-benchmark's own latencies are not collected
        latency = (f"{s['p50_us']:>6.1f}µs {s['p99_us']:>6.1f}µs {s['added_p50_us']:>8.1f}µs "
                   f"{s['added_p99_us']:>8.1f}µs" if timed else f"{'-':>8} {'-':>8} {'-':>10} {'-':>10}")
        print(f"{s['load']:>8} {s['mode']:>10} {latency} {s['ops_ratio']:>6.2f}× "
              f"{s['proxy_cpu_us_per_op']:>7.1f}µs/op {s['proxy_cpu_pct']:>10.1f}% "
              f"{s['server_cpu_us_per_op']:>7.1f}µs/op {s['server_cpu_ratio']:>7.2f}×  "
              f"{s['added_p50_rounds_us'] if timed else ''}")
    for s in summary:
        if s["load"] == "idle":
            print(f"  idle {s['mode']:>10}: proxy CPU {s['proxy_cpu_ms']:.2f} ms over {args.idle:g} s "
                  f"(max over rounds {s['proxy_cpu_ms_max']:.2f} ms)")
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
