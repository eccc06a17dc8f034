"""The Rust block parsers (engine/sim/src/csv.rs) against the numpy ones (workload/traces/fastcsv.py).

The two must hand the same lines to the slow (per-line Python) path and produce the same records,
so each test parses the same block both ways and compares the records, the indexes of the lines the
fast path handled, and the problems counted. The corpora are random mutations of valid lines (bytes
replaced, commas inserted, fields swapped for awkward values) plus the edge cases by name.
"""

from __future__ import annotations

import numpy as np
import pytest

from cachemark.workload.traces import fastcsv, open_trace
from cachemark.workload.traces.formats import cachelib_header
from cachemark.workload.traces.record import RECORD_DTYPE, Problems, key_hash, key_hashes
from cachemark.workload.traces.source import iter_byte_blocks

pytestmark = pytest.mark.skipif(len(fastcsv.NATIVE) < 3, reason="cachemark._engine without the CSV parsers")

# values that sit on every rule's edge: digit counts, u32/u64 limits, signs, fractions, spaces, NULs
NUMBERS = [b"0", b"7", b"007", b"", b"-1", b"+5", b" 5", b"5 ", b"1.5", b"x", b"\xd9\xa1", b"4294967295",
           b"4294967296", b"9999999999", b"99999999999", b"65535", b"65536", b"999999999999", b"1234567890123",
           b"99999999999999999999", b"18446744073709551615", b"18446744073709551616", b"000000000000000000001",
           b"1\x00", b"\x001"]
KEYS = [b"plain", b"with,comma", b"a,b,,c", b"tail,", b",head", b"", b"sp ace", b"\xff\x00bin", b"x" * 40,
        b"nz:u:eeW511W3dcH3de3d15ec", b"cr\rin"]
NOISE = b",\r\0-. 9x\xff\n"


def _one(parse, data: bytes, args: tuple, native: dict) -> tuple[np.ndarray, np.ndarray, Problems]:  # noqa: ANN001
    """(records, lines handled by the fast path, problems) with ``fastcsv.NATIVE`` set to ``native``."""
    handled = []
    original = fastcsv._with_slow_lines

    def spy(data, first, problems, keep_keys, starts, ends, good, *rest):  # noqa: ANN001, ANN202
        handled.append(np.array(good))
        return original(data, first, problems, keep_keys, starts, ends, good, *rest)

    saved = dict(fastcsv.NATIVE)
    fastcsv.NATIVE.clear()
    fastcsv.NATIVE.update(native)
    fastcsv._with_slow_lines = spy
    try:
        problems = Problems("x")
        records, keys = parse(data, 1, problems, False, *args)
    finally:
        fastcsv._with_slow_lines = original
        fastcsv.NATIVE.clear()
        fastcsv.NATIVE.update(saved)
    assert keys is None and records.dtype == RECORD_DTYPE
    # no call: the native parser handled every line, one record each
    return records, handled[0] if handled else np.arange(data.count(b"\n")), problems


def _both(parse, data: bytes, *args) -> tuple[np.ndarray, np.ndarray, Problems]:  # noqa: ANN001
    """(records, lines handled by the fast path, problems) from the Rust path, then from numpy;
    asserts they are identical and returns the Rust ones."""
    rust, rust_good, rust_problems = _one(parse, data, args, dict(fastcsv.NATIVE))
    numpy, numpy_good, numpy_problems = _one(parse, data, args, {})
    assert np.array_equal(rust_good, numpy_good), np.setxor1d(rust_good, numpy_good)[:10]
    assert np.array_equal(rust, numpy)
    assert rust_problems.malformed == numpy_problems.malformed
    assert rust_problems.skipped == numpy_problems.skipped
    return rust, rust_good, rust_problems


def _mutate(rng: np.random.Generator, fields: list[bytes], i: int) -> bytes:
    """A valid line's fields, broken in one of several ways (or not at all)."""
    fields = list(fields)
    kind = i % 6
    if kind == 1:  # one field replaced by an edge value
        fields[int(rng.integers(len(fields)))] = NUMBERS[int(rng.integers(len(NUMBERS)))]
    line = b",".join(fields)
    if kind == 2 and line:  # one byte replaced by noise
        at = int(rng.integers(len(line)))
        line = line[:at] + NOISE[int(rng.integers(len(NOISE) - 1)):][:1] + line[at + 1:]
    elif kind == 3:  # a field dropped or added
        line = b",".join(fields[:-1]) if i % 2 else line + b",9"
    elif kind == 4:
        line += b"\r"
    elif kind == 5 and i % 10 == 5:
        line = [b"", b"\r", b" ", b",,,,,,", b"#c,o,m,m,e,n,t"][i % 5]
    return line


