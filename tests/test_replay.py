"""A trace as a workload (`--trace`): the recorded ops, keys, order and timing, against real servers,
through the Python workers and the native engine.

Ground truth comes from the trace itself: the op counts per type, and the hits a cold cache
without evictions must give (a get hits exactly when its key was set before and not deleted
since — so the per-key order of the requests must survive the split over workers), and the
recorded span divided by the speed for the replay's duration.
"""

from __future__ import annotations

import importlib
import json
import random
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import redis

from cachemark.workload.replay import engine_stream, load_share, prepare, spread_ties
from cachemark.workload.traces.writer import TraceWriter
from conftest import run_cli  # noqa: E402

SPAN_S = 1.5


def write_trace(path: Path, requests: int = 3000, keys: int = 400, seed: int = 5) -> dict:
    """A cachemark trace at distinct microsecond times over SPAN_S; returns what a cold cache must give."""
    rng = random.Random(seed)
    present: set[bytes] = set()
    expected = {"get": 0, "set": 0, "delete": 0, "hits": 0, "deleted": 0}
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
                expected["deleted"] += key in present
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
        share = load_share(str(tmp_path / "shares"), w)
        assert np.all(np.diff(share.at_ns.astype(np.int64)) >= 0)  # in recorded order
        for k in set(share.keys.tolist()):
            assert owners.setdefault(k, w) == w
        total += len(share)
    assert total == got.records == 2 * 3000 and len(owners) == got.keys


@pytest.mark.parametrize(("workers", "engine", "server"), [(1, False, "redis"), (3, False, "redis"),
                                                       (3, True, "redis"), (2, False, "memcached"),
                                                       (2, True, "memcached")])
