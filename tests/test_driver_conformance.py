"""The driver conformance suite: every driver in ``DRIVERS`` (run/driver.py) × every case, against real
servers (docs/drivers.md).

The parametrization reads the registry: a driver is run on each server kind it serves (``redis``,
``memcached``), and a new driver — a folder under drivers/ and one ``DriverSpec`` line — is run by every
case here with nothing to add. A driver whose runtime or build is missing is skipped, in one line saying
what to install. The protocol itself is data (drivers/protocol/protocol.json: every message, both ways,
with the outcome codes, error kinds, key names and value format; drivers/protocol/transcript.json: a
golden exchange): the cases check each driver against those files, and run/driver.py checks every
message a driver sends against the schema on every run.

Servers are the session's (conftest.py), shared by the cases; a case that kills or limits its server
spawns its own. Runs are short (no warm-up, hundreds of ops or sub-second durations). The open-loop case
times a schedule and is marked ``alone`` (`make test` runs it by itself, last); the others hold on a busy
host: a Ctrl-C is sent once the timed phase has served its reads, a dying server's run stops on its errors
long before the deadline it is checked against.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
import redis

from cachemark.errors import UserError
from cachemark.results.store import load as load_results
from cachemark.run import driver as driver_mod
from cachemark.run.driver import DRIVERS, PROTOCOL, DriverProcess, OpBatch, op_batch, setup_message
from cachemark.run.driver_protocol import load as load_protocol
from cachemark.run.runner import run_target
from cachemark.spec import Workload
from cachemark.target import parse_target
from cachemark.workload.ops import mix_entries, split_ops, tags_for_key
from cachemark.workload.values import make_value, value_header
from conftest import run_cli
from driver_kit import (  # noqa: E402
    needs_driver,
    op,
    plain_client,
    run_killing_the_server,
    with_client,
    workload,
    write_foreign,
)

PROTOCOL_DIR = driver_mod.DRIVERS_DIR / "protocol"
SPEC = load_protocol(driver_mod.DRIVERS_DIR)
SCHEMA = SPEC.document
TRANSCRIPT = json.loads((PROTOCOL_DIR / "transcript.json").read_text())
OUTCOME = {name: code for name, code in SPEC.outcomes.items() if name != "error_base"}
SERVER_KINDS = ("redis", "memcached")  # the server kinds the suite spawns; a driver runs on those it serves


def targets(kinds: tuple[str, ...] = SERVER_KINDS, where: Any = lambda spec: True) -> list[Any]:
    """(driver, server kind) for every driver in the registry and every kind of server it serves."""
    return [pytest.param(name, kind, id=f"{name}@{kind}") for name, spec in DRIVERS.items()
            for kind in kinds if kind in spec.schemes and where(spec)]


def drivers() -> list[Any]:
    return [pytest.param(name, id=name) for name in DRIVERS]


every_target = pytest.mark.parametrize(("name", "kind"), targets())


def server_of(request: Any, kind: str) -> Any:
    return request.getfixturevalue(f"{kind}_server")


def first_kind(name: str) -> str:
    return next(k for k in SERVER_KINDS if k in DRIVERS[name].schemes)


def forget(server: Any, namespace: str, keys: int) -> None:
    """Remove a by-hand exchange's keys (and canaries) from the server."""
    client = plain_client(server)
    if isinstance(client, redis.Redis):
        names = list(client.scan_iter(match=namespace + "*"))
        if names:
            client.delete(*names)
    else:
        client.delete_many([f"{namespace}{i}" for i in range(keys)]
                           + [f"{namespace}verify:0:{n}" for n in range(8)])


def keys_held(server: Any, namespace: str, keys: int) -> set[str]:
    """The names under ``namespace`` the server holds: all of them (redis), or those of ids 0..keys-1 and
    the first canaries (memcached, which cannot list)."""
    client = plain_client(server)
    if isinstance(client, redis.Redis):
        return {k.decode() for k in client.scan_iter(match=namespace + "*")}
    names = [f"{namespace}{i}" for i in range(keys)] + [f"{namespace}verify:0:{n}" for n in range(8)]
    return {k if isinstance(k, str) else k.decode() for k in client.get_many(names)}


def by_hand(name: str, target_url: str, load: Workload, namespace: str, **setup: Any) -> DriverProcess:
    """A driver taken through hello and setup (``setup`` overriding fields of cachemark's own message)."""
    d = DriverProcess(DRIVERS[name], 0)
    try:
        hello, _ = d.recv(60)
        assert (hello["type"], hello["protocol"], hello["driver"]) == ("hello", PROTOCOL, name), hello
        d.request(setup_message(parse_target(target_url), load, namespace, 0) | setup, expect="ready")
    except BaseException:
        d.close()
        raise
    return d


def ops_blob(entries: list[int], keys: list[int], sizes: list[int]) -> bytes:
    return OpBatch(np.array(entries, dtype="u1"), np.array(keys, dtype="<u4"), np.array(sizes, dtype="<u4"),
                   None, False).blob()


def outcomes(done: dict[str, Any], blob: bytes) -> list[Any]:
    """done's outcomes by name: 'hit', 'miss', 'ok', or the error kind."""
    names = {code: name for name, code in OUTCOME.items()}
    base = SPEC.outcomes["error_base"]
    return [names[c] if c < base else done["error_kinds"][c - base] for c in blob[:done["count"]]]


# -- the protocol file ------------------------------------------------------------------


