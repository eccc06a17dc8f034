"""Trace readers, the own format's writer, and trace statistics (workload/traces, cli/trace_commands).

Every file is generated here, in each supported format (plain and zstd, with keys holding commas,
quotes, spaces and escapes), and must read back record for record; the statistics are checked
against figures computed independently from the generated requests.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zstandard

from cachemark.backends.base import OPS as BACKEND_OPS
from cachemark.errors import UserError
from cachemark.workload.traces import (
    FORMATS,
    OPS,
    RECORD_DTYPE,
    StatsBuilder,
    TraceWriter,
    detect_format,
    key_hash,
    open_trace,
    oracle_bytes,
    trace_stats,
)
from cachemark.workload.traces.source import peek
from conftest import run_cli

# (t_us, op, key, key_size, value_size, ttl_s, client)
Expected = tuple[int, str, bytes, int, int, int, int]

KEYS = [b"plain", b"with,comma", b'with"quote', b"a,b,,c", b"space key", b"tail,", b",head",
        b"nz:u:eeW511W3dcH3de3d15ec"]


def _write(path: Path, data: bytes, compress: bool) -> Path:
    if compress:
        path = path.with_name(path.name + ".zst")
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def _read(path: Path, format: str | None = None, **kw) -> tuple[list, object]:
    reader = open_trace(path, format, keep_keys=True, **kw)
    return list(reader), reader


def _check(records: list, expected: list[Expected], keys: bool = True) -> None:
    assert len(records) == len(expected)
    for got, (t, op, key, ks, vs, ttl, client) in zip(records, expected):
        assert (got.t_us, got.op, got.key_hash, got.key_size, got.value_size, got.ttl_s, got.client) == \
            (t, op, key_hash(key), ks, vs, ttl, client), (got, key)
        if keys:
            assert got.key == key


def test_op_names_are_cachemarks() -> None:
    assert OPS == BACKEND_OPS


# -- Twitter cache-trace CSV --------------------------------------------------------------


TWITTER_OPS = {"get": "get", "gets": "get", "set": "set", "add": "set", "replace": "set", "cas": "set",
               "append": "set", "prepend": "set", "delete": "delete", "incr": "incr", "decr": "incr"}


def _twitter_trace(n: int = 500) -> tuple[bytes, list[Expected]]:
    rng = np.random.default_rng(7)
    lines, expected = [], []
    names = list(TWITTER_OPS)
    for i in range(n):
        key = KEYS[i % len(KEYS)] + str(i % 37).encode()
        op = names[int(rng.integers(len(names)))]
        vs, client = int(rng.integers(0, 5000)), int(rng.integers(0, 40))
        ttl = int(rng.integers(1, 86400)) if TWITTER_OPS[op] == "set" else 0
        ks = len(key) + 3  # the anonymised key's size need not be the original's
        lines.append(b"%d,%s,%d,%d,%d,%s,%d" % (i // 10, key, ks, vs, client, op.encode(), ttl))
        expected.append(((i // 10) * 1_000_000, TWITTER_OPS[op], key, ks, vs, ttl, client))
    return b"\n".join(lines) + b"\n", expected


@pytest.mark.parametrize("compress", [False, True])
def test_twitter_reads_back_record_for_record(tmp_path: Path, compress: bool) -> None:
    data, expected = _twitter_trace()
    path = _write(tmp_path / "cluster52.sort", data, compress)
    records, reader = _read(path)
    assert reader.format == "twitter"
    _check(records, expected)
    assert not reader.problems.malformed


def test_twitter_malformed_lines_are_counted_with_reasons(tmp_path: Path) -> None:
    good = b"5,k,1,2,3,get,0"
    lines = [good, b"garbage", good, b"6,k,1,2,3,frob,0", b"7,k,1,x,3,get,0", b"", b"8,k,1,2,3,get,-1",
             b"9,k,1,2,3,get", good, b"10,k,1,2,3,frob,0"]
    path = tmp_path / "t.csv"
    path.write_bytes(b"\n".join(lines))  # no final newline: the last line still counts
    records, reader = _read(path, "twitter")
    assert len(records) == 3
    bad = reader.problems.malformed
    assert bad["unknown operation 'frob'"] == [2, [4, 10]]
    assert bad["value size is not an integer: 'x'"] == [1, [5]]
    assert bad["TTL out of range: -1"] == [1, [7]]
    assert bad["7 comma-separated fields expected, found 1"] == [1, [2]]
    assert bad["7 comma-separated fields expected, found 6"] == [1, [8]]
    assert reader.problems.skipped == {"blank line": [1, [6]]}
    assert reader.problems.malformed_total == 6
    assert any("unknown operation 'frob'" in line and "lines 4, 10" in line for line in reader.problems.lines())

    with pytest.raises(UserError, match=r"^.*t\.csv:2: 7 comma-separated fields expected, found 1$"):
        list(open_trace(path, "twitter", strict=True))


def test_twitter_fractional_time_and_upper_case_op_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"1.25,k,1,2,3,GET,0\n")
    records, reader = _read(path, "twitter")
    assert [(r.t_us, r.op) for r in records] == [(1_250_000, "get")]


# -- libCacheSim oracleGeneral ----------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_oracle_general_reads_back(tmp_path: Path, compress: bool) -> None:
    rng = np.random.default_rng(3)
    n = 200_000  # several batches
    t = np.sort(rng.integers(0, 3600, n)).astype(np.uint32)
    ids = rng.integers(0, 2**64 - 1, n, dtype=np.uint64)
    sizes = rng.integers(1, 1 << 20, n).astype(np.uint32)
    path = _write(tmp_path / "w01.oracleGeneral.bin", oracle_bytes(t, ids, sizes), compress)
    reader = open_trace(path)
    assert reader.format == "oracle"
    batches = list(reader.batches())
    assert max(len(b) for b in batches) <= 65_536  # constant memory: bounded batches
    got = np.concatenate([b.records for b in batches])
    assert np.array_equal(got["t_us"], t.astype(np.int64) * 1_000_000)
    assert np.array_equal(got["key_hash"], ids)
    assert np.array_equal(got["value_size"], sizes)
    assert set(got["op"].tolist()) == {OPS.index("get")}


def test_oracle_truncated_tail_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "x.oracleGeneral"
    path.write_bytes(oracle_bytes([1, 2], [10, 11], [5, 6]) + b"\x01" * 10)
    records, reader = _read(path)
    assert len(records) == 2
    assert reader.problems.malformed == {"truncated record: 10 of 24 bytes at the end of the file": [1, [3]]}


# -- CacheLib KV replay CSV -------------------------------------------------------------


CACHELIB_OPS = {"GET": "get", "GET_LEASE": "get", "SET": "set", "SET_LEASE": "set", "DELETE": "delete"}


@pytest.mark.parametrize("compress", [False, True])
def test_cachelib_kv_reads_back_with_op_count(tmp_path: Path, compress: bool) -> None:
    header = b"op_time,key,key_size,op,op_count,size,cache_hits,ttl,usecase,sub_usecase"
    lines, expected = [header], []
    rng = np.random.default_rng(5)
    for i in range(300):
        key = b"%016x" % int(rng.integers(0, 2**62))
        op = list(CACHELIB_OPS)[i % 5]
        count, size, ks = int(rng.integers(1, 4)), int(rng.integers(0, 9000)), int(rng.integers(16, 120))
        ttl = b"" if i % 7 == 0 else b"%d" % (i * 3)
        lines.append(b"%d,%s,%d,%s,%d,%d,0,%s,366387042,3003229276" % (604038471 + i // 50, key, ks, op.encode(),
                                                                        count, size, ttl))
        expected += [((604038471 + i // 50) * 1_000_000, CACHELIB_OPS[op], key, ks, size, int(ttl or 0), 0)] * count
    path = _write(tmp_path / "kv_traces_1.csv", b"\n".join(lines) + b"\n", compress)
    records, reader = _read(path)
    assert reader.format == "cachelib"
    _check(records, expected)


def test_cachelib_v1_header_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "kv.csv"
    path.write_bytes(b"key,op,size,op_count,key_size,ttl\nabc,GET,10,2,20,\nabc,SAT,10,1,20,5\n"
                     b"abc,GET,10,0,20,5\nxyz,SET,5,1,3,60\n")
    records, reader = _read(path)
    assert [(r.op, r.key, r.value_size, r.key_size, r.ttl_s) for r in records] == [
        ("get", b"abc", 10, 20, 0), ("get", b"abc", 10, 20, 0), ("set", b"xyz", 5, 3, 60)]
    assert reader.problems.malformed == {"unknown op 'SAT'": [1, [3]], "op_count must be 1 to 65535": [1, [4]]}
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"key,_op,size\nabc,GET,1\n")
    with pytest.raises(UserError, match="bad.csv:1: not a CacheLib KV trace header.*missing op"):
        list(open_trace(bad, "cachelib"))


def test_cachelib_columns_with_ops_in_lower_case_read_as_in_capitals(tmp_path: Path) -> None:
    """A CSV of CacheLib's columns written by hand (``get``, not ``GET``) was refused line by line as
    "unknown op 'get'"; a mixed-case spelling still is."""
    path = tmp_path / "t.csv"
    path.write_bytes(b"timestamp,key,op,size\n1,a,get,10\n2,b,set,20\n3,a,GET,10\n4,b,delete,0\n5,a,get_lease,10\n"
                     b"6,b,Get,10\n")
    records, reader = _read(path)
    assert reader.format == "cachelib"
    assert [(r.op, r.key) for r in records] == [("get", b"a"), ("set", b"b"), ("get", b"a"), ("delete", b"b"),
                                                 ("get", b"a")]
    assert reader.problems.malformed == {"unknown op 'Get'": [1, [7]]}


# -- Redis MONITOR ----------------------------------------------------------------------


def _redis_quote(arg: bytes) -> bytes:
    """How Redis prints an argument in MONITOR (sdscatrepr), written independently of the reader."""
    named = {ord("\\"): b"\\\\", ord('"'): b'\\"', ord("\n"): b"\\n", ord("\r"): b"\\r", ord("\t"): b"\\t",
             7: b"\\a", 8: b"\\b"}
    out = b'"'
    for byte in arg:
        if byte in named:
            out += named[byte]
        elif 0x20 <= byte < 0x7F:
            out += bytes([byte])
        else:
            out += b"\\x%02x" % byte
    return out + b'"'


def _monitor_line(t: str, client: str, *args: bytes) -> bytes:
    return f"{t} [0 {client}] ".encode() + b" ".join(_redis_quote(a) for a in args)


@pytest.mark.parametrize("compress", [False, True])
def test_redis_monitor_reads_back(tmp_path: Path, compress: bool) -> None:
    odd = b'we"ird\\key\n\x00\xff,'
    a, b = "127.0.0.1:5000", "unix:/tmp/redis.sock"
    lines = [b"OK",
             _monitor_line("1700000000.123456", a, b"GET", b"k1"),
             _monitor_line("1700000000.2", a, b"SET", odd, b"v" * 100, b"EX", b"60"),
             _monitor_line("1700000001.000001", b, b"set", b"k2", b"abc", b"px", b"1500", b"NX"),
             _monitor_line("1700000001.5", b, b"SETEX", b"k3", b"30", b"12345"),
             _monitor_line("1700000002", a, b"PSETEX", b"k4", b"2001", b"x"),
             _monitor_line("1700000003.0", a, b"MGET", b"k1", odd),
             _monitor_line("1700000004.0", a, b"DEL", b"k1", b"k2"),
             _monitor_line("1700000004.1", a, b"UNLINK", b"k3"),
             _monitor_line("1700000005.0", b, b"EXISTS", b"k4"),
             _monitor_line("1700000006.0", b, b"INCR", b"n"),
             _monitor_line("1700000006.5", b, b"INCRBY", b"n", b"5"),
             _monitor_line("1700000007.0", a, b"PING"),
             _monitor_line("1700000007.5", "lua", b"HSET", b"h", b"f", b"v"),
             _monitor_line("1700000008.0", a, b"SET", b"k5", b"v", b"EXAT", b"1700000068")]
    s = 1_000_000
    expected = [(1700000000_123456, "get", b"k1", 2, 0, 0, 0),
                (1700000000_200000, "set", odd, len(odd), 100, 60, 0),
                (1700000001_000001, "set", b"k2", 2, 3, 2, 1),
                (1700000001_500000, "set", b"k3", 2, 5, 30, 1),
                (1700000002 * s, "set", b"k4", 2, 1, 3, 0),
                (1700000003 * s, "get", b"k1", 2, 0, 0, 0),
                (1700000003 * s, "get", odd, len(odd), 0, 0, 0),
                (1700000004 * s, "delete", b"k1", 2, 0, 0, 0),
                (1700000004 * s, "delete", b"k2", 2, 0, 0, 0),
                (1700000004_100000, "delete", b"k3", 2, 0, 0, 0),
                (1700000005 * s, "exists", b"k4", 2, 0, 0, 1),
                (1700000006 * s, "incr", b"n", 1, 0, 0, 1),
                (1700000006_500000, "incr", b"n", 1, 0, 0, 1),
                (1700000008 * s, "set", b"k5", 2, 1, 60, 0)]
    path = _write(tmp_path / "monitor.log", b"\n".join(lines) + b"\n", compress)
    records, reader = _read(path)
    assert reader.format == "redis-monitor"
    _check(records, expected)
    assert reader.problems.skipped == {"redis-cli's OK": [1, [1]], "unsupported command PING": [1, [13]],
                                       "unsupported command HSET": [1, [14]]}
    assert not reader.problems.malformed


def test_redis_monitor_malformed(tmp_path: Path) -> None:
    path = tmp_path / "m.log"
    path.write_bytes(b'1.5 [0 c:1] "GET" "k"\nnot a monitor line\n1.6 [0 c:1] "GET" "unterminated\n'
                     b'1.7 [0 c:1] "SET" "k"\n1.8 [0 c:1] "SET" "k" "v" "EX" "soon"\n')
    records, reader = _read(path, "redis-monitor")
    assert len(records) == 1
    assert reader.problems.malformed == {
        "not a MONITOR line": [1, [2]], "unterminated quoted argument": [1, [3]],
        "SET: wrong number of arguments": [1, [4]], "SET: an argument that must be an integer is not": [1, [5]]}


# -- cachemark's own format -------------------------------------------------------------


def _own_expected(n: int = 400) -> list[Expected]:
    rng = np.random.default_rng(11)
    out = []
    for i in range(n):
        key = KEYS[i % len(KEYS)] + b"%%\xff\n" * (i % 2) + str(i).encode()
        op = ("get", "set", "delete", "exists", "incr")[i % 5]
        out.append((i * 1000, op, key, len(key), int(rng.integers(0, 1 << 20)), (i % 3) * 60, i % 4))
    return out


@pytest.mark.parametrize("raw_keys", [False, True])
@pytest.mark.parametrize("name", ["capture.cmtrace", "capture.cmtrace.zst"])
def test_own_format_round_trip(tmp_path: Path, raw_keys: bool, name: str) -> None:
    expected = _own_expected()
    path = tmp_path / name
    with TraceWriter(path, raw_keys=raw_keys) as writer:
        for t, op, key, _ks, vs, ttl, client in expected:
            writer.write(t, op, key, vs, ttl, client)
    assert (peek(path)[:18] == b"#cachemark-trace/1") and (path.read_bytes()[:4] == b"\x28\xb5\x2f\xfd") == \
        name.endswith(".zst")
    assert not list(tmp_path.glob(".*tmp"))
    records, reader = _read(path)
    assert reader.format == "cachemark"
    _check(records, expected, keys=raw_keys)
    if not raw_keys:
        assert b"with,comma" not in zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes()) \
            if name.endswith(".zst") else b"with,comma" not in path.read_bytes()


def test_writer_leaves_nothing_on_error(tmp_path: Path) -> None:
    path = tmp_path / "x.cmtrace"
    with pytest.raises(RuntimeError), TraceWriter(path) as writer:
        writer.write(1, "get", b"k")
        raise RuntimeError
    assert not list(tmp_path.iterdir())


def test_convert_command_round_trips_a_monitor_log(tmp_path: Path) -> None:
    src = tmp_path / "monitor.log"
    src.write_bytes(b"\n".join([_monitor_line("1.0", "c:1", b"SET", b"a,b", b"xyz", b"EX", b"9"),
                                _monitor_line("2.0", "c:2", b"GET", b"a,b")]) + b"\n")
    out = tmp_path / "out.cmtrace.zst"
    result = _invoke("trace", "convert", str(src), str(out), "--raw-keys")
    assert result.exit_code == 0, result.output
    a, _ = _read(src)
    b, reader = _read(out)
    assert reader.format == "cachemark" and a == b


# -- detection and files that are not there -------------------------------------------------


def test_detection_by_content(tmp_path: Path) -> None:
    samples = {
        "twitter": _twitter_trace(20)[0],
        "cachelib": b"op_time,key,key_size,op,op_count,size,cache_hits,ttl\n1,k,3,GET,1,5,0,0\n",
        "redis-monitor": b'OK\n1700000000.1 [0 127.0.0.1:1] "GET" "k"\n',
        "cachemark": b"#cachemark-trace/1\nt_us,op,key_hash,key_size,value_size,ttl_s,client\n",
        "oracle": oracle_bytes([1, 2, 3], [1, 2, 3], [0, 0, 0]),
    }
    assert set(samples) == set(FORMATS)
    for fmt, data in samples.items():
        for compress in (False, True):
            path = _write(tmp_path / f"trace-{fmt}", data, compress)
            assert open_trace(path).format == fmt, (fmt, compress)
    assert detect_format("x", b"hello world\n") is None
    unknown = tmp_path / "notes.txt"
    unknown.write_text("hello\n")
    with pytest.raises(UserError, match="cannot tell the trace format.*give --format"):
        open_trace(unknown)
    with pytest.raises(UserError, match="unknown trace format 'csv'"):
        open_trace(unknown, "csv")


def test_missing_and_unreadable_files_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such trace file"):
        open_trace(tmp_path / "nope.csv")
    with pytest.raises(UserError, match="is a directory"):
        open_trace(tmp_path, "twitter")
    corrupt = tmp_path / "c.zst"
    corrupt.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 64)
    with pytest.raises(UserError, match="c.zst: corrupt zstd data"):
        list(open_trace(corrupt, "twitter"))
    cut = tmp_path / "cut.zst"  # a download cut short must not read as a shorter trace
    cut.write_bytes(zstandard.ZstdCompressor().compress(_twitter_trace(2000)[0])[:-50])
    with pytest.raises(UserError, match=r"cut.zst: corrupt zstd data: the file ends inside a zstd frame"):
        list(open_trace(cut, "twitter"))
    frames = tmp_path / "frames.zst"  # several frames, as pzstd writes them
    data, expected = _twitter_trace(300)
    frames.write_bytes(b"".join(zstandard.ZstdCompressor().compress(part) for part in (data[:5001], data[5001:])))
    _check(_read(frames, "twitter")[0], expected)


# -- statistics ------------------------------------------------------------------------


def _zipf_requests(alpha: float, n_keys: int, n_requests: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = np.arange(1, n_keys + 1, dtype=np.float64) ** -alpha
    ids = rng.choice(n_keys, size=n_requests, p=p / p.sum())
    return rng.permutation(n_keys).astype(np.uint64)[ids] * np.uint64(0x9E3779B97F4A7C15)  # ranks ≠ ids


def _records(ids: np.ndarray, sizes: np.ndarray | None = None, t_s: np.ndarray | None = None) -> np.ndarray:
    out = np.zeros(len(ids), dtype=RECORD_DTYPE)
    out["key_hash"] = ids
    out["value_size"] = 100 if sizes is None else sizes
    out["t_us"] = 0 if t_s is None else t_s * 1_000_000
    return out


@pytest.mark.parametrize("alpha", [0.8, 1.0])
def test_stats_against_ground_truth_zipf(alpha: float) -> None:
    ids = _zipf_requests(alpha, 20_000, 1_000_000)
    builder = StatsBuilder()
    for start in range(0, len(ids), 65_536):
        builder.add(_records(ids[start:start + 65_536]))
        builder._compact()  # every batch merged into the table: the streaming path, not one big sort
    stats = builder.finish()
    _, counts = np.unique(ids, return_counts=True)
    assert stats.requests == len(ids)
    assert stats.objects == len(counts)
    assert stats.one_hit_wonders == np.count_nonzero(counts == 1) / len(counts)
    assert stats.compulsory_miss_ratio == len(counts) / len(ids)
    assert abs(stats.zipf_alpha - alpha) < 0.05, stats.zipf_alpha


def test_stats_sizes_ttl_ops_and_rate() -> None:
    rng = np.random.default_rng(2)
    n = 300_000
    ids = rng.integers(0, 50_000, n).astype(np.uint64)
    sizes = rng.lognormal(7, 1.5, n).astype(np.int64).clip(1, 2**31)
    t = np.sort(rng.integers(0, 100, n))
    recs = _records(ids, sizes, t)
    recs["op"] = rng.choice([OPS.index("get"), OPS.index("set"), OPS.index("delete")], n, p=[0.7, 0.25, 0.05])
    recs["ttl_s"] = np.where(rng.random(n) < 0.6, rng.integers(1, 100_000, n), 0)
    recs["key_size"] = rng.integers(5, 250, n)
    builder = StatsBuilder()
    builder.add(recs[: n // 2])
    builder.add(recs[n // 2:])
    stats = builder.finish()
    for q in (50, 90, 99):
        assert math.isclose(stats.value_size_requests[f"p{q}"], np.percentile(sizes, q, method="inverted_cdf"),
                            rel_tol=0.01)
    largest = np.zeros(50_000, np.int64)
    np.maximum.at(largest, ids.astype(np.int64), sizes)
    largest = largest[np.unique(ids).astype(np.int64)]
    assert math.isclose(stats.value_size_objects["p50"], np.percentile(largest, 50, method="inverted_cdf"),
                        rel_tol=0.01)
    assert stats.working_set_bytes == largest.sum()
    writes = recs["op"] == OPS.index("set")
    ttl = recs["ttl_s"][writes]
    assert math.isclose(stats.ttl["p90"], np.percentile(ttl[ttl > 0], 90, method="inverted_cdf"), rel_tol=0.01)
    assert math.isclose(stats.writes_without_ttl, np.mean(ttl == 0))
    assert stats.key_size["max"] == recs["key_size"].max()
    assert stats.op_counts == {op: int(np.count_nonzero(recs["op"] == OPS.index(op))) for op in OPS}
    assert stats.rate_width_s == 1 and stats.rate_series == np.bincount(t).tolist()
    assert stats.duration_s == t.max() - t.min()


def test_rate_buckets_widen_for_long_traces() -> None:
    t = np.arange(0, 10_000, 2)  # 10,000 s: more seconds than rate buckets
    builder = StatsBuilder()
    builder.add(_records(np.arange(len(t), dtype=np.uint64)[: len(t) // 2], None, t[: len(t) // 2]))
    builder.add(_records(np.arange(len(t), dtype=np.uint64)[len(t) // 2:], None, t[len(t) // 2:]))
    stats = builder.finish()
    assert stats.rate_width_s == 16 and sum(stats.rate_series) == len(t) and len(stats.rate_series) <= 1024
    assert stats.rate_series[0] == 8


def test_sampling_scales_counts_and_keeps_ratios() -> None:
    ids = _zipf_requests(0.9, 200_000, 1_000_000, seed=4)
    full = StatsBuilder()
    full.add(_records(ids))
    exact = full.finish()
    sampled = StatsBuilder(sample_rate=0.1)
    sampled.add(_records(ids))
    est = sampled.finish()
    assert est.objects == pytest.approx(exact.objects, rel=0.05)
    assert est.requests == exact.requests and est.op_counts == exact.op_counts  # per request: exact
    assert est.one_hit_wonders == pytest.approx(exact.one_hit_wonders, abs=0.03)
    assert est.zipf_alpha == pytest.approx(exact.zipf_alpha, abs=0.1)


def test_stats_from_a_file_and_the_cli(tmp_path: Path) -> None:
    ids = _zipf_requests(1.0, 5_000, 200_000)
    t = np.sort(np.random.default_rng(0).integers(0, 600, len(ids)))
    path = tmp_path / "zipf.oracleGeneral.bin.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(oracle_bytes(t, ids, np.full(len(ids), 4096))))
    stats = trace_stats(open_trace(path))
    assert stats.requests == len(ids) and stats.objects == len(np.unique(ids))
    assert abs(stats.zipf_alpha - 1.0) < 0.05

    result = _invoke("trace", "stats", str(path), "--markdown")
    assert result.exit_code == 0, result.output
    assert "## Trace statistics" in result.stdout and "| requests | 200,000 |" in result.stdout
    assert f"| objects | {stats.objects:,} |" in result.stdout
    result = _invoke("trace", "stats", str(path), "--sample", "0.5")
    assert result.exit_code == 0 and "one-hit wonders" in result.stdout and "Op mix" in result.stdout
    assert "Objects sampled at rate 0.5" in result.stdout


def test_cli_strict_and_missing_file_exit_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"1,k,1,2,3,get,0\n2,k,1,2,3,frob,0\n")
    proc = _cli("trace", "stats", str(path), "--format", "twitter", "--strict")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"cachemark: error: {path}:2: unknown operation 'frob'"]
    result = _invoke("trace", "stats", str(path))
    assert result.exit_code == 0 and "unknown operation 'frob' (line 2)" in result.stdout
    proc = _cli("trace", "stats", str(tmp_path / "missing.csv"))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"cachemark: error: {tmp_path / 'missing.csv'}: no such trace file"]
    result = _invoke("trace", "stats", str(path), "--sample", "2")
    assert isinstance(result.exception, UserError) and "--sample 2" in str(result.exception)


def test_trace_stats_blocks_render_everywhere() -> None:
    from cachemark.cli.trace_commands import trace_stats_blocks
    from cachemark.report.blocks import Block, to_html, to_markdown

    builder = StatsBuilder()
    builder.add(_records(_zipf_requests(0.8, 1000, 50_000), None, np.arange(50_000) // 1000))
    blocks = trace_stats_blocks(builder.finish())
    assert all(isinstance(b, Block) for b in blocks)
    assert [b.title for b in blocks] == ["Trace", "Op mix", "Distributions", "Request rate over time"]
    assert "Zipf slope" in to_html(blocks[0]) and "| get | 50,000 | 100.0% |" in to_markdown(blocks[1])


def _invoke(*args: str):  # noqa: ANN202
    from typer.testing import CliRunner

    from cachemark.cli import app

    return CliRunner().invoke(app, list(args))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=os.getcwd(), timeout=120, env=dict(os.environ))


def test_vectorised_twitter_parser_agrees_with_the_line_parser() -> None:
    from cachemark.workload.traces.fastcsv import parse_twitter_block
    from cachemark.workload.traces.formats import Columns, parse_twitter
    from cachemark.workload.traces.record import Problems

    rng = np.random.default_rng(9)
    pieces = [b"12", b"0", b"4294967295", b"4294967296", b"-3", b"1.5", b"", b"x", b"007", b"99999999999999",
              b"1234567890123"]
    ops = [b"get", b"gets", b"GET", b"prepend", b"replace", b"frob", b"", b"getx", b"decr", b"cas"]
    lines = []
    for i in range(3000):
        pick = lambda options: options[int(rng.integers(len(options)))]  # noqa: E731
        key = pick(KEYS) + (b"\xff\x00" if i % 11 == 0 else b"")
        fields = [pick(pieces) if i % 5 == 0 else b"%d" % (i // 7), key, pick(pieces) if i % 3 == 0 else b"10",
                  pick(pieces) if i % 4 == 0 else b"200", b"3", pick(ops), pick(pieces) if i % 6 == 0 else b"0"]
        line = b",".join(fields[: 7 - (i % 97 == 0)])
        lines.append(line + (b"\r" if i % 13 == 0 else b""))
    data = b"\n".join(lines) + b"\n"
    slow_problems, fast_problems = Problems("x"), Problems("x")
    columns = Columns()
    parse_twitter([line.rstrip(b"\r") for line in lines], 1, slow_problems, columns)
    expected, expected_keys = columns.finish(True)
    got, got_keys = parse_twitter_block(data, 1, fast_problems, True)
    assert len(expected) > 1000 and np.array_equal(got, expected) and got_keys == expected_keys
    assert fast_problems.malformed == slow_problems.malformed and fast_problems.skipped == slow_problems.skipped


def test_key_hash_matches_the_vectors_the_rust_side_checks_too() -> None:
    """One table of fixed vectors (tests/data/key_hash_vectors.json) for every language that hashes keys:
    engine/trace's test reads the same file, so the capture proxy, the simulator and this writer agree."""
    vectors = json.loads((Path(__file__).parent / "data" / "key_hash_vectors.json").read_text())
    assert len(vectors) >= 8
    keys = [bytes.fromhex(key) for key, _ in vectors]
    assert [f"{key_hash(k):016x}" for k in keys] == [want for _, want in vectors]
    from cachemark.workload.traces import key_hashes

    assert [f"{h:016x}" for h in key_hashes(keys).tolist()] == [want for _, want in vectors]


