"""A trace as a workload (`--trace`): the recorded ops, keys, order and timing, against real servers,
through the Python workers and the native engine.

Ground truth comes from the trace itself: the op counts per type, and the hits a cold cache
without evictions must give (a get hits exactly when its key was set before and not deleted
since — so the per-key order of the requests must survive the split over workers), and the
recorded span divided by the speed for the replay's duration.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import redis

from cachemark.workload.replay import prepare, spread_ties
from cachemark.workload.traces.writer import TraceWriter

sys.path.insert(0, str(Path(__file__).parent))
from conftest import run_cli  # noqa: E402

SPAN_S = 1.5


def write_trace(path: Path, requests: int = 3000, keys: int = 400, seed: int = 5) -> dict:
    """A cachemark trace at distinct microsecond times over SPAN_S; returns what a cold cache must give."""
    rng = random.Random(seed)
    present: set[bytes] = set()
    expected = {"get": 0, "set": 0, "delete": 0, "hits": 0}
    with TraceWriter(path, raw_keys=True) as writer:
        for i in range(requests):
            key = f"user:{int(rng.paretovariate(1.1)) % keys}".encode()
            op = rng.choices(("get", "set", "delete"), (70, 25, 5))[0]
            writer.write(int(i * SPAN_S * 1e6 / requests), op, key, value_size=rng.randint(20, 400))
            expected[op] += 1
            if op == "get":
                expected["hits"] += key in present
            elif op == "set":
                present.add(key)
            else:
                present.discard(key)
    return expected


def test_ties_of_a_coarse_clock_are_spread_to_the_next_time():
    t = np.array([0, 0, 0, 0, 1_000_000, 1_000_000, 3_000_000], dtype=np.int64)
    assert spread_ties(t).tolist() == [0, 250_000, 500_000, 750_000, 1_000_000, 2_000_000, 3_000_000]
    distinct = np.array([5, 9, 12], dtype=np.int64)
    assert spread_ties(distinct).tolist() == [5, 9, 12]


def test_shares_keep_every_request_and_each_key_on_one_worker(tmp_path):
    expected = write_trace(tmp_path / "t.cmtrace")
    got = prepare(str(tmp_path / "t.cmtrace"), 3, directory=str(tmp_path / "shares"), amplify=2)
    assert got.ops == {"get": 2 * expected["get"], "set": 2 * expected["set"], "delete": 2 * expected["delete"]}
    owners: dict[int, int] = {}
    total = 0
    for w in range(3):
        with np.load(tmp_path / "shares" / f"worker-{w}.npz") as share:
            assert np.all(np.diff(share["at_ns"].astype(np.int64)) >= 0)  # in recorded order
            for k in set(share["keys"].tolist()):
                assert owners.setdefault(k, w) == w
            total += len(share["keys"])
    assert total == got.records == 2 * 3000 and len(owners) == got.keys


@pytest.mark.parametrize(("workers", "engine"), [(1, False), (3, False), (3, True)])
def test_a_replay_runs_the_traces_ops_in_each_keys_order(tmp_path, redis_server, workers, engine):
    expected = write_trace(tmp_path / "t.cmtrace")
    client = redis.Redis.from_url(redis_server.url())
    client.config_resetstat()
    url = redis_server.url() + ("?client=engine&pipeline=4" if engine else "")
    result = run_cli("run", "-t", url, "--trace", "t.cmtrace", "--speed", "0", "--workers",
                     str(workers), "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "replay of the trace t.cmtrace (as fast as possible)" in " ".join(result.stdout.split())
    ops = json.loads((tmp_path / "out.json").read_text())["runs"][0]["phases"][0]["ops"]
    assert {op: ops[op]["count"] for op in ops} == {op: expected[op] for op in ("get", "set", "delete")}
    assert ops["get"]["hits"] == expected["hits"]  # a cold cache, no evictions: the trace's own hits
    calls = {name: client.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("set",)}
    assert calls["set"] >= expected["set"]  # the server saw every recorded write (and the probe's few)


def _server_times(client: redis.Redis, count: int, namespace_seen: list[str], times: list[float]) -> None:
    """Redis MONITOR: the server's own timestamp of every replayed command (the ground truth of when it was sent)."""
    with client.monitor() as monitor:
        namespace_seen.append("ready")
        for event in monitor.listen():
            command = event["command"]
            key = command.split(" ", 2)[1] if " " in command else ""
            if command.startswith(("GET cm:", "SET cm:", "DEL cm:")) and key.rsplit(":", 1)[-1].isdigit():
                times.append(event["time"])
                if len(times) >= count:
                    return


@pytest.mark.parametrize(("speed", "client"), [(1, ""), (2, ""), (1, "?client=engine")])
def test_the_recorded_timing_is_kept_at_the_speed_asked(tmp_path, spawn, speed, client):
    """The server's MONITOR clock: the requests' offsets match their recorded offsets ÷ speed to within
    5 % of the span, percentile by percentile, and the span too."""
    import threading
    import time

    server = spawn("redis")
    requests = 1200
    write_trace(tmp_path / "t.cmtrace", requests=requests)
    seen: list[str] = []
    times: list[float] = []
    watcher = threading.Thread(target=_server_times, args=(redis.Redis.from_url(server.url()), requests, seen, times),
                               daemon=True)
    watcher.start()
    while not seen:
        time.sleep(0.01)
    result = run_cli("run", "-t", server.url() + client, "--trace", "t.cmtrace", "--speed", str(speed),
                     "--workers", "2", "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    watcher.join(timeout=10)
    assert result.returncode == 0, result.stdout + result.stderr
    phase = json.loads((tmp_path / "out.json").read_text())["runs"][0]["phases"][0]
    assert phase["mode"] == "open" and phase["missed"] == 0
    assert len(times) == requests, len(times)
    span = SPAN_S * (requests - 1) / requests / speed
    sent = np.sort(np.array(times) - times[0])
    recorded = np.arange(requests) * SPAN_S / requests / speed
    # the 1st to 99th percentile of send times spans what was recorded, and the percentiles in between
    # sit where recorded: typically within 5 % of the span, none off by 10 % (a straggler or a stall of a
    # busy core is one moment, not the replay's timing)
    q = np.linspace(0.01, 0.99, 50)
    got, want = np.quantile(sent, q), np.quantile(recorded, q)
    assert abs((got[-1] - got[0]) - (want[-1] - want[0])) < 0.05 * span, (got[-1] - got[0], want[-1] - want[0])
    off = np.abs((got - got[0]) - (want - want[0]))
    assert np.median(off) < 0.05 * span and np.max(off) < 0.10 * span, off  # one stall of a busy core: ≤ 10 %


def test_bad_replays_are_one_line(tmp_path):
    result = run_cli("run", "-t", "memory://", "--trace", "missing.csv", "--no-calibrate", cwd=tmp_path)
    assert result.returncode == 2 and "missing.csv" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = run_cli("run", "-t", "memory://", "--speed", "2", "--no-calibrate", cwd=tmp_path)
    assert result.returncode == 2 and "go with --trace FILE" in result.stderr