def test_the_protocol_file_is_a_json_schema_the_fast_checker_agrees_with():
    """drivers/protocol/protocol.json is valid JSON Schema; run/driver.py's checker (driver_protocol.py) and
    a full validator agree on valid and broken messages; its constants are cachemark's own."""
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    full = jsonschema.Draft202012Validator(SCHEMA)
    assert SCHEMA["x-version"] == PROTOCOL
    done = {"type": "done", "count": 2, "wall_ns": 5, "cpu_s": 0.1, "error_kinds": ["verify"],
            "extra_errors": [[0, "dropped_write", 1]], "error_samples": ["get: verify: x"], "bytes_in": [1],
            "bytes_out": [2], "missed": 0, "stopped_on_errors": False, "interrupted": False, "blob": 34}
    hello = {"type": "hello", "protocol": 1, "driver": "x", "runtime": "x 1", "libraries": {"a": "1"}}
    good = [done, hello, {"type": "ready", "client": "c", "client_library": "l", "client_version": "1"},
            {"type": "prefilled", "written": 3, "refused": 0, "error_sample": None, "interrupted": False},
            {"type": "loaded", "count": 0}, {"type": "bye"}, {"type": "error", "kind": "setup", "message": "m"}]
    bad = [dict(done, count=-1), dict(done, extra_errors=[[0, "x"]]), dict(done, bytes_in=[True]),
           dict(done, stopped_on_errors=None), {k: v for k, v in done.items() if k != "wall_ns"},
           dict(hello, protocol="1"), dict(hello, libraries={"a": 1}), {"type": "error", "kind": "", "message": "m"},
           {"type": "ready", "client": "c"}, {"type": "prefilled", "written": 1.5, "refused": 0,
                                               "error_sample": None, "interrupted": False}]
    for msg in good:
        assert SPEC.problem(msg) is None and full.is_valid(msg), msg
    for msg in bad:
        assert SPEC.problem(msg) is not None and not full.is_valid(msg), msg
    assert SPEC.problem({"type": "setup"}) is not None  # cachemark's message, never a driver's
    assert SPEC.problem({"type": "done"}, "to_driver") is not None
    # the blob layouts are the ones cachemark writes and reads
    assert SPEC.blob_size(done) == 17 * 2 and SPEC.blob_size({"type": "prefill", "count": 3}) == 8 * 3
    assert SPEC.blob_size({"type": "ops", "count": 3, "schedule": True}) == 17 * 3
    assert len(ops_blob([0, 0, 0], [1, 2, 3], [1, 1, 1])) == SPEC.blob_size({"type": "ops", "count": 3})
    # the value format's constants and vectors are cachemark's own (workload/values.py)
    fmt = SPEC.value_format
    for vector in fmt["vectors"]:
        assert make_value(value_header(vector["key"]), vector["size"]).hex() == vector["hex"]
    header = value_header("k")
    assert len(header) == fmt["header_len"] and header == fmt["header"].format(crc32=int(header[3:11], 16)).encode()
    period = setup_message(parse_target("redis://127.0.0.1:1/0"), workload(keys=1), "cm:t:", 0)["filler"].encode()
    assert len(period) == fmt["filler_period"] and set(period) <= set(b"0123456789abcdefghijklmnopqrstuvwxyz")
    value = make_value(header, fmt["filler_period"] + 300)  # the period repeats from the value's byte 0
    assert all(value[i] == period[i % fmt["filler_period"]] for i in range(fmt["header_len"], len(value)))
    # text as random as an application's: deflate leaves about two thirds of it (a repeating pattern: a seventh)
    assert 0.6 < len(zlib.compress(make_value(header, 1001))) / 1001 < 0.75
    assert set(SPEC.error_kinds) == {"timeout", "connection", "server", "verify", "dropped_write"}
    assert set(SPEC.answers.values()) <= set(SPEC.from_driver) and set(SPEC.answers) <= set(SPEC.to_driver)


# -- the golden exchange ---------------------------------------------------------------


@every_target
def test_the_golden_transcript(name, kind, request):
    """drivers/protocol/transcript.json, step by step: the value format (verify), every op's outcome,
    framing split anywhere, unverified reads, an unsupported op, bye; then the keys the server holds."""
    needs_driver(name)
    spec = DRIVERS[name]
    server = server_of(request, kind)
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    load = workload(keys=TRANSCRIPT["setup"]["keys"], value_size=100, workers=1,
                    get_many_count=TRANSCRIPT["setup"]["get_many_count"])
    d = by_hand(name, with_client(server.url(), name), load, namespace, **TRANSCRIPT["setup"])
    full = jsonschema.Draft202012Validator(SCHEMA)
    sent: list[str] = []
    want: list[Any] = []  # the outcomes the next go must answer: the last ops step's
    entries_sent: list[list[str]] = []
    try:
        for step in TRANSCRIPT["steps"]:
            msg, blob = dict(step["send"]), b""
            if "blob" in step:
                blob = b"".join(np.array(step["blob"][field], dtype=dtype).tobytes()
                                for field, dtype, _ in SPEC.blob_fields(msg))
            expected_outcomes = None
            if "ops" in step:
                entries = ["+".join(e) for e in msg["entries"]]
                msg["count"] = len(step["ops"])
                blob = ops_blob([entries.index(e) for e, _, _ in step["ops"]], [k for _, k, _ in step["ops"]],
                                [100] * len(step["ops"]))
                expected_outcomes = [("ok" if e == "delete" and not spec.delete_hit else o) for e, _, o in step["ops"]]
            if msg["type"] != "ops" or step["ops"][0][0] in SPEC.defs["op"]["enum"]:
                assert SPEC.problem(msg, "to_driver") is None and full.is_valid(msg), msg  # the transcript's own
            if step.get("in_pieces"):  # stdin is a stream: a line and its blob may come split anywhere
                framed = json.dumps(dict(msg, blob=len(blob))).encode() + b"\n" + blob
                for piece in (framed[:7], framed[7:-50], framed[-50:-3], framed[-3:]):
                    os.write(d.inp, piece)
                    time.sleep(0.02)
                d.stage = msg["type"]
            else:
                d.send(msg, blob)
            reply, data = d.recv(60)
            assert full.is_valid(reply), (reply, [e.message for e in full.iter_errors(reply)])
            assert {k: reply.get(k) for k in step["expect"]} == step["expect"], reply
            if reply["type"] == "error":
                assert step["message_says"] in reply["message"] and "\n" not in reply["message"], reply
            if reply["type"] == "done":
                assert len(data) == SPEC.blob_size(reply)
                got = outcomes(reply, data)
                assert got == want, list(zip(sent, got, want, strict=True))
                starts = np.frombuffer(data[reply["count"]:9 * reply["count"]], dtype="<u8")
                latency = np.frombuffer(data[9 * reply["count"]:], dtype="<u8")
                assert (latency > 0).all() and (latency < 5e9).all() and (np.diff(starts.astype(np.int64)) >= 0).all()
                assert 0 < reply["wall_ns"] < 30e9  # a handful of ops: milliseconds; only a hang reaches 30 s
                for entry, bytes_in_out in step.get("bytes", {}).items():
                    at = ["+".join(e) for e in entries_sent].index(entry)
                    assert [reply["bytes_in"][at], reply["bytes_out"][at]] == bytes_in_out, (entry, reply)
                if "samples_say" in step:
                    assert any(step["samples_say"] in s for s in reply["error_samples"]), reply["error_samples"]
            if expected_outcomes is not None:  # what the next go must answer
                sent, want = [f"{e} {k}" for e, k, _ in step["ops"]], expected_outcomes
                entries_sent = msg["entries"]
            if "exit" in step:
                assert d.proc.wait(10) == step["exit"]
        held = keys_held(server, namespace, load.keys)
        assert held == {f"{namespace}{i}" for i in TRANSCRIPT["holds"]}, held  # canaries deleted, nothing else
        # the values are cachemark's value format, byte for byte, as any reader sees them (a framework's own
        # envelope around them — Rails' Marshal, Symfony's serializer — is its business: they are below
        # every client's compression threshold)
        client = plain_client(server)
        for i, size in TRANSCRIPT["stored"].items():
            stored = client.get(f"{namespace}{i}")
            assert stored is not None and make_value(value_header(f"{namespace}{i}"), size) in stored, (i, stored)
    finally:
        d.close()
        forget(server, namespace, load.keys)


