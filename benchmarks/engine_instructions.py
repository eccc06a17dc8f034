"""The engine's own instructions per op, counted (not timed): did a change make its code cheaper?

On a shared VM the engine's CPU per op moves ±10 % between runs (`engine_ab.py` pairs runs to
see through that), and its user time — the part its own code decides — moves even more. An
instruction count does not: this runs each build once under valgrind's callgrind (the engine
at ~1/8 of its speed, against a redis-server or memcached started here, outside valgrind)
and prints the instructions its load thread executed per request the server executed
(`INFO commandstats`, memcached's `stats`; prefill and warm-up included: the same few
thousand requests for every build), and the functions they went to.

    python benchmarks/engine_instructions.py /tmp/before src            # Redis GETs, c=50, P=16
    python benchmarks/engine_instructions.py src --memcached --pipeline 1
    python benchmarks/engine_instructions.py src --cluster                # a local 3-node cluster

A build is a source tree whose cachemark package holds its `_engine.abi3.so` (as for
`engine_ab.py`). Needs valgrind (`apt-get install valgrind`). Instructions are not time —
cache misses and branch mispredictions are not in them — so confirm a change with
`engine_ab.py` too.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

import redis

from cachemark.lab import server_class

LOAD_THREAD = "cachemark_load::engine::worker::"  # in a load thread's profile only


def child(conn: dict, protocol: str, c: int, p: int, seconds: float) -> None:
    """In valgrind: one engine run; prints its op count."""
    from cachemark.engine import run_load

    mix = [{"op": "get"}] if protocol.startswith("resp") else [{"op": "get", "weight": 9}, {"op": "set", "weight": 1}]
    res = run_load({**conn, "prefill": True, "threads": 1, "connections": c, "pipeline": p, "duration_s": seconds,
                    "warmup_s": 0.3, "keys": {"count": 1000, "prefix": "cm:in:"}, "values": {"sizes": [[100, 1]]},
                    "mix": mix, "verify_fraction": 0.01})
    print(json.dumps({"ops": sum(o["count"] for o in res["ops"].values())}))


def served(servers: list[str], memcached: bool) -> int:
    """GETs and SETs the servers have executed (the ground truth of requests sent)."""
    total = 0
    for hostport in servers:
        host, port = hostport.rsplit(":", 1)
        if memcached:
            with socket.create_connection((host, int(port)), timeout=5) as s:
                s.sendall(b"stats\r\n")
                text = b""
                while not text.endswith(b"END\r\n"):
                    text += s.recv(65536)
            stats = dict(line.split()[1:3] for line in text.decode().splitlines() if line.startswith("STAT "))
            total += int(stats["cmd_get"]) + int(stats["cmd_set"])
        else:
            stats = redis.Redis(host=host, port=int(port)).info("commandstats")
            total += sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("get", "set"))
    return total


def count(tree: str, conn: dict, servers: list[str], args) -> tuple[float, list[tuple[float, str]]]:
    """Runs build `tree` under callgrind: its load threads' instructions per request the servers
    executed, and the top functions' (their own instructions, inlined callees included)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        argv = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}",
                sys.executable, __file__, "--child", json.dumps(conn), conn["protocol"], str(args.connections),
                str(args.pipeline), str(args.seconds)]
        env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
        before = served(servers, args.memcached)
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=600)
        n = served(servers, args.memcached) - before
        total, per_fn = 0, {}
        for profile in glob.glob(out + "-*"):  # one per thread
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                name = os.path.basename(os.path.abspath(tree)) + "." + profile.rsplit("-", 1)[1]
                shutil.copy(profile, os.path.join(args.keep, name))
            text = subprocess.run(["callgrind_annotate", "--threshold=100", profile],
                                  capture_output=True, text=True, check=True).stdout
            if LOAD_THREAD not in text:
                continue  # Python's thread, the dropped-write canaries' ones
            total += int(re.search(r"^([\d,]+) \([^)]*\)\s+PROGRAM TOTALS", text, re.M).group(1).replace(",", ""))
            for m in re.finditer(r"^\s*([\d,]+) \([^)]*\)\s+\S+?:(\S+)", text, re.M):
                per_fn[m.group(2)] = per_fn.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    if not total or not n:
        raise SystemExit(f"{tree}: no load thread in the profile, or no request served")
    top = sorted(((v / n, k) for k, v in per_fn.items()), reverse=True)[: args.top]
    return total / n, top


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        conn, protocol, c, p, seconds = sys.argv[2:7]
        child(json.loads(conn), protocol, int(c), int(p), float(seconds))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", help="source trees of the builds (the first is the reference)")
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=2.0, help="length of the run (in valgrind's time)")
    ap.add_argument("--memcached", action="store_true", help="memcached (90/10 get/set) instead of Redis GETs")
    ap.add_argument("--cluster", action="store_true", help="a local 3-node Redis Cluster (the lab's)")
    ap.add_argument("--top", type=int, default=12, help="functions to list per build")
    ap.add_argument("--keep", metavar="DIR", help="keep the profiles here, per build and thread, to read line by line "
                    "(callgrind_annotate --auto=yes DIR/<build>.<thread>)")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        print("engine_instructions: valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    if args.cluster:
        from cachemark.engine import target_config

        server = server_class("redis-cluster")(nodes="3").start()
        conn = target_config(server.url())
        servers = [f"127.0.0.1:{p.port}" for p in server.primaries]
        args.connections = -(-args.connections // len(server.primaries))  # a client holds one socket per node
    else:  # the lab's servers: a port somebody took first is given up for another
        server = server_class("memcached" if args.memcached else "redis")().start()
        servers = [f"127.0.0.1:{server.port}"]
        conn = {"protocol": "memcache_text" if args.memcached else "resp2", "servers": servers}
    try:
        counted = [(tree, *count(tree, conn, servers, args)) for tree in args.trees]
    finally:
        server.stop()
    what = "a 3-node cluster" if args.cluster else conn["protocol"]
    print(f"Instructions of the engine's load thread per request served ({what}, c={args.connections}, "
          f"P={args.pipeline}, 100 B values):")
    first = counted[0][1]
    for tree, per_op, top in counted:
        print(f"\n{tree}: {per_op:,.0f} per op ({per_op / first:.2f}× of {args.trees[0]})")
        for v, name in top:
            print(f"  {v:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