def test_key_hash_follows_its_documented_definition() -> None:
    """docs/traces.md specifies the hash so other stacks (the engine, drivers) can compute it: check it
    here against a plain-Python transcription of that text."""
    mask = (1 << 64) - 1
    k1, k2, seed = 0x87C37B91114253D5, 0x4CF5AD432745937F, 0x2545F4914F6CDD1D

    def spec(key: bytes) -> int:
        h = ((len(key) * k1) & mask) ^ seed
        for i in range(0, len(key), 8):
            w = int.from_bytes(key[i:i + 8].ljust(8, b"\0"), "little")
            x = h ^ ((w * k1) & mask)
            h = ((((x << 31) | (x >> 33)) & mask) * k2) & mask
        h ^= h >> 30
        h = (h * 0xBF58476D1CE4E5B9) & mask
        h ^= h >> 27
        h = (h * 0x94D049BB133111EB) & mask
        return h ^ (h >> 31)

    keys = [b"", b"a", b"a\0", b"user:42", b"exactly8", b"nine byte", *KEYS, bytes(range(256)) * 3]
    assert [key_hash(k) for k in keys] == [spec(k) for k in keys]
    from cachemark.workload.traces import key_hashes

    assert key_hashes(keys).tolist() == [spec(k) for k in keys]  # one batch of mixed lengths