# -- a phase in segments (x-segments) ------------------------------------------------------


def go_in_segments(d: DriverProcess, entries: list[list[str]], segments: list[tuple[list[int], list[int], list[int]]],
                   go: dict[str, Any], at: list[int] | None = None) -> list[tuple[dict[str, Any], bytes]]:
    """cachemark's side of x-segments, by hand: segment 0 before go (loaded), segment 1 right after go,
    segment k+2 when part k comes; every reply until done, checked against the schema."""
    full = jsonschema.Draft202012Validator(SCHEMA)
    starts = np.cumsum([0] + [len(s[0]) for s in segments])

    def send(k: int) -> None:
        e, keys, sizes = segments[k]
        msg = {"type": "ops", "entries": entries, "count": len(e), "schedule": at is not None,
               "more": k + 1 < len(segments)}
        blob = ops_blob(e, keys, sizes)
        if at is not None:
            blob += np.array(at[starts[k]:starts[k + 1]], dtype="<u8").tobytes()
        assert full.is_valid(msg)
        d.send(msg, blob)

    send(0)
    d.check(d.recv(60)[0], "loaded")
    d.send(go)
    if len(segments) > 1:
        send(1)
    replies = []
    while True:
        reply, blob = d.recv(60)
        assert full.is_valid(reply), (reply, [e.message for e in full.iter_errors(reply)])
        assert len(blob) == SPEC.blob_size(reply), reply
        replies.append((reply, blob))
        if reply["type"] != "part":
            d.check(reply, "done")
            return replies
        parts = len(replies)
        if parts + 1 < len(segments):
            send(parts + 1)


GO = {"type": "go", "duration_s": None, "cycle": False, "verify_reads": 1.0, "verify_writes": 0.0,
      "stop_after_failing_s": None}


@every_target
def test_a_phase_in_segments_runs_every_op_once_in_order_on_its_schedule(name, kind, request):
    """Three segments (x-segments): one part per segment but the last, whose ops come in done, each op's
    outcome where the model says (writes in one segment, read in the next), every op sent at or after its
    due time counted from go (not from its segment's start); the exchange goes on after done."""
    needs_driver(name)
    server = server_of(request, kind)
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    load = workload(keys=20, value_size=100, workers=1)
    d = by_hand(name, with_client(server.url(), name), load, namespace)
    try:
        segments = [([0] * 10, list(range(10)), [100] * 10),  # set 0..9
                    ([1] * 20, list(range(20)), [100] * 20),  # get 0..19: 10 hits, 10 misses
                    ([0] * 5 + [1] * 10, [*range(10, 15), *range(10, 20)], [100] * 15)]  # set 10..14, get 10..19
        at = [i * 2_000_000 for i in range(45)]  # every 2 ms, counted from go across the segments
        replies = go_in_segments(d, [["set"], ["get"]], segments, GO, at)
        assert [r["type"] for r, _ in replies] == ["part", "part", "done"], replies
        assert [r["count"] for r, _ in replies] == [10, 20, 15]
        got = [outcomes(r, b) for r, b in replies]
        assert got == [["ok"] * 10, ["hit"] * 10 + ["miss"] * 10, ["ok"] * 5 + ["hit"] * 5 + ["miss"] * 5], got
        sent = np.concatenate([np.frombuffer(b[r["count"]:9 * r["count"]], dtype="<u8") for r, b in replies])
        assert (sent.astype(np.int64) >= np.array(at)).all() and sent[-1] >= 88_000_000, sent
        done = replies[-1][0]
        assert (done["missed"], done["interrupted"], done["stopped_on_errors"]) == (0, False, False)
        # the last op is due at 88 ms and is sent at or after it: a floor load can only raise; 30 s is
        # 300x the 90-ms schedule, a hang's ceiling
        assert 88e6 <= done["wall_ns"] < 30e9
        d.request({"type": "ops", "entries": [["get"]], "count": 3, "schedule": False},
                  ops_blob([0, 0, 0], [0, 5, 19], [100] * 3), expect="loaded")
        again, blob = d.request(GO, expect="done")
        assert outcomes(again, blob) == ["hit", "hit", "miss"]
    finally:
        d.close()
        forget(server, namespace, load.keys)