def test_a_replay_runs_the_traces_ops_in_each_keys_order(tmp_path, request, workers, engine, server):
    expected = write_trace(tmp_path / "t.cmtrace")
    served = request.getfixturevalue(f"{server}_server")
    # the server is the worker's shared one: its SET count before the run, not CONFIG RESETSTAT (which
    # would zero the counters every other test on it reads its deltas from)
    sets_before = _redis_sets(served.url()) if server == "redis" else 0
    url = served.url() + ("?client=engine&pipeline=4" if engine else "")
    result = run_cli("run", "-t", url, "--trace", "t.cmtrace", "--speed", "0", "--workers",
                     str(workers), "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "replay of the trace t.cmtrace (as fast as possible), keys and value sizes as the trace recorded them" \
        in " ".join(result.stdout.split())  # not the workload's defaults (10,000 uniform keys, 1-4000 B)
    ops = json.loads((tmp_path / "out.json").read_text())["runs"][0]["phases"][0]["ops"]
    assert {op: ops[op]["count"] for op in ops} == {op: expected[op] for op in ("get", "set", "delete")}
    assert ops["get"]["hits"] == expected["hits"]  # a cold cache, no evictions: the trace's own hits
    # a delete's hit: the key was there (DEL's count, memcached's DELETED), counted alike on every path
    assert (ops["delete"]["hits"], ops["delete"]["misses"]) == (expected["deleted"],
                                                                expected["delete"] - expected["deleted"])
    if server == "redis":  # the server saw every recorded write (and the probe's few)
        assert _redis_sets(served.url()) - sets_before >= expected["set"]


def _redis_sets(url: str) -> int:
    """The SET commands redis has served (INFO commandstats)."""
    with redis.Redis.from_url(url) as client:
        return client.info("commandstats").get("cmdstat_set", {}).get("calls", 0)


def test_a_replay_through_a_driver_runs_every_request_in_segments(tmp_path, redis_server):
    """100,000 recorded requests on two Go drivers: each share (~50,000) goes in two segments (x-segments,
    docs/drivers.md), and every request runs once, in its key's order: the trace's own counts and hits."""
    from driver_kit import needs_driver, with_client

    expected = write_trace(tmp_path / "t.cmtrace", requests=100_000, keys=5_000)
    url = with_client(redis_server.url(), needs_driver("go-redis"))
    result = run_cli("run", "-t", url, "--trace", "t.cmtrace", "--speed", "0", "--workers", "2",
                     "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    ops = json.loads((tmp_path / "out.json").read_text())["runs"][0]["phases"][0]["ops"]
    assert {op: ops[op]["count"] for op in ops} == {op: expected[op] for op in ("get", "set", "delete")}
    assert ops["get"]["hits"] == expected["hits"]


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
@pytest.mark.alone  # times a schedule: three tests beside it stalled one send by 0.1 s of a 0.75-s span
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


def test_the_html_re_run_spec_of_a_replay_runs_again(tmp_path):
    """The page's TOML names the user's trace, not the directory its shares were prepared in (removed
    with the run), nor what the replay read from the trace: saved and run, it replays the trace again."""
    import html
    import re

    write_trace(tmp_path / "app.cmtrace", requests=300, keys=40)
    result = run_cli("run", "-t", "memory://", "--trace", "app.cmtrace", "--speed", "0", "--duration", "5",
                     "--no-calibrate", "-o", "first.json", "--html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "first.html").read_text()
    toml = html.unescape(re.search(r'<pre id="spec-toml">(.*?)</pre>', page, re.S).group(1))
    assert "prepared" not in toml and "cachemark-replay-" not in page and 'path = "app.cmtrace"' in toml
    assert "duration = 5" in toml and "phases" not in toml
    (tmp_path / "again.toml").write_text(toml)
    again = run_cli("run", "again.toml", "--no-calibrate", "-o", "again.json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    first, second = (json.loads((tmp_path / f"{n}.json").read_text())["runs"][0]["phases"][0]["ops"]
                     for n in ("first", "again"))
    assert {op: figures["count"] for op, figures in first.items()} == {
        op: figures["count"] for op, figures in second.items()}


def test_bad_replays_are_one_line(tmp_path):
    result = run_cli("run", "-t", "memory://", "--trace", "missing.csv", "--no-calibrate", cwd=tmp_path)
    assert result.returncode == 2 and "missing.csv" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = run_cli("run", "-t", "memory://", "--speed", "2", "--no-calibrate", cwd=tmp_path)
    assert result.returncode == 2 and "go with --trace FILE" in result.stderr


# -- bounded memory: the same shares and engine stream as the whole trace in memory gave -------------

def _reference_spread_ties(t_us: np.ndarray) -> np.ndarray:
    """spread_ties as it was when prepare held the whole trace in memory (the reference below uses it)."""
    if len(t_us) < 2:
        return t_us
    starts = np.flatnonzero(np.r_[True, t_us[1:] != t_us[:-1]])
    if len(starts) == len(t_us):
        return t_us
    steps = np.diff(t_us[starts])
    step = np.r_[steps, int(np.median(steps)) if len(steps) else 1_000_000]
    counts = np.diff(np.r_[starts, len(t_us)])
    group = np.repeat(np.arange(len(starts)), counts)
    rank = np.arange(len(t_us)) - starts[group]
    return t_us + (rank * step[group]) // counts[group]


def _reference_prepare(path: Path, workers: int, speed: float, amplify: int, limit: int | None
                       ) -> tuple[dict, list[dict[str, np.ndarray]]]:
    """The in-memory prepare of cachemark before its memory was bounded (the whole trace concatenated,
    a global stable argsort by time, np.unique for key ids, per-worker masks and a stable argsort by due
    time), kept verbatim apart from writing files: the summary and each worker's arrays."""
    from cachemark.workload.replay import MIN_SIZE, REPLAYED
    from cachemark.workload.traces import open_trace
    from cachemark.workload.traces.record import OPS

    reader = open_trace(path)
    columns, taken = [], 0
    for batch in reader.batches():
        records = batch.records if limit is None else batch.records[:limit - taken]
        columns.append(records[["t_us", "op", "key_hash", "value_size"]].copy())
        taken += len(records)
        if limit is not None and taken >= limit:
            break
    records = np.concatenate(columns)
    ops = records["op"]
    keep = np.isin(ops, [OPS.index(name) for name in REPLAYED])
    skipped = {OPS[code]: int(n) for code, n in zip(*np.unique(ops[~keep], return_counts=True), strict=True)}
    records = records[keep]
    records = records[np.argsort(records["t_us"], kind="stable")]
    distinct, key_ids = np.unique(records["key_hash"], return_inverse=True)
    present, codes = np.unique(records["op"], return_inverse=True)
    sizes = np.maximum(records["value_size"], MIN_SIZE).astype(np.uint32)
    t = _reference_spread_ties(records["t_us"].astype(np.int64))
    at = np.zeros(len(t), dtype=np.uint64) if speed == 0 else ((t - t[0]) * (1000.0 / speed)).astype(np.uint64)
    n_keys = len(distinct)
    shares = []
    for w in range(workers):
        parts = []
        for copy in range(amplify):
            ids = key_ids.astype(np.int64) + copy * n_keys
            mine = ((ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) >> np.uint64(33)) % workers) == w
            parts.append((codes[mine], ids[mine], sizes[mine], at[mine]))
        entries, ids, share_sizes, due = (np.concatenate([p[i] for p in parts]) for i in range(4))
        order = np.argsort(due, kind="stable")
        shares.append({"entries": entries[order].astype(np.uint8), "keys": ids[order].astype(np.uint32),
                       "sizes": share_sizes[order], "at_ns": due[order]})
    counts = np.bincount(codes, minlength=len(present)) * amplify
    summary = {"ops": dict(zip([OPS[c] for c in present.tolist()], counts.tolist(), strict=True)),
               "keys": n_keys * amplify, "records": len(records) * amplify, "span_s": int(t[-1] - t[0]) / 1e6,
               "min_size": int(sizes.min()), "max_size": int(sizes.max()), "skipped": skipped}
    return summary, shares


def _reference_engine(shares: list[dict[str, np.ndarray]]) -> dict[str, bytes]:
    """engine_stream as it was: every share concatenated, then a stable argsort by due time."""
    order = np.argsort(np.concatenate([s["at_ns"] for s in shares]), kind="stable")
    return {name: np.concatenate([s[column] for s in shares])[order].astype(dtype).tobytes()
            for name, column, dtype in (("ops.u8", "entries", "u1"), ("keys.u32", "keys", "<u4"),
                                        ("sizes.u32", "sizes", "<u4"), ("at.u64", "at_ns", "<u8"))}


def _interleaved_trace(path: Path, requests: int = 6000, seed: int = 3) -> Path:
    """Three clients' requests merged out of time order (a client's run of lines, then another's), on a
    millisecond clock (many ties, the last time too), some multi-key ops a replay skips."""
    rng = random.Random(seed)
    clock = [0, 0, 0]
    with TraceWriter(path) as writer:
        written = 0
        while written < requests:
            client = rng.randrange(3)
            for _ in range(min(rng.randint(1, 300), requests - written)):
                clock[client] += rng.choice((0, 0, 0, 1000, 2000))
                op = rng.choices(("get", "set", "delete", "exists", "incr", "get_many"), (60, 25, 5, 3, 2, 5))[0]
                key = f"k{int(rng.paretovariate(1.2)) % 700}".encode()
                writer.write(clock[client], op, key, value_size=rng.choice((0, rng.randint(1, 5000))), client=client)
                written += 1
    return path


def _same_times_trace(path: Path, requests: int = 3000) -> Path:
    """Every request at one time: one tie group, no step to the next time, one due time at every speed."""
    with TraceWriter(path) as writer:
        for i in range(requests):
            writer.write(5_000_000, ("get", "set")[i % 2], f"k{i % 97}".encode(), value_size=i % 300)
    return path


def _one_request_trace(path: Path) -> Path:
    with TraceWriter(path) as writer:
        writer.write(7, "set", b"only", value_size=10)
    return path


TINY = {"replay.BLOCK": 37, "replay.READ_ROWS": 11, "replay_spool.CHUNK": 101, "merge.BUDGET": 20,
        "merge.MIN_BLOCK": 3, "merge.FAN_IN": 3, "ties.PASS_ROWS": 53, "ties.DIGIT_BITS": 3,
        "columns.SEARCH_WINDOW": 2}


@pytest.mark.parametrize("blocks", ["default", "tiny"])
@pytest.mark.parametrize(("trace", "workers", "speed", "amplify", "limit"), [
    ("interleaved", 1, 1.0, 1, None), ("interleaved", 3, 1.0, 1, None), ("interleaved", 2, 0, 3, None),
    ("interleaved", 3, 2.0, 2, None), ("interleaved", 2, 1.0, 1, 2500), ("interleaved", 4, 0.5, 2, 4100),
    ("same_times", 2, 1.0, 2, None), ("same_times", 3, 0, 2, None), ("one_request", 2, 1.0, 3, None),
])
def test_prepare_in_bounded_memory_equals_the_whole_trace_in_memory(tmp_path, monkeypatch, blocks, trace, workers,
                                                                     speed, amplify, limit):
    """Shares, summary and engine stream equal the in-memory algorithm's, byte for byte — with the
    default block sizes and with tiny ones (every chunk, run, merge round, tie group and due group
    then crosses block edges; the radix selection of the median step takes several passes)."""
    if blocks == "tiny":
        for name, value in TINY.items():
            module, attribute = name.split(".")
            monkeypatch.setattr(importlib.import_module(f"cachemark.workload.{module}"), attribute, value)
    path = {"interleaved": _interleaved_trace, "same_times": _same_times_trace,
            "one_request": _one_request_trace}[trace](tmp_path / "t.cmtrace")
    want, want_shares = _reference_prepare(path, workers, speed, amplify, limit)
    got = prepare(str(path), workers, speed=speed, amplify=amplify, limit=limit, directory=str(tmp_path / "p"))
    assert {k: v for k, v in got.__dict__.items() if k != "directory"} == want
    for w, expected in enumerate(want_shares):
        share = load_share(got.directory, w)
        for column, array in expected.items():
            mapped = getattr(share, column)
            assert mapped.dtype == array.dtype and np.array_equal(mapped, array), (w, column)
        assert len(share) == len(expected["at_ns"])
        assert [b for batch in share.batches(5) for b in zip(*batch)] == \
            list(zip(*(expected[c].tolist() for c in ("entries", "keys", "sizes"))))
        gaps = share.gaps()
        assert [next(gaps) for _ in range(len(share) + 2)] == np.diff(expected["at_ns"].astype(np.int64)).tolist() + \
            [0] * (3 if len(share) else 2)
        assert share.first_due() == (int(expected["at_ns"][0]) if len(share) else 0)
        for lo, hi in ((0, 10**6), (10**6, 10**9), (0, 2**62), (5, 5)):
            assert share.due_between(lo, hi) == max(0, int(np.searchsorted(expected["at_ns"], hi) -
                                                           np.searchsorted(expected["at_ns"], lo)))
    engine = Path(engine_stream(got.directory, workers))
    assert {name: (engine / name).read_bytes() for name in _reference_engine(want_shares)} == \
        _reference_engine(want_shares)
    assert sorted(p.name for p in Path(got.directory).iterdir()) == \
        sorted(["engine", "shares.json", *(f"worker-{w}" for w in range(workers))])  # no spool, no partial


def test_spread_ties_a_range_at_a_time_equals_the_whole_array(tmp_path, monkeypatch):
    import cachemark.workload.ties as ties
    from cachemark.workload.columns import ColumnWriter

    monkeypatch.setattr(ties, "PASS_ROWS", 7)
    rng = np.random.default_rng(2)
    for case in range(30):
        groups = rng.integers(1, 6, rng.integers(1, 40))
        t = np.repeat(np.cumsum(rng.integers(1, [2, 50, 10**9][case % 3], len(groups))), groups).astype(np.int64)
        writer = ColumnWriter(tmp_path / f"c{case}", (("t_us", "t.i64", "<i8"),))
        writer.append({"t_us": t})
        spread = ties.SpreadTimes(writer.publish())
        want = spread_ties(t)
        for block in (1, 2, 3, 5, len(t)):
            got = np.concatenate([spread.spread(a, min(a + block, len(t))) for a in range(0, len(t), block)])
            assert got.tolist() == want.tolist(), (case, block)


def test_the_merge_of_sorted_runs_is_a_stable_sort(tmp_path):
    from cachemark.workload.columns import ColumnReader, ColumnWriter
    from cachemark.workload.merge import merge_sorted

    layout = (("key", "key.i64", "<i8"), ("tag", "tag.u32", "<u4"))
    rng = np.random.default_rng(4)
    runs, keys = [], []
    for r in range(9):
        key = np.sort(rng.integers(0, 30, rng.integers(0, 60)))
        writer = ColumnWriter(tmp_path / f"run-{r}", layout)
        writer.append({"key": key, "tag": np.arange(len(key)) + 1000 * r})
        runs.append(writer.publish())
        keys.append(key)
    out = ColumnWriter(tmp_path / "out", layout)
    merge_sorted(runs, "key", out, scratch=tmp_path / "rounds", budget=4, fan_in=2)
    merged = out.publish().read(0, 10**6)
    everything = np.concatenate(keys)
    tags = np.concatenate([np.arange(len(k)) + 1000 * r for r, k in enumerate(keys)])
    order = np.argsort(everything, kind="stable")
    assert merged["key"].tolist() == everything[order].tolist() and merged["tag"].tolist() == tags[order].tolist()
    assert not (tmp_path / "rounds").exists() or not any((tmp_path / "rounds").iterdir())  # rounds cleaned up
    assert len(ColumnReader(tmp_path / "out", layout)) == len(everything)


def test_a_prepare_cut_short_is_never_read_as_whole(tmp_path, monkeypatch):
    import cachemark.workload.replay as replay

    path = _interleaved_trace(tmp_path / "t.cmtrace", requests=2000)
    prepare(str(path), 2, directory=str(tmp_path / "p"))
    assert len(load_share(str(tmp_path / "p"), 0)) > 0

    def fail(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(replay._ShareSplitter, "_emit", fail)
    with pytest.raises(OSError):
        prepare(str(path), 2, directory=str(tmp_path / "p"))  # the same directory: the old shares lose their mark
    with pytest.raises(FileNotFoundError, match="not a whole prepared replay"):
        load_share(str(tmp_path / "p"), 0)
    assert not (tmp_path / "p" / ".spool").exists()


#: The block sizes a quarter of the defaults (their regime is reached by 0.5×10⁶ requests then), so the
#: test takes seconds; the defaults were measured the same way up to 10⁷ requests (docs/traces.md).
_SMALLER_BLOCKS = """
import importlib
for name, value in {"replay.BLOCK": 1 << 16, "replay.READ_ROWS": 1 << 14, "replay_spool.CHUNK": 1 << 17,
                    "merge.BUDGET": 1 << 17, "ties.PASS_ROWS": 1 << 16}.items():
    module, attribute = name.split(".")
    setattr(importlib.import_module(f"cachemark.workload.{module}"), attribute, value)
"""
_PREPARE = _SMALLER_BLOCKS + """
import sys, tracemalloc
from cachemark.workload.replay import prepare
tracemalloc.start()
got = prepare(sys.argv[1], 2, directory=sys.argv[2], speed=1.0)
print(got.records, tracemalloc.get_traced_memory()[1])
"""
_READ = _SMALLER_BLOCKS + """
import collections, sys
from cachemark.workload.replay import load_share
share = load_share(sys.argv[2], 0)
collections.deque(share.batches(), maxlen=0)
gaps = share.gaps()
collections.deque((next(gaps) for _ in range(len(share))), maxlen=0)
# VmHWM: this process's own peak RSS (ru_maxrss would carry the forking parent's across exec)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(len(share), peak * 1024)
"""


def _oracle_trace(path: Path, requests: int) -> Path:
    """libCacheSim oracleGeneral (the fastest to write and read): skewed ids over 10⁵ keys, a one-second
    clock (ties) and one request in seven a second late (out of order: sorted runs, then a merge)."""
    from cachemark.workload.traces.formats import oracle_bytes

    rng = np.random.default_rng(1)
    with open(path, "wb") as out:
        for start in range(0, requests, 1_000_000):
            i = np.arange(start, min(start + 1_000_000, requests))
            t = i // 20_000 + (i % 7 == 0)
            ids = (rng.random(len(i)) ** 4 * 100_000).astype(np.uint64)
            out.write(oracle_bytes(t, ids, rng.integers(1, 4000, len(i))))
    return path


def _measure(script: str, *args: Path) -> tuple[int, int]:
    result = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    count, peak = map(int, result.stdout.split())
    return count, peak


def test_replay_memory_does_not_grow_with_the_trace(tmp_path):
    """prepare's peak in a fresh process, traced by tracemalloc (which sees numpy's buffers), and a
    worker's reading of its share (batches and gaps) by its peak RSS: 4× the requests, at most a few
    MiB more (the in-memory prepare took ~160 MiB more per 10⁶ requests, a whole share 17 bytes a request)."""
    prepared, read = {}, {}
    for requests in (500_000, 2_000_000):
        path = _oracle_trace(tmp_path / f"t{requests}.oracleGeneral.bin", requests)
        shares = tmp_path / f"p{requests}"
        records, prepared[requests] = _measure(_PREPARE, path, shares)
        assert records == requests
        rows, read[requests] = _measure(_READ, path, shares)
        assert rows > requests // 3
        path.unlink()
    # Margins (measured beside a busy loop; what a process allocates, not how fast it runs, so load does not
    # move them): prepare grew 0.3 MiB against 2 (7x), peaked at 15.9 MiB against 40 (2.5x); the read's
    # peak grew 0.0 MiB against 4 (the bug: ~160 MiB and 17 bytes a request more)
    assert prepared[2_000_000] - prepared[500_000] < 2 * 2**20, prepared
    assert prepared[2_000_000] < 40 * 2**20, prepared
    assert read[2_000_000] - read[500_000] < 4 * 2**20, read


# -- the engine's replay: its memory does not grow with the stream either ----------------------------

#: Runs one engine replay (the config as JSON in argv[1]) and prints its op count and this process's peak
#: RSS; nothing else is imported, so the peak is the engine's.
_ENGINE_REPLAY = """
import json, sys
from cachemark import _engine
result = json.loads(_engine.run_load(sys.argv[1]))
assert not result["errors_sample"], result["errors_sample"]
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(sum(op["count"] for op in result["ops"].values()), peak * 1024)
"""


def _engine_stream(directory: Path, requests: int) -> Path:
    """The engine's four arrays (as engine_stream writes them): gets and sets of skewed ids over 10⁵ keys,
    1 µs apart."""
    directory.mkdir()
    rng = np.random.default_rng(7)
    (directory / "ops.u8").write_bytes((rng.random(requests) < 0.2).astype("<u1").tobytes())
    (directory / "keys.u32").write_bytes((rng.random(requests) ** 4 * 100_000).astype("<u4").tobytes())
    (directory / "sizes.u32").write_bytes(rng.integers(1, 400, requests).astype("<u4").tobytes())
    (directory / "at.u64").write_bytes((np.arange(requests, dtype="<u8") * 1000).tobytes())
    return directory


def test_the_engines_replay_memory_does_not_grow_with_the_stream(tmp_path, redis_server):
    """The engine spools each client's steps to disk and holds a block of them per client: 5× the requests
    (a second of closed-loop replay each, the whole stream loaded) peak within a few MiB of each other
    (holding the stream took ~41 bytes a request: 33 MiB more here)."""
    peaks = {}
    # the bare engine cleans nothing up: its sets left ~53,000 keys in the worker's shared redis (db 0), which
    # every later SCAN of that database then walked (the read-verification test's corrupting thread among them)
    prefix = f"cm:rss{uuid.uuid4().hex[:8]}:"
    try:
        for requests in (200_000, 1_000_000):
            config = {
                "protocol": "resp2", "servers": [f"{redis_server.host}:{redis_server.port}"], "connections": 8,
                "pipeline": 8, "prefill": False, "duration_s": 1.0,
                "keys": {"count": 100_000, "prefix": f"{prefix}{requests}:"},
                "values": {"min": 1, "max": 400}, "mix": [{"op": "get", "weight": 8}, {"op": "set", "weight": 2}],
                "replay": {"dir": str(_engine_stream(tmp_path / f"s{requests}", requests))},
            }
            result = subprocess.run([sys.executable, "-c", _ENGINE_REPLAY, json.dumps(config)], capture_output=True,
                                    text=True, timeout=120)
            assert result.returncode == 0, result.stderr
            ops, peaks[requests] = map(int, result.stdout.split())
            assert ops > 0
            assert sorted(p.name for p in (tmp_path / f"s{requests}").iterdir()) == \
                ["at.u64", "keys.u32", "ops.u8", "sizes.u32"]  # the spool is gone
    finally:
        with redis.Redis(host=redis_server.host, port=redis_server.port) as client:
            keys = list(client.scan_iter(match=prefix + "*", count=10_000))
            for start in range(0, len(keys), 10_000):
                client.unlink(*keys[start:start + 10_000])
    # -0.1 MiB beside a busy loop against 8 MiB (the bug: +33 MiB). Load changes how many ops the second runs,
    # not what the engine holds (a block per client, fixed histograms), so it cannot move the peak
    assert peaks[1_000_000] - peaks[200_000] < 8 * 2**20, peaks


def test_a_recorded_value_over_the_runs_largest_is_one_line_not_a_panic(tmp_path, redis_server):
    """The engine writes a value from the run's filler, which reaches the values' maximum only: a stream
    recording a larger one is refused when the run is planned (it panicked writing it)."""
    from cachemark.engine import run_load
    from cachemark.errors import SpecError

    config = {
        "protocol": "resp2", "servers": [f"{redis_server.host}:{redis_server.port}"], "connections": 2,
        "prefill": False, "duration_s": 0.2, "keys": {"count": 100_000, "prefix": "cm:big:"},
        "values": {"min": 1, "max": 100}, "mix": [{"op": "get", "weight": 8}, {"op": "set", "weight": 2}],
        "replay": {"dir": str(_engine_stream(tmp_path / "s", 1_000))},  # sizes up to 399 bytes
    }
    with pytest.raises(SpecError, match=r"replay: a request records a \d+-byte value, over the values' maximum "
                                        r"of 100"):
        run_load(config)