def _corpus(make_fields, n: int = 3000, seed: int = 1) -> bytes:  # noqa: ANN001
    rng = np.random.default_rng(seed)
    return b"".join(_mutate(rng, make_fields(rng, i), i) + b"\n" for i in range(n))


def _pick(rng: np.random.Generator, options: list[bytes]) -> bytes:
    return options[int(rng.integers(len(options)))]


TWITTER_OPS = [b"get", b"gets", b"set", b"add", b"replace", b"cas", b"append", b"prepend", b"delete", b"incr",
               b"decr", b"GET", b"Get", b"frob", b"", b"getx", b"prepends", b"replaced", b"get\0", b"get\0\0\0\0\0",
               b"\0get", b"ge"]


def _twitter_fields(rng: np.random.Generator, i: int) -> list[bytes]:
    return [b"%d" % (i // 7) if i % 5 else _pick(rng, NUMBERS), _pick(rng, KEYS), b"%d" % (i % 50), b"%d" % (i * 37),
            b"%d" % (i % 9), _pick(rng, TWITTER_OPS) if i % 3 else b"get", b"0" if i % 4 else b"3600"]


def test_twitter_random_broken_lines() -> None:
    data = _corpus(_twitter_fields)
    records, good, problems = _both(fastcsv.parse_twitter_block, data)
    assert len(good) > 500 and problems.malformed and problems.skipped  # every path was exercised


@pytest.mark.parametrize("with_keys", [False, True])
def test_own_format_random_broken_lines(with_keys: bool) -> None:
    ops = [b"get", b"set", b"delete", b"exists", b"get_many", b"set_many", b"incr", b"clean", b"fetch", b"GET",
           b"get_manyx", b"set_many\0", b"get\0", b"frob", b""]
    hashes = [b"0", b"18446744073709551615", b"18446744073709551616", b"", b"00000000000000000042",
              b"1844674407370955161", b"99999999999999999999"]

    def fields(rng: np.random.Generator, i: int) -> list[bytes]:
        row = [b"%d" % (1700000000000000 + i) if i % 5 else _pick(rng, NUMBERS), _pick(rng, ops),
               _pick(rng, hashes) if i % 2 else b"%d" % key_hash(b"%d" % i), b"7", b"%d" % (i * 13), b"0", b"3"]
        return row + [b"k%d%%2C" % i] if with_keys else row

    data = _corpus(fields, seed=2 + with_keys)
    records, good, problems = _both(fastcsv.parse_own_block, data, with_keys)
    assert len(good) > 500 and problems.malformed


@pytest.mark.parametrize("header", [b"op_time,key,key_size,op,op_count,size,cache_hits,ttl",
                                    b"key,op,size,op_count,key_size,ttl", b"key,op,size",
                                    b"size,ttl,op,usecase,key"])
def test_cachelib_random_broken_lines(header: bytes) -> None:
    index = cachelib_header(header, "x")
    width = header.count(b",") + 1
    ops = [b"GET", b"GET_LEASE", b"SET", b"SET_LEASE", b"DELETE", b"SAT", b"GET_LEASX", b"GET_LEAS", b"",
           b"get", b"get_lease", b"set_lease", b"delete", b"Get", b"get_leasE", b"GET\0", b"GET_LEASE\0"]
    names = header.split(b",")

    def fields(rng: np.random.Generator, i: int) -> list[bytes]:
        value = {b"op_time": b"%d" % (i // 10), b"key": b"%016x" % i if i % 4 else _pick(rng, KEYS),
                 b"key_size": b"24", b"op": _pick(rng, ops), b"op_count": b"%d" % (1 + i % 3) if i % 7 else
                 _pick(rng, NUMBERS), b"size": b"87", b"cache_hits": b"0", b"ttl": b"60" if i % 2 else b"",
                 b"usecase": b"u"}
        return [value[name] for name in names]

    data = _corpus(fields, seed=len(header))
    records, good, problems = _both(fastcsv.parse_cachelib_block, data, index, width)
    assert len(good) > 500 and problems.malformed
    if b"op_count" in names:
        assert len(records) > len(np.unique(good))  # repeats were applied


def test_cachelib_repeats_do_not_hide_a_bad_line() -> None:
    """Two records from line 1 and none from line 2: the block still has a line for the slow path."""
    index = cachelib_header(b"key,op,size,op_count", "x")
    records, good, problems = _both(fastcsv.parse_cachelib_block, b"a,GET,1,2\nb,FROB,1,1\n", index, 4)
    assert len(records) == 2 and good.tolist() == [0, 0]
    assert problems.malformed == {"unknown op 'FROB'": [1, [2]]}


def test_twitter_edge_cases() -> None:
    lines = [
        b"1,k,3,4,5,get,6\r",              # CRLF
        b"",                               # empty line: skipped
        b"\r",                             # CR only: skipped
        b"2,a,b,c,5,100,2,set,3600",       # a key with commas: the slow path
        b"999999999999,k,1,1,1,get,0",     # 12-digit seconds: fast
        b"1000000000000,k,1,1,1,get,0",    # 13 digits: the slow path (which takes it: it fits in µs)
        b"3,k,4294967295,4294967295,4294967295,get,4294967295",  # u32 max: fast
        b"3,k,4294967296,1,1,get,0",       # u32 overflow: malformed
        b"3,k,1,1,4294967296,get,0",
        b"3,k,1,1,1,prepends,0",           # an op of 8 letters: unknown
        b"3,k,1,1,1,replace,0",            # 7 letters
        b"3,k,1,1,1,GET,0",                # upper case: the slow path accepts it
        b"3.5,k,1,1,1,get,0",              # fractional time: the slow path
        b"3,,1,1,1,get,0",                 # an empty key
        b"3,k,1,1,1,get\0,0",              # NUL-padded op: numpy's word lookup takes it
    ]
    records, good, problems = _both(fastcsv.parse_twitter_block, b"\n".join(lines) + b"\n")
    assert good.tolist() == [0, 4, 6, 10, 13, 14]
    assert records["t_us"][2:4].tolist() == [999_999_999_999 * 10**6, 10**18]
    assert records["key_hash"][8] == key_hash(b"")
    assert len(records) == 10 and problems.skipped == {"blank line": [2, [2, 3]]}
    assert sum(count for count, _ in problems.malformed.values()) == 3


def test_own_edge_cases() -> None:
    lines = [b"5,get,,3,0,0,0,a%2Cb",                          # empty hash: computed from the key (slow)
             b"6,set_many,18446744073709551615,1,2,3,4,x",     # u64 max
             b"7,set,18446744073709551616,1,2,3,4,x",
             b"8,frob,1,1,2,3,4,x",
             b"9,get,1,1,2,3",
             b"",
             b"# a, comment, with, seven, commas, in, it, ok",
             b"999999999999999999,get_many,12,1,0,0,4294967295,%00\r",
             b"1000000000000000000,get,12,1,0,0,1,k"]           # 19 digits: the slow path
    records, good, problems = _both(fastcsv.parse_own_block, b"\n".join(lines) + b"\n", True)
    assert good.tolist() == [1, 7]
    assert records["key_hash"].tolist() == [key_hash(b"a,b"), 2**64 - 1, 12, 12]
    assert problems.skipped == {"blank line": [1, [6]], "comment": [1, [7]]}


def test_the_reader_passes_whole_lines_only(tmp_path) -> None:  # noqa: ANN001
    """The parsers take whole lines (each ends in \\n): the reader adds one after a last line that lacks
    it. A block that ends mid-line anyway drops that tail, in both paths."""
    import io

    blocks = list(iter_byte_blocks(io.BytesIO(b"1,k,3,4,5,get,6\n2,k,3,4,5,get,6"), size=7))
    assert all(block.endswith(b"\n") for _, block in blocks)
    assert b"".join(block for _, block in blocks) == b"1,k,3,4,5,get,6\n2,k,3,4,5,get,6\n"
    records, good, _ = _both(fastcsv.parse_twitter_block, b"1,k,3,4,5,get,6\n2,k,3,4,5,get,6")
    assert good.tolist() == [0]
    path = tmp_path / "t.csv"
    path.write_bytes(b"1,k,3,4,5,get,6\n2,k,3,4,5,set,6")
    assert [r.op for r in open_trace(path, "twitter")] == ["get", "set"]
    # the reader's native path hands the parser the header's block with the unterminated last line after it
    path.write_bytes(b"#cachemark-trace/1\nt_us,op,key_hash,key_size,value_size,ttl_s,client\n5,get,7,1,0,0,0")
    assert [(r.t_us, r.key_hash) for r in open_trace(path, "cachemark")] == [(5, 7)]
    path.write_bytes(b"key,op,size\nk,GET,3\nk,FROB,3\nk,SET,4")
    reader = open_trace(path, "cachelib")
    assert [(r.op, r.value_size) for r in reader] == [("get", 3), ("set", 4)]
    assert reader.problems.malformed == {"unknown op 'FROB'": [1, [3]]}


def test_native_records_are_writable_and_keep_keys_uses_numpy() -> None:
    data = b"1,k,3,4,5,get,6\n"
    records, _ = fastcsv.parse_twitter_block(data, 1, Problems("x"), False)
    records["t_us"] += 1  # a caller may adjust a batch in place
    records, keys = fastcsv.parse_twitter_block(data, 1, Problems("x"), True)
    assert keys == [b"k"] and records["key_hash"][0] == key_hash(b"k")


def _through_reader(path, fmt: str) -> tuple[np.ndarray, dict, dict]:  # noqa: ANN001
    reader = open_trace(path, fmt)
    records = np.concatenate([batch.records for batch in reader.batches()])
    return records, reader.problems.malformed, reader.problems.skipped


@pytest.mark.parametrize("fmt", ["twitter", "cachemark", "cachelib"])
def test_files_of_several_blocks_through_the_reader(tmp_path, fmt: str) -> None:  # noqa: ANN001
    """~10 MB files (three 4 MiB blocks), plain and zstd, with bad lines here and there: the same
    records and the same problems — line numbers included — through both paths."""
    import zstandard

    rng = np.random.default_rng(5)
    n = 200_000
    keys = [b"nz:u:%0*x" % (15 + i % 20, i * 2654435761 % (1 << 60)) for i in range(5000)]
    ids = rng.integers(0, len(keys), n).tolist()
    ops = (b"get", b"set", b"delete")
    if fmt == "twitter":
        head, row = b"", b"%d,%s,%d,%d,%d,%s,%d\n"
        rows = [row % (i // 1000, keys[k], len(keys[k]), k % 977, k % 50, ops[i % 3], 60 * (i % 3 == 1))
                for i, k in enumerate(ids)]
    elif fmt == "cachemark":
        head = b"#cachemark-trace/1\nt_us,op,key_hash,key_size,value_size,ttl_s,client\n"
        hashes = key_hashes(keys).tolist()
        rows = [b"%d,%s,%d,%d,%d,0,%d\n" % (i * 10, ops[i % 3], hashes[k], len(keys[k]), k % 977, k % 50)
                for i, k in enumerate(ids)]
    else:
        head = b"op_time,key,key_size,op,op_count,size,cache_hits,ttl\n"
        rows = [b"%d,%s,%d,%s,%d,%d,0,\n" % (i // 1000, keys[k], len(keys[k]), ops[i % 3].upper(), 1 + i % 2, k)
                for i, k in enumerate(ids)]
    for at in (10, 77_777, 150_001):  # a bad line in each block
        rows[at] = b"1,bad,x,1\n"
    plain = tmp_path / f"t.{fmt}"
    plain.write_bytes(head + b"".join(rows))
    packed = tmp_path / f"t.{fmt}.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    for path in (plain, packed):
        saved = dict(fastcsv.NATIVE)
        try:
            rust = _through_reader(path, fmt)
            fastcsv.NATIVE.clear()
            numpy = _through_reader(path, fmt)
        finally:
            fastcsv.NATIVE.update(saved)
        assert np.array_equal(rust[0], numpy[0]) and rust[1:] == numpy[1:]
        (count, lines), = rust[1].values()
        assert count == 3 and lines == [at + 1 + head.count(b"\n") for at in (10, 77_777, 150_001)]