@pytest.mark.parametrize("name", drivers())
def test_a_driver_stopping_inside_a_segment_discards_the_one_sent_ahead(name):
    """The deadline falls inside segment 1 while segment 2 waits in the driver's stdin (sent ahead when
    part 0 came): the driver reads it, drops it and sends done with segment 1's ops; the next batch it
    is given is run as it is, not mistaken for the dropped one."""
    needs_driver(name)
    load = workload(keys=100, value_size=100)
    d = by_hand(name, with_client("redis://127.0.0.1:1", name), load, "cm:00000000:", scheme=None)
    try:
        segments = [([0] * 20, list(range(20)), [100] * 20), ([0] * 20, list(range(20)), [100] * 20),
                    ([0] * 20, list(range(20)), [100] * 20)]
        at = [i * 1_000_000 for i in range(20)] + [200_000_000 + i * 20_000_000 for i in range(20)] + [
            1_000_000_000 + i for i in range(20)]  # segment 1 runs 0.2-0.58 s; the deadline is at 0.3 s
        replies = go_in_segments(d, [["get"]], segments, dict(GO, duration_s=0.3), at)
        assert [r["type"] for r, _ in replies] == ["part", "done"], replies
        done, blob = replies[-1]
        # due at 0.2 … 0.28 s: sent, or (on a stalled host) missed; the one due at 0.3 s is past the deadline
        assert done["count"] >= 1 and done["count"] + done["missed"] == 5, done
        # wall: the 0.3-s deadline or past it (a floor load only raises), 10 s a hang's ceiling (33x)
        assert set(outcomes(done, blob)) == {"miss"} and 0.2e9 <= done["wall_ns"] < 10e9
        d.request({"type": "ops", "entries": [["get"]], "count": 7, "schedule": False},
                  ops_blob([0] * 7, list(range(7)), [100] * 7), expect="loaded")
        again, blob = d.request(GO, expect="done")
        assert again["count"] == 7 and outcomes(again, blob) == ["miss"] * 7
        assert d.request({"type": "bye"}, expect="bye")
    finally:
        d.close()


MEMORY_BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "driver_memory.py"  # one phase: its peaks


@pytest.mark.parametrize("name", drivers())
def test_a_long_phase_takes_the_memory_of_a_short_one(name):
    """10× the requests (a replay's share, a long schedule) through a driver: cachemark's peak RSS and the
    driver's within a few MiB of the shorter run's (a phase sent whole would take 17 bytes a request each
    way, on both sides, and more in a runtime's arrays). 10⁶ → 10⁷ requests through the Go and Java drivers,
    2·10⁵ → 2·10⁶ through the others (each ~4 s).

    A JVM's RSS follows its heap policy, not what it holds: a heap that may grow, grows with garbage (RSS
    +34.5 MiB from 2·10⁵ to 2·10⁶ requests under a 64 MiB cap, no leak). So the Java drivers run with a
    fixed heap touched whole at start (``-Xms48m -Xmx48m -XX:+AlwaysPreTouch``): its RSS is the same in
    both runs, and 10⁷ requests held in it (≥ 170 MB as a whole batch) would end in an OutOfMemoryError.

    Margins (peak growth measured on this 2-core machine, beside other work; the growth comes from what
    a driver allocates, not from timing, so load does not move it): cachemark 0.5–1.0 MiB against 16
    MiB; Go ~2 MiB, Java −1 to +3 MiB, Node ~1 MiB, PHP ~0.3 MiB against 32 MiB; Ruby ~18 MiB (its
    malloc heap grows ~10 bytes a request while its live objects stay the same: docs/drivers.md) against
    32 MiB, the smallest margin, 1.8×."""
    needs_driver(name)
    long_lived = name.startswith(("go-", "java-"))
    small, large = (1_000_000, 10_000_000) if long_lived else (200_000, 2_000_000)
    env = ({**os.environ, "JAVA_TOOL_OPTIONS": "-Xms48m -Xmx48m -XX:+AlwaysPreTouch"} if name.startswith("java-")
           else None)
    peaks = {}
    for requests in (small, large):
        result = subprocess.run([sys.executable, str(MEMORY_BENCHMARK), "--one", name, str(requests)],
                                capture_output=True, text=True, timeout=300, env=env)  # each in a fresh process
        assert result.returncode == 0, result.stderr[-2000:]
        count, own, driver = map(int, result.stdout.split()[:3])
        assert count == requests
        peaks[requests] = own, driver
    grown = [peaks[large][i] - peaks[small][i] for i in (0, 1)]
    assert grown[0] < 16 * 2**20 and grown[1] < 32 * 2**20, (name, peaks)


# -- a seeded run, predicted exactly ------------------------------------------------------

# per (driver, kind): two runs and every message of them, shared by the cases that read them
_SEEDED: dict[tuple[str, str], dict[str, Any]] = {}
# two drivers, an untimed warm-up batch (a JIT's) before the timed one; then one driver, from an empty cache,
# every op, a TTL, every read verified and every write read back
PREFILLED = {"keys": 200, "mix": {"get": 1}, "ops": 400, "workers": 2, "warmup_ops": 100}
SEGMENT_OPS = 128  # the seeded runs' segments (x-segments): the mixed run's 600 ops in five
MIXED = {"keys": 40, "mix": {"get": 4, "set": 2, "delete": 1, "exists": 1, "exists+get": 1, "get_many": 1},
         "ops": 600, "workers": 1, "prefill": False, "verify_writes": 1.0, "get_many_count": 3, "ttl": 60}