def test_the_documented_sample_of_the_own_format_reads(tmp_path: Path) -> None:
    doc = (Path(__file__).parent.parent / "docs" / "traces.md").read_text()
    sample = doc.split("```\n#cachemark-trace/1\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "sample.cmtrace"
    path.write_text("#cachemark-trace/1\n" + sample)
    records, reader = _read(path)
    assert [(r.op, r.key_hash, r.value_size, r.ttl_s) for r in records] == [
        ("get", key_hash(b"user:42"), 0, 0), ("set", key_hash(b"user:42"), 14, 300)]
    assert not reader.problems.malformed


def test_own_format_comments_computed_hashes_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "hand.cmtrace"
    path.write_bytes(b"#cachemark-trace/1\r\nt_us,op,key_hash,key_size,value_size,ttl_s,client,key\r\n"
                     b"# a comment, with, six, commas, in, it, ok\n"
                     b"5,get,,3,0,0,0,a%2Cb\n"
                     b"6,set_many,18446744073709551615,1,2,3,4,x\n"
                     b"7,set,18446744073709551616,1,2,3,4,x\n"
                     b"8,frob,1,1,2,3,4,x\n"
                     b"9,get,1,1,2,3\n"
                     b"\n"
                     b"10,get_many,12,1,0,0,4294967295,%00\n")
    records, reader = _read(path)
    assert [(r.t_us, r.op, r.key_hash, r.key, r.client) for r in records] == [
        (5, "get", key_hash(b"a,b"), b"a,b", 0), (6, "set_many", 2**64 - 1, b"x", 4),
        (10, "get_many", 12, b"\0", 2**32 - 1)]
    assert reader.problems.malformed == {"key_hash out of range: 18446744073709551616": [1, [6]],
                                         "unknown op 'frob'": [1, [7]],
                                         "8 comma-separated fields expected, found 6": [1, [8]]}
    assert reader.problems.skipped == {"comment": [1, [3]], "blank line": [1, [9]]}
    bad = tmp_path / "bad.cmtrace"
    bad.write_bytes(b"#cachemark-trace/1\nt_us,op,key\n")
    with pytest.raises(UserError, match="bad.cmtrace:2: a cachemark trace header must be"):
        list(open_trace(bad))


def test_vectorised_cachelib_parser_agrees_with_the_line_parser() -> None:
    from cachemark.workload.traces.fastcsv import parse_cachelib_block
    from cachemark.workload.traces.formats import Columns, cachelib_header, make_cachelib_parser
    from cachemark.workload.traces.record import Problems

    header = b"op_time,key,key_size,op,op_count,size,cache_hits,ttl"
    index = cachelib_header(header, "x")
    rng = np.random.default_rng(13)
    numbers = [b"0", b"7", b"", b"-1", b"x", b"+5", b"65536", b"4294967296", b"1.5", b"99999999999999"]
    ops = [b"GET", b"GET_LEASE", b"SET", b"SET_LEASE", b"DELETE", b"SAT", b"GET_LEASX", b"", b"get", b"set_lease",
           b"Delete"]
    lines = []
    for i in range(3000):
        pick = lambda options: options[int(rng.integers(len(options)))]  # noqa: E731
        fields = [pick(numbers) if i % 7 == 0 else b"%d" % (i // 10), b"%016x" % i,
                  pick(numbers) if i % 5 == 0 else b"24", pick(ops),
                  pick(numbers) if i % 3 == 0 else b"%d" % (1 + i % 3), pick(numbers) if i % 4 == 0 else b"87",
                  b"0", pick(numbers) if i % 2 == 0 else b"60"]
        if i % 50 == 0:
            fields.append(b"extra")  # cachebench accepts trailing fields: the slow path must too
        lines.append(b",".join(fields))
    slow_problems, fast_problems = Problems("x"), Problems("x")
    columns = Columns()
    make_cachelib_parser(index)(lines, 2, slow_problems, columns)
    expected, expected_keys = columns.finish(True)
    got, got_keys = parse_cachelib_block(b"\n".join(lines) + b"\n", 2, fast_problems, True, index, 8)
    assert len(expected) > 1000 and np.array_equal(got, expected) and got_keys == expected_keys
    assert fast_problems.malformed == slow_problems.malformed


def test_a_small_zstd_file_that_inflates_hugely_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """Feeds follow the ratio: a 90 KB file inflating to 500 MB was decoded in one call (all of it at once)."""
    block = b"1,get,12345,10,100,0,0\n" * 50_000
    path = tmp_path / "dense.cmtrace.zst"
    with open(path, "wb") as f, zstandard.ZstdCompressor(level=3).stream_writer(f) as w:
        w.write(b"#cachemark-trace/1\nt_us,op,key_hash,key_size,value_size,ttl_s,client\n")
        for _ in range(500_000_000 // len(block)):
            w.write(block)
    assert path.stat().st_size < 200_000
    probe = ("import resource, sys\nfrom cachemark.workload.traces import open_trace, trace_stats\n"
             "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
             "stats = trace_stats(open_trace(sys.argv[1]))\n"
             "print(stats.requests, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)\n")
    done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    requests, grew = (int(x) for x in done.stdout.split())
    assert requests == 500_000_000 // len(block) * 50_000
    # 96 MB beside a busy loop (what the decoder and the counted columns allocate; load does not move it).
    # The bound was 150 MB, 1.6x; now 300 MB (3.1x), still under the 500 MB one whole decode alone takes
    # (the bug: the whole 500 MB and 1.1 GB of records)
    assert grew < 300_000_000, grew
