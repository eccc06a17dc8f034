"""The engine's own instructions per op, counted (not timed): did a change make its code cheaper?

On a shared VM the engine's CPU per op moves ±10 % between runs (`engine_ab.py` pairs runs to
see through that), and its user time — the part its own code decides — moves even more. An
instruction count does not: this runs each build under valgrind's callgrind (the engine at
~1/8 of its speed, against servers started here, outside valgrind) and prints the
instructions its load thread executed per request the server executed (`INFO commandstats`,
memcached's `stats`; the prefill included: the same few thousand requests for every build),
and the functions they went to.

    python benchmarks/engine_instructions.py /tmp/before src            # Redis GETs, c=50, P=16
    python benchmarks/engine_instructions.py src --case memcache_text_p1 --case resp_get
    python benchmarks/engine_instructions.py src --check                # every case against its budget

The cases and their budgets are in `engine_instructions.toml` beside this file: every protocol
the engine speaks (RESP GET and SET, RESP over TLS, a Redis Cluster, memcached text, meta and
binary). A case runs a fixed number of ops, so its count moves only with the replies each read
happens to find (the spread stated there). `--check` fails (exit 1) when a case's count exceeds
its budget by more than that spread; `make test` runs it (tests/test_engine_instructions.py), so
raising a budget is a visible decision in a diff.

A build is a source tree whose cachemark package holds its `_engine.abi3.so` (as for
`engine_ab.py`). Needs valgrind (`apt-get install valgrind`). Instructions are not time —
cache misses, branch mispredictions and system calls are not in them — so confirm a change
with `engine_ab.py` too.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import redis

BUDGETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_instructions.toml")
# in a load thread's profile only (`engine::Worker::` in builds from before the engine was cut into modules)
LOAD_THREAD = re.compile(r"cachemark_load::engine::(worker|Worker)::")


@dataclass(frozen=True)
class Case:
    name: str
    server: str  # the lab's server kind and options, as a spawn: URL's rest: "redis", "redis?tls=1"
    protocol: str  # the URL's protocol parameter ("" for the scheme's own)
    mix: tuple[tuple[str, int], ...]
    connections: int
    pipeline: int
    ops: int
    budget: float = 0.0

    @property
    def memcached(self) -> bool:
        return self.server.startswith("memcached")


def load_cases(path: str = BUDGETS) -> tuple[dict[str, Case], float]:
    """The cases of engine_instructions.toml, and the spread a count may exceed its budget by."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    cases = {
        name: Case(name, c["server"], c.get("protocol", ""), tuple((op, int(w)) for op, w in c["mix"].items()),
                   c["connections"], c["pipeline"], c["ops"], c["budget"])
        for name, c in doc["cases"].items()
    }
    return cases, doc["spread"]


# In valgrind: one engine run of the config (argv[1]), by a Python started without its site packages and
# importing the engine alone — under callgrind each module imported costs seconds, and only the load thread counts.
CHILD = "import sys; from cachemark._engine import run_load; run_load(sys.argv[1])"


def served(servers: list[str], memcached: bool) -> int:
    """GETs and SETs the servers (host:port, or a redis URL) have executed: the ground truth of
    requests sent."""
    total = 0
    for where in servers:
        if memcached:
            host, port = where.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=5) as s:
                s.sendall(b"stats\r\n")
                text = b""
                while not text.endswith(b"END\r\n"):
                    text += s.recv(65536)
            stats = dict(line.split()[1:3] for line in text.decode().splitlines() if line.startswith("STAT "))
            total += int(stats["cmd_get"]) + int(stats["cmd_set"])
        else:
            stats = redis.Redis.from_url(where).info("commandstats")
            total += sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("get", "set"))
    return total