def seeded(name: str, kind: str, request: Any) -> dict[str, Any]:
    """A prefilled get run on two drivers and a cold mixed run on one, every message recorded, with
    foreign keys planted before them; run once per (driver, kind) for the cases below."""
    needs_driver(name)
    if (name, kind) in _SEEDED:
        return _SEEDED[(name, kind)]
    server = server_of(request, kind)
    foreign = write_foreign(server)
    messages: list[tuple[str, int, dict[str, Any], bytes]] = []  # (direction, which process, message, done's blob)
    post, take = DriverProcess.post, DriverProcess.take  # every message either way passes one of them
    processes: dict[int, int] = {}  # id(DriverProcess) -> its number (ids of ended ones may come again)

    def which(process: DriverProcess, msg: dict[str, Any]) -> int:
        if msg.get("type") == "hello" or id(process) not in processes:
            processes[id(process)] = len(processes) + sum(1 for _ in messages)
        return processes[id(process)]

    def sending(self, msg, blob=b""):
        messages.append(("to_driver", which(self, msg), dict(msg, blob=len(blob)) if blob else msg, b""))
        return post(self, msg, blob)

    def receiving(self):
        if (message := take(self)) is not None:
            msg, blob = message
            results = msg.get("type") in ("part", "done")
            messages.append(("from_driver", which(self, msg), msg, blob if results else b""))
        return message

    url = with_client(server.url(), name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(driver_mod, "SEGMENT_OPS", SEGMENT_OPS)  # the phases in segments, predicted across them
        patch.setattr(DriverProcess, "post", sending)
        patch.setattr(DriverProcess, "take", receiving)
        prefilled = run_target(url, workload(**PREFILLED))
        mixed = run_target(url, workload(**MIXED))
    _SEEDED[(name, kind)] = result = {"prefilled": prefilled, "mixed": mixed, "messages": messages,
                                      "foreign": foreign(), "server": server}
    return result


def predicted(spec: Any, load: Workload) -> dict[str, dict[str, int]]:
    """Each entry's count, hits and misses for ``load``'s one worker, from cachemark's own op stream
    (the batch it sends) played on a model of the cache."""
    phase = load.effective_phases()[0]
    entries = [e.name for e in mix_entries(phase.mix or load.mix)]
    batch = op_batch(load, phase, 0, "timed", split_ops(phase.ops, 0, 1), phase.duration, phase.rate)
    held = set(range(load.keys)) if load.prefill else set()
    want = {e: {"count": 0, "hits": 0, "misses": 0} for e in entries}
    for e, k in zip(batch.entries.tolist(), batch.keys.tolist(), strict=True):
        entry, row = entries[e], want[entries[e]]
        row["count"] += 1
        if entry == "set":
            held.add(k)
            continue
        if entry == "get_many":
            found = all((k + m) % load.keys in held for m in range(load.get_many_count))
        else:
            found = k in held
        if entry == "delete":
            held.discard(k)
            if not spec.delete_hit:
                continue
        row["hits" if found else "misses"] += 1
    return want


@every_target
def test_hits_and_misses_exactly_as_predicted(name, kind, request):
    runs = seeded(name, kind, request)
    prefilled, mixed = runs["prefilled"], runs["mixed"]
    assert prefilled.status == "ok", prefilled.reason
    get = op(prefilled, "get")
    assert (get.count, get.hits, get.misses, get.errors) == (400, 400, 0, {})
    assert get.bytes_in > 400 * 100 and get.summary.p50_us > 0
    assert mixed.status == "ok", mixed.reason
    want = predicted(DRIVERS[name], workload(**MIXED))
    got = {e: {"count": o.count, "hits": o.hits, "misses": o.misses} for e, o in mixed.phases[0].ops.items()}
    assert got == want
    set_ = mixed.phases[0].ops["set"]
    assert set_.bytes_out > set_.count * 100 and mixed.phases[0].ops["get"].bytes_in > 0
    errors = {e: o.errors for e, o in mixed.phases[0].ops.items() if o.errors}
    assert not errors, errors  # every read verified, every write read back (a canary each)


@every_target
def test_cleanup_removes_only_the_runs_keys(name, kind, request):
    runs = seeded(name, kind, request)
    assert runs["foreign"] == (b"mine", b"another run's")  # a foreign key, and one shaped like another run's
    for run in (runs["prefilled"], runs["mixed"]):
        keys = PREFILLED["keys"] if run is runs["prefilled"] else MIXED["keys"]
        assert not keys_held(runs["server"], run.backend.namespace, keys), run.backend.namespace


@every_target
def test_every_message_follows_the_protocol(name, kind, request):
    """Every message of the seeded runs, both ways, is valid under the schema (a full JSON Schema
    validator), has the blob its layout says, and comes in the exchange's order."""
    runs = seeded(name, kind, request)
    full = jsonschema.Draft202012Validator(SCHEMA)
    by_process: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for direction, process, msg, blob in runs["messages"]:
        wrong = [e.message for e in full.iter_errors(msg)]
        assert not wrong and SPEC.problem(msg, direction) is None, (direction, msg, wrong)
        assert int(msg.get("blob") or 0) == SPEC.blob_size(msg), msg
        if msg["type"] in ("part", "done"):
            base = SPEC.outcomes["error_base"]
            codes = np.frombuffer(blob[:msg["count"]], dtype="u1")
            assert (codes < base + len(msg["error_kinds"])).all(), msg
            assert len(blob) == SPEC.blob_size(msg)
            assert msg["type"] == "part" or len(msg["bytes_in"]) == len(msg["bytes_out"])
        by_process.setdefault(process, []).append((direction, msg))
    assert len(by_process) == PREFILLED["workers"] + MIXED["workers"]
    segmented = 0
    for exchange in by_process.values():
        assert exchange[0][1]["type"] == "hello" and exchange[0][0] == "from_driver"
        # during go (x-segments): a segment sent ahead per part that comes back, none answered
        going, ahead, parts, asked, answered = False, 0, 0, [], []
        for direction, m in exchange[1:]:
            if going and m["type"] in ("ops", "part"):
                ahead, parts = ahead + (m["type"] == "ops"), parts + (m["type"] == "part")
                continue
            (asked if direction == "to_driver" else answered).append(m["type"])
            going = m["type"] == "go" or (going and m["type"] != "done")
        assert answered == [SPEC.answers[t] for t in asked], (asked, answered)
        assert asked[0] == "setup" and asked[-1] == "bye"
        assert ahead == parts, (ahead, parts)  # every segment was run: each but the first announced by a part
        segmented += parts
    assert segmented >= (MIXED["ops"] - 1) // SEGMENT_OPS  # the seeded runs went in segments


@every_target
def test_the_results_name_the_client(name, kind, request):
    runs = seeded(name, kind, request)
    spec = DRIVERS[name]
    hello = next(m for d, _, m, _ in runs["messages"] if m["type"] == "hello")
    ready = next(m for d, _, m, _ in runs["messages"] if m["type"] == "ready")
    info = runs["prefilled"].backend.info
    assert (info["driver"], info["client"], info["runtime"]) == (name, name, hello["runtime"])
    assert (info["store"], info["client_library"]) == (ready["client"], ready["client_library"])
    assert info["libraries"] == hello["libraries"] and spec.framework in hello["libraries"]
    assert info["client_library_version"] == ready["client_version"] == hello["libraries"][ready["client_library"]]
    assert info["client_version"].startswith(hello["libraries"][spec.framework])
    assert info["client_version"].endswith(f"{hello['runtime']})")


# -- writes the server drops or refuses ------------------------------------------------------

THIRTY_DAYS_AND_A_SECOND = 2_592_001


@pytest.mark.parametrize(("name", "kind"), targets(("memcached",)))
def test_a_dropped_write_is_reported_exactly_when_the_server_lost_it(name, kind, request):
    """memcached reads an expiry over 30 days as a Unix timestamp: a TTL of 2,592,001 s is 31 January
    1970, so the write answers STORED and is gone at once (the classic TTL mistake). A client that passes
    the TTL as given (gomemcache, memjs, spymemcached) loses every write; one that turns long TTLs into
    timestamps (Dalli, Symfony) loses none. The canaries must say which, as the reads that follow see it."""
    needs_driver(name)
    server = server_of(request, kind)
    load = workload(keys=1, value_size=100, workers=1, prefill=False, verify_writes=1, on_error="continue",
                    ttl=THIRTY_DAYS_AND_A_SECOND, phases=[{"name": "write", "mix": {"set": 1}, "ops": 20},
                                                          {"name": "read", "mix": {"get": 1}, "ops": 20}])
    outcome = run_target(with_client(server.url(), name), load)
    assert outcome.status == "ok", outcome.reason
    set_, get = outcome.phases[0].ops["set"], outcome.phases[1].ops["get"]
    dropped = set_.errors.get("dropped_write", 0)
    assert set_.count == 20 and set(set_.errors) <= {"dropped_write"}, set_.errors
    assert (dropped, get.hits, get.misses) in ((20, 0, 20), (0, 20, 0)), (set_.errors, get)


@every_target
def test_refused_writes_are_server_errors(name, kind, spawn):
    """A server that refuses writes (redis: out of memory; memcached: an item over its size limit)."""
    needs_driver(name)
    if kind == "redis":
        server = spawn("redis", maxmemory="1mb", maxmemory_policy="noeviction")
        url, size, ops, least, said = with_client(server.url(), name), 20_000, 200, 100, ("oom",)
    else:
        # 1,000 bytes: over 1 KiB with the item's header, and under every client's compression threshold
        # (Rails 1 KiB, php-memcached 2,000 B, spymemcached 16 KiB). spymemcached answers a SERVER_ERROR by
        # dropping its connection: the ops after one time out until it reconnects, hence few ops and a timeout
        server = spawn("memcached", max_item_size="1k")
        url, size, ops, least, said = with_client(server.url(), name, timeout=0.2), 1_000, 20, 1, (
            "too large", "too big", "server_error", "not stored", "not_stored")
    outcome = run_target(url, workload(mix={"set": 1}, ops=ops, keys=ops, value_size=size, prefill=False,
                                       workers=1, on_error="continue"))
    assert outcome.status == "ok", outcome.reason
    set_ = op(outcome, "set")
    errors = set_.errors
    assert set_.count == ops and errors.get("server", 0) >= least, errors
    assert set(errors) <= {"server", "timeout", "connection"}, errors
    if kind == "memcached":
        assert sum(errors.values()) == ops, errors  # not one write stored
    samples = outcome.phases[0].error_samples
    assert samples and any(s in sample.lower() for sample in samples for s in said), samples
    assert all("\n" not in s for s in samples)


@every_target
def test_a_refused_prefill_ends_the_run_in_one_line(name, kind, spawn):
    """A server that refuses the prefill's values ends the run at once, in one line naming the sizes, as the
    engine and the Python workers do (spymemcached once waited out 61 s of timeouts, then exited 1)."""
    needs_driver(name)
    if kind == "redis":
        server, size, keys = spawn("redis", maxmemory="1mb", maxmemory_policy="noeviction"), 20_000, 200
    else:
        server, size, keys = spawn("memcached", max_item_size="1k"), 1_000, 20
    started = time.monotonic()
    with pytest.raises(UserError) as refused:
        run_target(with_client(server.url(), name),
                   workload(mix={"get": 1}, ops=10, keys=keys, value_size=size, workers=1))
    assert f"refused {size:,}-byte values during prefill" in str(refused.value), refused.value
    # at the first refusal, not after a timeout per key: 0.2-1.3 s here (a JVM start included), 10 s is 7x
    assert time.monotonic() - started < 10


# -- a server that dies, Ctrl-C, open loop ------------------------------------------------------


@every_target
@pytest.mark.parametrize("policy", ["stop", "continue"])
def test_a_server_that_dies_mid_run(name, kind, policy, spawn):
    """Ops succeed, then fail as a dead server's do (connection or timeout errors, counted), and cleanup
    says it failed. The default on-error policy (stop) ends the run after the grace, failed with one line
    naming the errors; ``--on-error continue`` runs the phase to its end, ok."""
    needs_driver(name)
    server = spawn(kind)
    # ops time out fast once the server is gone; a redis client's connect gets seconds: a JVM's first connect
    # beside a busy loop can take over the 2-s default (setup refused, no op run). memjs waits out its connect
    # timeout on every reconnect to a dead server, so memcached's stays short.
    timeout = {"socket_timeout": 0.5, "socket_connect_timeout": 10} if kind == "redis" else {
        "timeout": 0.5, "connect_timeout": 0.5}
    duration = 6 if policy == "stop" else 1.5  # stop: the run ends ~1 s after the kill, long before 6 s
    outcome = run_killing_the_server(server, with_client(server.url(), name, **timeout), workload(
        mix={"get": 9, "set": 1}, duration=duration, workers=1, prefill=False, error_grace=0.5, on_error=policy))
    phase = outcome.phases[0].to_json()  # as saved
    if policy == "stop":
        assert outcome.status == "failed", (outcome.status, outcome.reason)
        assert "\n" not in outcome.reason and " errors: 100 % of ops failed for 0.5 s" in outcome.reason, outcome.reason
        assert outcome.reason.split(" ")[0] in ("connection", "timeout"), outcome.reason
        # the kill comes after 300 ops (a count, not a time), then 0.5 s of grace and a 0.5-s op timeout:
        # ~1-1.5 s after the kill against the 6-s deadline, which is what the bug (no stop) would reach
        assert phase["stopped_on_errors"] and phase["wall_s"] < duration
    else:
        assert outcome.status == "ok", outcome.reason
        # held no longer than a timeout: the 1.5-s deadline, then the op in flight (0.5-s op and connect
        # timeouts; a refused loopback connect fails at once): ~2 s against 3.5; memjs waits out its connect
        # timeout on each reconnect, which is why memcached's stays 0.5 s (at 10 s this ran 11.6 s)
        assert not phase["stopped_on_errors"] and phase["wall_s"] < duration + 2
    ops = phase["ops"]
    errors = sum(sum(o["errors"].values()) for o in ops.values())
    assert 0 < errors < sum(o["count"] for o in ops.values()), ops  # ops, then a dead server's errors
    assert {k for o in ops.values() for k in o["errors"]} <= {"connection", "timeout"}, ops
    assert "cleanup failed" in (outcome.backend.cleanup_error or "")
    assert outcome.took_s < 30  # a dead server does not hang the loop: a driver's start-up and a <= 6-s phase


def _reads(server: Any) -> int:
    """Reads the server has served (the timed phase's; the prefill writes)."""
    client = plain_client(server)
    if isinstance(client, redis.Redis):
        stats = client.info("commandstats")
        return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("get", "mget", "exists"))
    return int(client.stats()[b"cmd_get"])


