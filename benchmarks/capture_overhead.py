"""What capturing costs on top of the proxy: round trips and throughput, plain proxy vs `cachemark capture`.

Both proxies stand in front of one private redis-server, each in its own process as a user runs
them: the plain proxy (``cachemark._engine.Proxy``, nothing configured) and ``cachemark capture``
(the same proxy with its tap on, and the recorder draining to a trace every 100 ms). Then, in
several rounds (the machine is shared, so one burst of load should spoil one round, not the
answer):

- **latency**: ``GET`` round trips (100-byte value) over one connection to each, interleaved and
  rotating which goes first; p50 and p99 of each, and their ratio capture ÷ plain — next to the
  ratio of a second plain proxy ÷ the first (an A/A control: the noise the machine makes on its own);
- **throughput**: the native engine, closed loop with pipelines (``?client=engine&pipeline=8``,
  90 % get), a fixed number of ops through each, alternating which goes first; ops/s and the
  ratio capture ÷ plain (the tap copies every segment and the recorder parses every request, so
  this is where capture could cost something), and the CPU per op of each process's proxy
  threads (utime + stime from /proc: the pumps, including the tap's copies) and, separately, of the
  capture process's other threads (the recorder: parsing, formatting, writing the trace). On a shared
  machine the CPU per op is the steadier figure: throughput swings with other jobs' load.

Ratios are paired (same round, side by side) and the median over rounds is the answer; 1.00 means
capture adds nothing measurable.

    .venv/bin/python benchmarks/capture_overhead.py                  # ~1 min
    .venv/bin/python benchmarks/capture_overhead.py --rounds 7 --samples 3000 --ops 300000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cachemark.lab import server_class
from cachemark.lab.base import free_port, wait_for_port

PLAIN_PROXY = """
import sys, time
from cachemark._engine import Proxy
p = Proxy(sys.argv[1], "{}", sys.argv[2], 1)
try:
    while True:
        time.sleep(3600)
except KeyboardInterrupt:
    pass
"""


def start_plain(upstream: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", PLAIN_PROXY, upstream, f"127.0.0.1:{port}"])
    wait_for_port("127.0.0.1", port, 10, proc)
    return proc


def start_capture(upstream: str, port: int, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "cachemark", "capture", "-u", f"redis://{upstream}", "--listen",
                             f"127.0.0.1:{port}", "-o", str(out)], stdout=subprocess.DEVNULL)
    wait_for_port("127.0.0.1", port, 20, proc)
    return proc


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


GET = b"*2\r\n$3\r\nGET\r\n$9\r\nbench:key\r\n"
REPLY = b"$100\r\n" + b"v" * 100 + b"\r\n"


def round_trip(sock: socket.socket) -> float:
    start = time.perf_counter_ns()
    sock.sendall(GET)
    got = 0
    while got < len(REPLY):
        got += len(sock.recv(65536))
    return (time.perf_counter_ns() - start) / 1000


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency_round(socks: dict[str, socket.socket], samples: int) -> dict:
    """Round trips through each proxy in turn, the order rotating so none always follows another."""
    times: dict[str, list[float]] = {name: [] for name in socks}
    names = list(socks)
    for i in range(samples):
        for name in names[i % len(names):] + names[:i % len(names)]:
            times[name].append(round_trip(socks[name]))
    row = {}
    for name, values in times.items():
        row[f"{name}_p50"] = quantile(values, 0.5)
        row[f"{name}_p99"] = quantile(values, 0.99)
    return row


def cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds (utime + stime) of a process: its proxy threads, and all its other threads."""
    proxy = other = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name, rest = task.joinpath("stat").read_text().rsplit(")", 1)
        except OSError:
            continue  # a thread that just ended
        fields = rest.split()
        seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        if name.endswith("(cachemark-proxy"):
            proxy += seconds
        else:
            other += seconds
    return proxy, other


def engine_ops_per_s(port: int, ops: int, workdir: Path) -> float:
    out = workdir / f"run-{port}.json"
    result = subprocess.run(
        [sys.executable, "-m", "cachemark", "run", "-t", f"redis://127.0.0.1:{port}?client=engine&pipeline=8",
         "--no-prefill", "--warmup", "0", "--ops", str(ops), "--mix", "get=90,set=10", "--keys", "10000",
         "--value-size", "100", "--workers", "1", "--no-calibrate", "-o", str(out)],
        capture_output=True, text=True, cwd=workdir)
    if result.returncode != 0:
        raise SystemExit(f"engine run failed: {result.stderr[-2000:]}")
    phase = json.loads(out.read_text())["runs"][0]["phases"][-1]
    count = sum(op["count"] for op in phase["ops"].values())
    return count / phase["wall_s"] if phase.get("wall_s") else float(count)


