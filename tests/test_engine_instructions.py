"""The engine's instructions per request, per protocol, within their checked-in budgets.

`benchmarks/engine_instructions.py --check` runs each case of `benchmarks/engine_instructions.toml`
(RESP GET and SET, TLS, a Redis Cluster, memcached text, meta and binary) under valgrind's callgrind
and compares its count with the budget: an instruction count needs no quiet machine (run to run it
moves under 1 %, even beside busy loops), so a slower build fails here, not in a benchmark run by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "engine_instructions.py")
SRC = os.path.join(ROOT, "src")

def _uring_disabled() -> bool:
    try:
        with open("/proc/sys/kernel/io_uring_disabled") as f:
            return f.read().strip() != "0"
    except OSError:
        return False  # an older kernel: io_uring is on unless the engine says otherwise


pytestmark = [
    # alone: at pipeline 1 the loop's rounds per op follow how promptly replies come back, so a count
    # taken beside the parallel pass's load came out 3.4 % over its budget (1,411 against 1,365). Alone,
    # two cases at a time (the script's default, half the time): the pipeline-1 counts 1.3 % and 0.4 % over
    # one at a time (1,343-1,344 against 1,326-1,327; 2,194-2,195 against 2,185-2,186), the others within
    # a count, every case still within its budget before the 3 % spread
    pytest.mark.alone,
    pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed"),
    pytest.mark.skipif(_uring_disabled(), reason="io_uring is disabled here: the budgets are of the io_uring loop"),
]


def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, SRC, "--check", "--jobs", "2", *args],
                          capture_output=True, text=True, timeout=600)


def test_every_protocol_within_its_instruction_budget() -> None:
    done = check()
    assert done.returncode == 0, done.stdout + done.stderr
    for case in ("resp_get", "resp_set", "resp_tls", "resp_cluster", "memcache_text", "memcache_meta",
                 "memcache_binary"):
        assert f"  {case} " in done.stdout


def test_a_count_over_its_budget_fails_the_check(tmp_path) -> None:
    """The same build against a budget a fifth lower than its count: as a build 25 % slower would be."""
    with open(os.path.join(ROOT, "benchmarks", "engine_instructions.toml")) as f:
        text = f.read()
    budgets = tmp_path / "budgets.toml"
    section = text.index("[cases.memcache_text]")
    at = text.index("budget = ", section)  # memcache_text's, whatever it is today
    end = text.index("\n", at)
    budgets.write_text(text[:at] + "budget = 1200" + text[end:])
    done = check("--budgets", str(budgets), "--case", "memcache_text")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "memcache_text: " in done.stderr and "over its budget of 1,200" in done.stderr