@every_target
def test_ctrl_c_exits_130_and_keeps_valid_partial_results(name, kind, request, tmp_path):
    """Ctrl-C to the process group, as a terminal sends it, once the timed phase runs: the drivers stop
    their loops, what they ran is saved (a results file the schema accepts), marked interrupted, exit 130."""
    needs_driver(name)
    server = server_of(request, kind)
    argv = [sys.executable, "-m", "cachemark", "run", "-t", with_client(server.url(), name), "--mix",
            "get=50,exists+get=50", "--duration", "60", "--warmup", "0", "--workers", "1", "--keys", "50",
            "--no-calibrate", "-o", "out.json"]
    before = _reads(server)
    proc = subprocess.Popen(argv, cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.monotonic() + 60
        while _reads(server) < before + 300 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)  # into the timed gets
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    run = load_results(tmp_path / "out.json")["runs"][0]  # checked against the results schema
    assert run["status"] == "interrupted" and run["phases"], run
    phase = run["phases"][0]
    # the Ctrl-C comes after 300 timed reads (a count, not a time): wall is well under the 60-s duration it
    # would run without the stop, whatever the load
    assert phase["interrupted"] and phase["ops"]["get"]["count"] > 0 and 0 < phase["wall_s"] < 60
    assert all(o["hits"] == o["count"] and not o["errors"] for o in phase["ops"].values()), phase["ops"]  # prefilled
    shown = " ".join(stdout.split())  # the report, as printed: the entries, and which client ran them
    assert "exists+get" in shown and f"via {name} {run['backend']['info']['client_version']}" in shown