def describe(row: dict) -> str:
    """One round's (or the medians') figures on one line; ratios are capture ÷ plain, A/A control ÷ plain."""
    return (f"GET p50 plain {row['plain_p50']:.1f} µs, capture {row['capture_p50']:.1f} µs: ratio "
            f"{row['p50_ratio']:.3f} (A/A {row['aa_p50_ratio']:.3f}) | p99 plain {row['plain_p99']:.1f} µs, capture "
            f"{row['capture_p99']:.1f} µs: ratio {row['p99_ratio']:.3f} (A/A {row['aa_p99_ratio']:.3f}) | engine "
            f"{row['plain_ops_s']:,.0f} vs {row['capture_ops_s']:,.0f} ops/s: ratio {row['throughput_ratio']:.3f} | "
            f"proxy threads' CPU/op {row['plain_cpu_us_op']:.2f} vs {row['capture_cpu_us_op']:.2f} µs: ratio "
            f"{row['cpu_ratio']:.2f}, + recorder {row['recorder_cpu_us_op']:.2f} µs/op on its own thread")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=2000, help="round trips per proxy per round")
    parser.add_argument("--ops", type=int, default=200_000, help="engine ops per proxy per round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}, Python "
          f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at start")
    server = server_class("redis")().start()
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        try:
            upstream = f"{server.host}:{server.port}"
            plain_port, capture_port, control_port = free_port(), free_port(), free_port()
            procs.append(start_plain(upstream, plain_port))
            procs.append(start_capture(upstream, capture_port, workdir / "bench.cmtrace"))
            procs.append(start_plain(upstream, control_port))
            setup = connect(server.port)
            setup.sendall(b"*3\r\n$3\r\nSET\r\n$9\r\nbench:key\r\n$100\r\n" + b"v" * 100 + b"\r\n")
            setup.recv(100)
            socks = {"plain": connect(plain_port), "capture": connect(capture_port), "control": connect(control_port)}
            for _ in range(300):  # warm every path
                for sock in socks.values():
                    round_trip(sock)
            rows = []
            for r in range(args.rounds):
                row = latency_round(socks, args.samples)
                order = [(plain_port, "plain", procs[0].pid), (capture_port, "capture", procs[1].pid)]
                for port, name, pid in order if r % 2 == 0 else order[::-1]:
                    (proxy0, other0) = cpu_s(pid)
                    row[f"{name}_ops_s"] = engine_ops_per_s(port, args.ops, workdir)
                    proxy1, other1 = cpu_s(pid)
                    row[f"{name}_cpu_us_op"] = (proxy1 - proxy0) / args.ops * 1e6
                    if name == "capture":
                        row["recorder_cpu_us_op"] = (other1 - other0) / args.ops * 1e6
                row["p50_ratio"] = row["capture_p50"] / row["plain_p50"]
                row["p99_ratio"] = row["capture_p99"] / row["plain_p99"]
                row["aa_p50_ratio"] = row["control_p50"] / row["plain_p50"]
                row["aa_p99_ratio"] = row["control_p99"] / row["plain_p99"]
                row["throughput_ratio"] = row["capture_ops_s"] / row["plain_ops_s"]
                row["cpu_ratio"] = row["capture_cpu_us_op"] / row["plain_cpu_us_op"]
                rows.append(row)
                if not args.json:
                    print(f"round {r + 1}: " + describe(row), flush=True)
            for sock in socks.values():
                sock.close()
        finally:
            for proc in procs:
                proc.send_signal(2)  # the capture writes its trace on Ctrl-C, as a user's would
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            server.stop()
        trace = workdir / "bench.cmtrace"
        lines = sum(1 for _ in trace.open("rb")) - 2 if trace.exists() else 0
    summary = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
    if args.json:
        print(json.dumps({"rounds": rows, "median": summary, "trace_requests": lines}, indent=2))
        return
    print(f"median of {len(rows)} rounds: " + describe(summary))
    print(f"the capture wrote {lines:,} requests; load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
