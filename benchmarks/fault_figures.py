"""What a dead or hung server does to a run: time to exit, exit code, what the results file says.

A private redis is killed (SIGKILL) or stopped (SIGSTOP) one second into a 30-s timed phase,
through redis-py and through the native engine. With the default ``--on-error stop`` the run
must end a few seconds later, exit 1, keep what it measured and say why (issue 10's figures).

    .venv/bin/python benchmarks/fault_figures.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from cachemark.lab import spawn_server


def _wait_for_ops(port: int, minimum: int = 2000) -> None:
    client = redis.Redis(port=port)
    while client.info("stats")["total_commands_processed"] < minimum:
        time.sleep(0.05)
    client.close()


def one(fault: signal.Signals, engine: bool, where: Path) -> str:
    server = spawn_server("redis")
    query = "?client=engine" if engine else ("?socket_timeout=1" if fault == signal.SIGSTOP else "")
    out = where / "out.json"
    proc = subprocess.Popen([sys.executable, "-m", "cachemark", "run", "-t", server.url() + query, "--duration",
                             "30s", "--warmup", "0", "--no-calibrate", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for_ops(server.port)
        time.sleep(1)
        os.kill(server.pid(), fault)
        faulted = time.monotonic()
        proc.communicate(timeout=120)
        took = time.monotonic() - faulted
    finally:
        if fault == signal.SIGSTOP:
            os.kill(server.pid(), signal.SIGCONT)
        server.stop()
    run = json.loads(out.read_text())["runs"][0]
    errors = sum(sum(op["errors"].values()) for phase in run["phases"] for op in phase["ops"].values())
    client = "engine" if engine else "redis-py"
    return (f"| {fault.name} | {client} | {took:.1f} s | {proc.returncode} | {run['status']}, {errors:,} errors: "
            f"{run['reason'][:100]} |")


def main() -> None:
    print("| fault | client | time to exit | exit | results file |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for fault in (signal.SIGKILL, signal.SIGSTOP):
            for engine in (False, True):
                print(one(fault, engine, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