@every_target
@pytest.mark.alone
def test_open_loop_follows_the_schedule_and_keeps_both_latencies(name, kind, request):
    """Every op the schedule has due before the deadline is sent or counted as missed (a stalled host
    leaves some unsent: they are missed, not dropped); latency from the intended start and the sent one."""
    needs_driver(name)
    load = workload(mix={"get": 1}, rate=400, duration=0.5, workers=1, keys=50)
    outcome = run_target(with_client(server_of(request, kind).url(), name), load)
    assert outcome.status == "ok", outcome.reason
    phase = outcome.phases[0].to_json()  # as saved
    get = phase["ops"]["get"]
    spec_phase = load.effective_phases()[0]
    schedule = op_batch(load, spec_phase, 0, "timed", None, spec_phase.duration, spec_phase.rate).at
    due = int((schedule < 0.5e9).sum())  # cachemark's own schedule: ~200 ops in the 0.5 s
    assert phase["mode"] == "open" and get["count"] + phase["missed"] == due and 190 <= due <= 210, (get, phase)
    assert get["count"] > 0 and get["hits"] == get["count"], get  # a stalled host leaves some unsent, missed
    assert get["summary"]["p50_us"] >= get["summary_uncorrected"]["p50_us"] > 0  # from the intended start
    assert sum(s["ops"] for s in phase["timeseries"]) == get["count"]
    assert 0.45 < phase["wall_s"] < 2  # the schedule's 0.5 s and the last reply (wide: a busy host)


# -- credentials, runtimes, the driver's own loop ------------------------------------------------


@every_target
def test_a_password_is_used_and_a_bad_one_is_one_line_exit_2(name, kind, request, tmp_path):
    """The target's password reaches the driver's client (redis: a server that requires one); a wrong
    one ends `cachemark run` with one line and exit 2, before any op, and a driver handed one anyway
    answers in one line (a setup error, or failing ops), never a hang."""
    needs_driver(name)
    if kind == "redis":
        server = request.getfixturevalue("redis_server_auth")
        outcome = run_target(with_client(server.url(), name), workload(mix={"get": 1}, ops=100, workers=1, keys=50))
        assert outcome.status == "ok", outcome.reason
        assert (op(outcome, "get").hits, op(outcome, "get").errors) == (100, {})
        wrong = server.url().replace("s3cret", "wrong")
    else:
        server = server_of(request, kind)
        wrong = server.url().replace("//", "//user:wrong@", 1)
    result = run_cli("run", "-t", with_client(wrong, name), "--mix", "get=100", "--ops", "10", "--warmup", "0",
                     "--no-calibrate", "-o", "out.json", cwd=tmp_path, timeout=120)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("cachemark: error: ") and "wrong" not in lines[0], lines
    with pytest.raises(UserError):  # the same, in process
        run_target(with_client(wrong, name), workload(mix={"get": 1}, ops=10, workers=1))
    if kind != "redis":
        return
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    d = DriverProcess(DRIVERS[name], 0)  # the driver itself, past cachemark's preflight
    try:
        d.recv(60)
        quick = with_client(wrong, name, socket_timeout=1, socket_connect_timeout=1)  # a client may retry until then
        d.send(setup_message(parse_target(quick), workload(keys=10, value_size=100), namespace, 0))
        reply, _ = d.recv(30)
        if reply["type"] == "error":
            assert reply["kind"] == "setup" and "\n" not in reply["message"], reply
            return
        assert reply["type"] == "ready", reply
        d.request({"type": "ops", "entries": [["get"]], "count": 3, "schedule": False}, ops_blob([0] * 3, [0, 1, 2],
                                                                                                [100] * 3))
        done, blob = d.request({"type": "go", "duration_s": None, "cycle": False, "verify_reads": 1.0,
                                "verify_writes": 0.0, "stop_after_failing_s": None}, timeout=30, expect="done")
        assert all(o not in ("hit", "miss") for o in outcomes(done, blob)), outcomes(done, blob)
        assert done["error_samples"] and all("\n" not in s for s in done["error_samples"])
    finally:
        d.close()