class Servers:
    """One lab server per case, started on first use and stopped at the end: cases counted at once
    must not count each other's requests."""

    def __init__(self) -> None:
        self.started: dict[str, object] = {}
        self.stack = contextlib.ExitStack()

    def config(self, case: Case) -> tuple[dict, list[str]]:
        """The engine's connection config for the case, and the servers it loads (memcached's host:port,
        a redis URL)."""
        from cachemark.engine import target_config
        from cachemark.lab import server_class

        if case.name not in self.started:
            kind, _, query = case.server.partition("?")
            options = dict(kv.split("=", 1) for kv in query.split("&") if kv)
            self.started[case.name] = self.stack.enter_context(server_class(kind)(**options))
        server = self.started[case.name]
        url = server.url()
        if case.protocol:
            url += ("&" if "?" in url else "?") + f"protocol={case.protocol}"
        conn = target_config(url)
        primaries = getattr(server, "primaries", None)
        if primaries:
            hosts = [f"redis://127.0.0.1:{p.port}" for p in primaries]
        else:
            hosts = [f"127.0.0.1:{server.port}" if case.memcached else server.url()]
        return conn, hosts

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def engine_config(conn: dict, case: Case, hosts: list[str]) -> dict:
    c = case.connections
    if len(hosts) > 1:
        c = -(-c // len(hosts))  # a cluster client holds one socket per node
    # io_uring, pinned: the budgets are of that loop (epoll's costs differ), not of whichever the host allows
    return {**conn, "io": "uring", "prefill": True, "threads": 1, "connections": c, "pipeline": case.pipeline,
            "ops": case.ops, "duration_s": 600, "warmup_s": 0, "keys": {"count": 1000, "prefix": "cm:in:"},
            "values": {"sizes": [[100, 1]]}, "mix": [{"op": op, "weight": w} for op, w in case.mix],
            "verify_fraction": 0.01}


def count(tree: str, case: Case, servers: Servers, keep: str | None = None) -> tuple[float, list[tuple[float, str]]]:
    """Runs build `tree` under callgrind: its load threads' instructions per request the servers
    executed, and the top functions' (their own instructions, inlined callees included)."""
    conn, hosts = servers.config(case)
    config = json.dumps(engine_config(conn, case, hosts))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        argv = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}",
                sys.executable, "-S", "-c", CHILD, config]
        env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
        before = served(hosts, case.memcached)
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=600)
        n = served(hosts, case.memcached) - before
        total, per_fn = 0, {}
        for profile in glob.glob(out + "-*"):  # one per thread
            if keep:
                os.makedirs(keep, exist_ok=True)
                name = f"{os.path.basename(os.path.abspath(tree))}.{case.name}.{profile.rsplit('-', 1)[1]}"
                shutil.copy(profile, os.path.join(keep, name))
            text = subprocess.run(["callgrind_annotate", "--threshold=100", profile],
                                  capture_output=True, text=True, check=True).stdout
            if not LOAD_THREAD.search(text):
                continue  # Python's thread, the dropped-write canaries' ones
            total += int(re.search(r"^([\d,]+) \([^)]*\)\s+PROGRAM TOTALS", text, re.M).group(1).replace(",", ""))
            for m in re.finditer(r"^\s*([\d,]+) \([^)]*\)\s+\S+?:(\S+)", text, re.M):
                per_fn[m.group(2)] = per_fn.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    if not total or not n:
        raise SystemExit(f"{tree} {case.name}: no load thread in the profile, or no request served")
    return total / n, sorted(((v / n, k) for k, v in per_fn.items()), reverse=True)


def check(tree: str, cases: dict[str, Case], spread: float, jobs: int) -> int:
    """Every case against its budget: 0 when each is within budget × (1 + spread), else 1."""
    with Servers() as servers:
        for case in cases.values():
            servers.config(case)  # started here, one at a time, not from the pool's threads
        with ThreadPoolExecutor(jobs) as pool:
            counted = list(pool.map(lambda c: (c, count(tree, c, servers)[0]), cases.values()))
    print(f"Instructions of the engine's load thread per request served ({tree}; a budget may be exceeded by "
          f"{spread:.0%}, the spread measured):")
    over = []
    for case, per_op in counted:
        limit = case.budget * (1 + spread)
        verdict = "ok" if per_op <= limit else "OVER"
        ratio = per_op / case.budget
        print(f"  {case.name:<20} {per_op:8,.0f}   budget {case.budget:8,.0f}   {ratio:5.2f}×  {verdict}")
        if per_op > limit:
            over.append(f"{case.name}: {per_op:,.0f} instructions per op, over its budget of {case.budget:,.0f} "
                        f"by {per_op / case.budget - 1:.1%} (more than the {spread:.0%} spread)")
    for line in over:
        print(line, file=sys.stderr)
    return 1 if over else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", help="source trees of the builds (the first is the reference)")
    ap.add_argument("--case", action="append", help="a case of the budgets file (repeatable; default: resp_get)")
    ap.add_argument("--budgets", default=BUDGETS, help="the cases and budgets (default: engine_instructions.toml)")
    ap.add_argument("--check", action="store_true", help="every case (or those named) against its budget; "
                    "exit 1 when one is over (one tree)")
    ap.add_argument("--jobs", type=int, default=2, help="cases counted at once (--check)")
    ap.add_argument("--top", type=int, default=12, help="functions to list per build")
    ap.add_argument("--keep", metavar="DIR", help="keep the profiles here, per build, case and thread, to read line "
                    "by line (callgrind_annotate --auto=yes DIR/<build>.<case>.<thread>)")
    args = ap.parse_args()
    cases, spread = load_cases(args.budgets)
    unknown = sorted(set(args.case or []) - set(cases))
    if unknown:
        ap.error(f"no case {unknown[0]!r} in {args.budgets} (cases: {', '.join(cases)})")
    if not shutil.which("valgrind"):
        print("engine_instructions: valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    if args.check:
        if len(args.trees) != 1:
            ap.error("--check takes one tree")
        chosen = {n: cases[n] for n in args.case} if args.case else cases
        return check(args.trees[0], chosen, spread, args.jobs)
    with Servers() as servers:
        for name in args.case or ["resp_get"]:
            case = cases[name]
            counted = [(tree, *count(tree, case, servers, args.keep)) for tree in args.trees]
            print(f"\n{name}: instructions of the engine's load thread per request served ({case.server}"
                  f"{' ' + case.protocol if case.protocol else ''}, c={case.connections}, P={case.pipeline}, "
                  f"100 B values; budget {case.budget:,.0f}):")
            first = counted[0][1]
            for tree, per_op, top in counted:
                print(f"\n{tree}: {per_op:,.0f} per op ({per_op / first:.2f}× of {args.trees[0]})")
                for v, fn in top[: args.top]:
                    print(f"  {v:8.1f}  {fn}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
