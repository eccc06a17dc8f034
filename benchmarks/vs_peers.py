"""cachemark's native engine side by side with the classic load generators.

For each case (connections c, pipeline P, value size d) this runs, against one local
server started here, cachemark's engine and the peer with the same connections,
pipeline and value size, alternately and `--repeat` times each, and prints the
throughput ratio (engine / peer, higher is better) and the ratio of client CPU
seconds per million ops (engine / peer, lower is better): best run of each side, and
in brackets the median of the ratios of runs made back to back (the machine is shared
and noisy: the spread of the two says how far a ratio can be trusted).

  Redis:     redis-benchmark -t get (keys prefilled by an untimed redis-benchmark -t set)
             vs the engine's 100 % GET on the same number of prefilled keys.
  Redis too:  resp-benchmark (PyPI; a Rust core, like the engine) `GET {key uniform K}` on K keys it
             loaded itself (`--load`, untimed) with the same value size, pinned to one core (`--cores 0`)
             as the engine runs one thread; its CPU includes its own start-up (~0.2 s), a small bias
             against it, so compare its CPU ratio with that in mind.
  memcached: memcaslap (90 % get / 10 % set, its own default mix) vs the engine with
             the same mix. memcaslap cannot pipeline, so its P=16 row runs at P=1.
  TLS:       redis-benchmark --tls --cacert vs the engine (rustls, io_uring) against the lab's
             spawn:redis?tls=1 (a throw-away CA), keys prefilled as above.
  Cluster:   redis-benchmark --cluster vs the engine's cluster mode against the lab's
             spawn:redis-cluster?nodes=3, then the same over TLS (spawn:redis-cluster?nodes=3&tls=1,
             redis-benchmark --cluster --tls --cacert); each side prefills its own keys (redis-benchmark's
             carry a {tag} per node), untimed. Same requests in flight: the engine runs c/3 clients
             (rounded up), each holding one connection per primary (c connections in all) and at most
             a whole pipeline on each; how many requests it keeps in flight on average follows from
             Little's law (its GETs per second × their mean latency, write to reply: ~1.5 per client
             at P=1, not 3, as a client's next key often needs a socket that is still busy). Each
             redis-benchmark --cluster run that follows an engine run is given that count: c' =
             in-flight / P clients (rounded, at least one per node), each with P in flight on its
             node, so both keep the same number of requests in flight. The peer's name carries its c'
             per run, and a line under the printed row gives both in-flight counts.

Client CPU: getrusage of the child for the peers (memcaslap's untimed warm-up is
subtracted using /proc samples), getrusage of this process over the engine's timed
phase; a second table splits it into user time (the client's own code) and system time
(the kernel's I/O it asks for). Example:  python benchmarks/vs_peers.py --seconds 3 --repeat 2
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from cachemark.engine import Histogram, run_load, target_config
from cachemark.lab import server_class

CASES = [(50, 1, 100), (50, 16, 100), (50, 1, 10_000), (10, 1, 100_000)]
REACH_CASES = [(50, 1, 100), (50, 16, 100)]  # the TLS and cluster rows
TICK = os.sysconf("SC_CLK_TCK")


def key_count(d: int) -> int:
    return 100 if d >= 100_000 else 1000


def run_child(argv: list[str], sample: bool = False) -> tuple[str, float, float, list[tuple[float, float]], float]:
    """Runs a peer; returns its stdout+stderr, CPU seconds, their user part, /proc CPU samples, exit time."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    samples: list[tuple[float, float]] = []
    out = b""
    status, ru = 0, None
    if sample:
        os.set_blocking(proc.stdout.fileno(), False)
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            try:
                with open(f"/proc/{proc.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                samples.append((time.monotonic(), (int(fields[11]) + int(fields[12])) / TICK))
            except (OSError, IndexError):
                pass
            out += proc.stdout.read() or b""
            time.sleep(0.05)
    if ru is None:
        _, status, ru = os.wait4(proc.pid, 0)
    end = time.monotonic()
    out += proc.stdout.read() or b""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {out.decode(errors='replace')[-500:]}")
    return out.decode(errors="replace"), ru.ru_utime + ru.ru_stime, ru.ru_utime, samples, end


def in_flight(res: dict) -> float:
    """Requests the engine kept in flight on average (Little's law): ops per second × mean latency, the
    latency running from a request's write to its reply's read (closed loop)."""
    total_ns, count = 0.0, 0
    for op in res["ops"].values():
        for encoded in op["histograms"].values():
            h = Histogram.decode(encoded)
            total_ns, count = total_ns + h.mean * h.count, count + h.count
    return count / res["wall_s"] * (total_ns / count) * 1e-9 if count else 0.0


def engine(where: str | dict, port: int | None, c: int, p: int, d: int, seconds: float, mix: list[dict],
           prefill: bool = True, flight: list[float] | None = None) -> tuple[float, float, float]:
    """``where``: a protocol (with ``port``) or a connection config (``target_config`` of a URL).
    Returns ops/s, client CPU µs per op, and its user part; appends the requests it kept in flight on
    average to ``flight`` when given."""
    conn = where if isinstance(where, dict) else {"protocol": where, "servers": [f"127.0.0.1:{port}"]}
    res = run_load(
        {
            **conn,
            "prefill": prefill,
            "threads": 1,
            "connections": c,
            "pipeline": p,
            "duration_s": seconds,
            "warmup_s": 0.3,
            "keys": {"count": key_count(d), "prefix": "cm:vs:"},
            "values": {"sizes": [[d, 1]]},
            "mix": mix,
            "verify_fraction": 0.01,
        }
    )
    ops = sum(o["count"] for o in res["ops"].values())
    errors = sum(sum(o["errors"].values()) for o in res["ops"].values())
    if errors:
        raise RuntimeError(f"engine saw {errors} errors: {res['errors_sample']}")
    if flight is not None:
        flight.append(in_flight(res))
    return ops / res["wall_s"], res["client_cpu_s"] / ops * 1e6, res["client_cpu_user_s"] / ops * 1e6


def redis_peer(port: int, c: int, p: int, d: int, n: int, extra: tuple[str, ...] = ()) -> tuple[float, float, float]:
    argv = ["redis-benchmark", "-p", str(port), "-t", "get", "-r", str(key_count(d)), "-n", str(n), *extra]
    out, cpu, user, _, _ = run_child([*argv, "-c", str(c), "-P", str(p), "-d", str(d), "--csv"])
    m = re.search(r'"GET","([\d.]+)"', out)
    if not m:
        raise RuntimeError(f"cannot read redis-benchmark output: {out[-300:]}")
    return float(m.group(1)), cpu / n * 1e6, user / n * 1e6


def resp_benchmark() -> str | None:
    """The resp-benchmark executable beside this Python (pip install resp-benchmark), or on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "resp-benchmark")
    return beside if os.path.exists(beside) else shutil.which("resp-benchmark")


def resp_load(exe: str, port: int, d: int) -> None:
    k = key_count(d)
    load = f"SET {{key sequence {k}}} {{value {d}}}"
    subprocess.run([exe, "-p", str(port), "--load", "-n", str(k), "-c", "10", load], check=True, capture_output=True,
                   timeout=120)


def resp_peer(exe: str, port: int, c: int, p: int, d: int, seconds: float) -> tuple[float, float, float]:
    argv = [exe, "-p", str(port), "-c", str(c), "-P", str(p), "-s", str(max(1, round(seconds))), "--cores", "0",
            f"GET {{key uniform {key_count(d)}}}"]
    out, cpu, user, _, _ = run_child(argv)
    m = re.findall(r"qps: (\d+), conn: \d+, cnt: (\d+)", out)
    if not m:
        raise RuntimeError(f"cannot read resp-benchmark output: {out[-300:]}")
    qps, count = (int(x) for x in m[-1])
    return float(qps), cpu / max(count, 1) * 1e6, user / max(count, 1) * 1e6


def memcaslap_peer(port: int, c: int, d: int, seconds: float, cfg: str) -> tuple[float, float, float]:
    argv = ["memcaslap", "-s", f"127.0.0.1:{port}", "-T", "1", "-c", str(c), "-t", f"{int(seconds)}s"]
    out, cpu, user, samples, end = run_child([*argv, "-X", str(d), "-F", cfg, "-w", "1k"], sample=True)
    m = re.search(r"Run time: ([\d.]+)s Ops: (\d+) TPS: (\d+)", out)
    if not m:
        raise RuntimeError(f"cannot read memcaslap output: {out[-300:]}")
    run_time, ops, tps = float(m.group(1)), int(m.group(2)), int(m.group(3))
    # Count only the timed phase, the last `run_time` seconds of CPU activity: memcaslap
    # warms up before it and idles (~1 s) after it before exiting.
    busy_end = next((t for t, c in samples if c >= samples[-1][1]), end) if samples else end
    before = [c for t, c in samples if t <= busy_end - run_time]
    cpu_at_start = before[-1] if before else 0.0
    timed = (cpu - cpu_at_start) / max(ops, 1) * 1e6
    # /proc samples do not split user from system: its whole run's user share stands for the timed phase's
    return float(tps), timed, timed * user / cpu if cpu else 0.0


Run = tuple[float, float, float]  # ops/s, client CPU µs per op, its user part


def best(runs: list[Run]) -> tuple[float, float]:
    return max(r[0] for r in runs), min(r[1] for r in runs)


def anatomy(runs: list[Run]) -> tuple[float, float]:
    """Median user and system µs per op: a client's own code, and the kernel's I/O it asks for."""
    return statistics.median(r[2] for r in runs), statistics.median(r[1] - r[2] for r in runs)


def make_row(server: str, peer_name: str, c: int, p: int, pp: int, d: int, eng: list[Run], peer: list[Run]) -> tuple:
    return (server, peer_name, c, p, pp, d, best(eng), best(peer), paired(eng, peer), anatomy(eng), anatomy(peer))


def paired(eng: list[Run], peer: list[Run]) -> tuple[float, float]:
    """Median throughput and CPU ratios of runs made back to back."""
    return (
        statistics.median(e[0] / p[0] for e, p in zip(eng, peer)),
        statistics.median(e[1] / p[1] for e, p in zip(eng, peer)),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each timed run")
    ap.add_argument("--repeat", type=int, default=2, help="runs per side and case (best is kept)")
    ap.add_argument("--only", choices=["redis", "memcached", "reach"],
                    help="one server kind only (reach: the TLS and cluster rows)")
    args = ap.parse_args()
    rows = []
    tmp = tempfile.mkdtemp(prefix="cm-vs-")
    if args.only in (None, "redis"):
        if not shutil.which("redis-benchmark"):
            print("redis-benchmark not installed (Debian: redis-tools); skipping Redis", file=sys.stderr)
        else:
            with server_class("redis")() as srv:  # the lab's: a port somebody took first is given up for another
                port = srv.port
                for c, p, d in CASES:
                    k = key_count(d)
                    subprocess.run(
                        ["redis-benchmark", "-p", str(port), "-t", "set", "-r", str(k), "-n", str(20 * k)]
                        + ["-d", str(d), "-c", "10", "-P", "8", "-q"],
                        check=True,
                        capture_output=True,
                    )
                    eng, peer = [], []
                    for _ in range(args.repeat):
                        eng.append(engine("resp2", port, c, p, d, args.seconds, [{"op": "get"}]))
                        n = max(10_000, int(eng[-1][0] * args.seconds * 0.8))
                        peer.append(redis_peer(port, c, p, d, n))
                    rows.append(make_row("redis", "redis-benchmark", c, p, p, d, eng, peer))
                    print_row(rows[-1], flush=True)
                    exe = resp_benchmark()
                    if exe is None:
                        continue
                    resp_load(exe, port, d)
                    eng, peer = [], []
                    for _ in range(args.repeat):
                        eng.append(engine("resp2", port, c, p, d, args.seconds, [{"op": "get"}]))
                        peer.append(resp_peer(exe, port, c, p, d, args.seconds))
                    rows.append(make_row("redis", "resp-benchmark", c, p, p, d, eng, peer))
                    print_row(rows[-1], flush=True)
    if args.only in (None, "reach") and shutil.which("redis-benchmark"):
        rows += reach_rows(args)
    if args.only in (None, "memcached"):
        if not shutil.which("memcaslap"):
            print("memcaslap not installed (Debian: libmemcached-tools); skipping memcached", file=sys.stderr)
        else:
            with server_class("memcached")(memory_mb=2048) as srv:
                port = srv.port
                for c, p, d in CASES:
                    cfg = os.path.join(tmp, f"memcaslap-{d}.cfg")
                    with open(cfg, "w") as f:
                        f.write(f"key\n16 16 1\nvalue\n{d} {d} 1\ncmd\n0 0.1\n1 0.9\n")
                    mix = [{"op": "get", "weight": 9}, {"op": "set", "weight": 1}]
                    eng, peer = [], []
                    for _ in range(args.repeat):
                        eng.append(engine("memcache_text", port, c, p, d, args.seconds, mix))
                        peer.append(memcaslap_peer(port, c, d, args.seconds, cfg))
                    rows.append(make_row("memcached", "memcaslap", c, p, 1, d, eng, peer))
                    print_row(rows[-1], flush=True)
    print()
    print(
        f"Config: {args.seconds:g} s per run, best of {args.repeat}, "
        f"1 client thread each, loopback, {os.cpu_count()} CPUs"
    )
    print()
    print(
        "| server | peer | c | P (engine/peer) | d | engine ops/s | peer ops/s | throughput ratio (paired median) "
        "| engine CPU-s/Mop | peer CPU-s/Mop | CPU ratio (paired median) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for server, peer, c, p, pp, d, (et, ec), (pt, pc), (mt, mc), _, _ in rows:
        print(
            f"| {server} | {peer} | {c} | {p}/{pp} | {d} | {et:,.0f} | {pt:,.0f} | **{et / pt:.2f}** ({mt:.2f}) "
            f"| {ec:.2f} | {pc:.2f} | **{ec / pc:.2f}** ({mc:.2f}) |"
        )
    print()
    print("Where the CPU goes, µs per op (medians of the runs): user = the client's own code, system = the kernel's "
          "I/O it asks for" + (" (memcaslap: its whole run's user share)" if any(r[1] == "memcaslap" for r in rows)
                                else ""))
    print()
    print("| server | peer | c | P (engine/peer) | d | engine user | engine system | peer user | peer system "
          "| user ratio | system ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for server, peer, c, p, pp, d, _, _, _, (eu, es), (pu, ps) in rows:
        print(f"| {server} | {peer} | {c} | {p}/{pp} | {d} | {eu:.3f} | {es:.3f} | {pu:.3f} | {ps:.3f} "
              f"| {eu / pu if pu else float('nan'):.2f} | {es / ps if ps else float('nan'):.2f} |")
    return 0


def reach_rows(args) -> list[tuple]:
    """redis-benchmark's --tls and --cluster beside the engine's TLS and cluster mode."""
    rows = []
    with server_class("redis")(tls="1") as tls:
        conn = target_config(tls.url())
        extra = ("--tls", "--cacert", tls.certs.ca)
        for c, p, d in REACH_CASES:
            k = key_count(d)
            subprocess.run(["redis-benchmark", "-p", str(tls.port), *extra, "-t", "set", "-r", str(k), "-n",
                            str(20 * k), "-d", str(d), "-c", "10", "-P", "8", "-q"], check=True, capture_output=True)
            eng, peer = [], []
            for _ in range(args.repeat):
                eng.append(engine(conn, None, c, p, d, args.seconds, [{"op": "get"}]))
                peer.append(redis_peer(tls.port, c, p, d, max(10_000, int(eng[-1][0] * args.seconds * 0.8)), extra))
            rows.append(make_row("redis TLS", "redis-benchmark --tls", c, p, p, d, eng, peer))
            print_row(rows[-1], flush=True)
    for tls in ("0", "1"):
        with server_class("redis-cluster")(nodes="3", tls=tls) as cluster:
            conn = target_config(cluster.url())
            seed = cluster.primaries[0].port
            extra = ("--cluster", *(("--tls", "--cacert", cluster.certs.ca) if cluster.certs else ()))
            for c, p, d in REACH_CASES:
                k = key_count(d)
                subprocess.run(["redis-benchmark", "-p", str(seed), *extra, "-t", "set", "-r", str(k), "-n",
                                str(20 * k), "-d", str(d), "-c", "10", "-P", "8", "-q"], check=True,
                               capture_output=True)
                eng, peer, flight, peer_c = [], [], [], []
                nodes = len(cluster.primaries)
                clients = -(-c // nodes)  # c connections: each engine client holds one per primary
                for i in range(args.repeat):
                    eng.append(engine(conn, None, clients, p, d, args.seconds, [{"op": "get"}], prefill=i == 0,
                                      flight=flight))
                    n = max(10_000, int(eng[-1][0] * args.seconds * 0.8))
                    # the peer keeps c' × P in flight, c' from the engine run just made (module docstring)
                    peer_c.append(max(nodes, round(flight[-1] / p)))
                    peer.append(redis_peer(seed, peer_c[-1], p, d, n, extra))
                name = "redis TLS cluster×3" if cluster.certs else "redis cluster×3"
                peer_name = f"redis-benchmark {' '.join(extra[:2])} (c'={'/'.join(map(str, peer_c))})"
                rows.append(make_row(name, peer_name, c, p, p, d, eng, peer))
                print_row(rows[-1], flush=True)
                print(f"  in flight (mean, Little's law): engine {'/'.join(f'{f:.1f}' for f in flight)} over "
                      f"{clients * nodes} connections; redis-benchmark --cluster c'={'/'.join(map(str, peer_c))} "
                      f"× P={p} (c' = the engine's in-flight / P, per run)", flush=True)
    return rows


def print_row(row, flush: bool = False) -> None:
    server, peer, c, p, pp, d, (et, ec), (pt, pc), (mt, mc), (eu, es), (pu, ps) = row
    print(
        f"{server:9} c={c:<3} P={p}/{pp:<3} d={d:<6}  engine {et:>11,.0f} ops/s {ec:6.2f} CPU-s/Mop   "
        f"{peer} {pt:>11,.0f} ops/s {pc:6.2f} CPU-s/Mop   throughput x{et / pt:.2f} ({mt:.2f})  "
        f"CPU x{ec / pc:.2f} ({mc:.2f})   user/system µs per op: engine {eu:.2f}/{es:.2f}, peer {pu:.2f}/{ps:.2f}",
        flush=flush,
    )


if __name__ == "__main__":
    sys.exit(main())