@pytest.mark.parametrize("name", drivers())
def test_a_missing_runtime_skips_the_run_with_one_line(name, request, monkeypatch):
    spec = DRIVERS[name]
    monkeypatch.setenv(spec.runtime_env, "/nonexistent/runtime")
    outcome = run_target(with_client(server_of(request, first_kind(name)).url(), name),
                         workload(mix={"get": 1}, ops=10))
    assert outcome.status == "skipped", (outcome.status, outcome.reason)
    assert "\n" not in outcome.reason and spec.install.split(",")[0].split(" (")[0] in outcome.reason, outcome.reason


@pytest.mark.parametrize("name", drivers())
def test_the_null_client_cycles_until_sigint_and_leaves_on_eof(name):
    """``scheme: null`` (no server: the driver's own loop on a do-nothing client): every read misses, fast;
    a cycling batch runs until SIGINT, a part per pass, then reports the last pass; EOF on stdin ends the
    driver (exit 0)."""
    needs_driver(name)
    load = workload(keys=100, value_size=100)
    d = by_hand(name, with_client("redis://127.0.0.1:1", name), load, "cm:00000000:", scheme=None)
    try:
        n = 2_000
        d.request({"type": "ops", "entries": [["get"]], "count": n, "schedule": False},
                  ops_blob([0] * n, [i % 100 for i in range(n)], [100] * n), expect="loaded")
        done, blob = d.request({"type": "go", "duration_s": None, "cycle": False, "verify_reads": 0.0,
                                "verify_writes": 0.0, "stop_after_failing_s": None}, expect="done")
        assert done["count"] == n and set(outcomes(done, blob)) == {"miss"}
        latency = np.frombuffer(blob[9 * n:], dtype="<u8")
        assert np.median(latency) < 50_000  # far below a round trip to any server (~0.1-5 µs per op when quiet)
        d.send({"type": "go", "duration_s": 30, "cycle": True, "verify_reads": 0.0, "verify_writes": 0.0,
                "stop_after_failing_s": None})
        time.sleep(0.5)
        d.proc.send_signal(signal.SIGINT)
        replies = []  # a part per pass through the batch (x-segments), then done with the last pass's ops
        while not replies or replies[-1][0]["type"] == "part":
            replies.append(d.recv(15))
        done, blob = replies[-1]
        assert done["type"] == "done" and done["interrupted"] and done["count"] <= n, done
        assert len(replies) > 1 and all(r["count"] == n for r, _ in replies[:-1]), [r for r, _ in replies]
        # the go ran 0.5 s before the SIGINT (the driver would have to start it 0.4 s late to go under 0.1 s)
        # and stops within a pass of 2,000 null ops (milliseconds) after it: 10 s is a hang's ceiling
        assert 0.1 < done["wall_ns"] / 1e9 < 10
        assert all(set(outcomes(r, b)) <= {"miss"} for r, b in replies)
        d.proc.stdin.close()  # EOF: the driver leaves quietly
        assert d.proc.wait(10) == 0
    finally:
        d.close()


# -- tags (drivers whose spec says they run tagged workloads) -------------------------------------


@pytest.mark.parametrize(("name", "kind"), targets(where=lambda spec: spec.tags))
def test_clean_by_tag_invalidates_exactly_the_tagged_items(name, kind, request):
    """Prefill 40 tagged keys, clean tag t3, read every key: exactly the keys cachemark's tags_for_key
    gives t3 miss (the driver computes the same tags), the others still hit."""
    needs_driver(name)
    server = server_of(request, kind)
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    load = workload(keys=40, value_size=100, workers=1, tags={"pool": 8, "min_per_key": 0, "max_per_key": 3})
    tagged = {k for k in range(40) if "t3" in tags_for_key(k, 8, 0, 3)}
    assert 0 < len(tagged) < 40
    d = by_hand(name, with_client(server.url(), name), load, namespace)
    try:
        ids = np.arange(40, dtype="<u4")
        prefilled, _ = d.request({"type": "prefill", "count": 40},
                                 ids.tobytes() + np.full(40, 100, dtype="<u4").tobytes(), expect="prefilled")
        assert (prefilled["written"], prefilled["refused"]) == (40, 0)
        # op 0: clean on key id 3 (tag "t3" = 3 % pool); ops 1..40: get every key
        d.request({"type": "ops", "entries": [["clean"], ["get"]], "count": 41, "schedule": False},
                  ops_blob([0] + [1] * 40, [3, *range(40)], [100] * 41), expect="loaded")
        done, blob = d.request({"type": "go", "duration_s": None, "cycle": False, "verify_reads": 1.0,
                                "verify_writes": 0.0, "stop_after_failing_s": None}, expect="done")
        assert done["count"] == 41 and not done["error_samples"], done["error_samples"]
        got = outcomes(done, blob)
        assert got[0] == "ok"  # the clean
        assert {k for k in range(40) if got[1 + k] == "miss"} == tagged  # misses: exactly the t3 keys
        assert all(got[1 + k] == "hit" for k in range(40) if k not in tagged)
    finally:
        d.close()
        if kind == "redis":
            assert keys_held(server, namespace, 40), "the tag sets live under the namespace"
        forget(server, namespace, 40)
