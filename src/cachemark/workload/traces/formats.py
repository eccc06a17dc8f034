"""The trace formats cachemark reads, one parser each, and how a file's format is recognised.

Owns the per-format line parsers (Twitter cache-trace CSV, CacheLib's KV replay CSV, Redis
``MONITOR`` output, cachemark's own ``#cachemark-trace/1`` CSV), the binary reader of
libCacheSim's ``oracleGeneral`` records (numpy, no per-record Python), and
:func:`detect_format` (file name first, then the first decompressed bytes). Every text parser
turns one chunk of lines into columns; a line it cannot use is counted in
:class:`~.record.Problems` with a reason, and a parser never raises for one bad line unless the
reader is strict. Each parser has a fast path (one ``try`` around the happy case) and a slow
path that says *why* a line failed, so the common case pays nothing for good messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

import numpy as np

from ...errors import UserError
from ...textfile import one_line
from .record import DELETE, EXISTS, GET, INCR, OP_CODE, OPS, RECORD_DTYPE, SET, Problems, key_hashes

FORMATS = ("twitter", "oracle", "cachelib", "redis-monitor", "cachemark")
ALIASES = {"oraclegeneral": "oracle", "twitter-csv": "twitter", "kv": "cachelib", "monitor": "redis-monitor",
           "redis": "redis-monitor", "own": "cachemark"}
MAGIC = b"#cachemark-trace/1"
COLUMNS = ("t_us", "op", "key_hash", "key_size", "value_size", "ttl_s", "client")

ORACLE_DTYPE = np.dtype([("time", "<u4"), ("obj_id", "<u8"), ("size", "<u4"), ("next_vtime", "<i8")])
U32 = 1 << 32
SECOND = 1_000_000


def canonical(name: str) -> str:
    """A format name as given on the command line, checked; unknown names are one UserError line."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in FORMATS:
        raise UserError(f"unknown trace format {one_line(name, 40)!r}: choose one of {', '.join(FORMATS)}")
    return key


# --------------------------------------------------------------------------------------------
# Columns: what a text parser fills for one chunk, turned into a record array at the end.


class Columns:
    __slots__ = ("t", "op", "keys", "hashes", "ks", "vs", "ttl", "client", "repeat")

    def __init__(self) -> None:
        self.t: list[int] = []
        self.op: list[int] = []
        self.keys: list[bytes] = []
        self.hashes: list[int] | None = None  # the own format carries hashes instead of keys
        self.ks: list[int] = []
        self.vs: list[int] = []
        self.ttl: list[int] = []
        self.client: list[int] = []
        self.repeat: list[int] | None = None  # CacheLib's op_count

    def finish(self, keep_keys: bool) -> tuple[np.ndarray, list[bytes] | None]:
        n = len(self.op)
        out = np.empty(n, dtype=RECORD_DTYPE)
        out["t_us"] = self.t
        out["op"] = self.op
        out["key_hash"] = key_hashes(self.keys) if self.hashes is None else np.array(self.hashes, dtype=np.uint64)
        out["key_size"] = self.ks
        out["value_size"] = self.vs
        out["ttl_s"] = self.ttl
        out["client"] = self.client
        keys = self.keys if keep_keys and len(self.keys) == n else None
        if self.repeat is not None:
            counts = np.array(self.repeat, dtype=np.int64)
            out = np.repeat(out, counts)
            if keys is not None:
                keys = [k for k, c in zip(keys, self.repeat) for _ in range(c)]
        return out, keys


LineParser = Callable[[list[bytes], int, Problems, Columns], None]


def _int_field(text: bytes, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{what} is not an integer: {one_line(text.decode('latin-1'), 24)!r}") from None
    if value < 0 or value >= U32:
        raise ValueError(f"{what} out of range: {value}")
    return value


def _seconds_to_us(text: bytes, what: str = "timestamp") -> int:
    try:
        if b"." not in text:
            value = int(text) * SECOND
        else:
            whole, _, frac = text.partition(b".")
            if not frac.isdigit() or (whole and not whole.lstrip(b"-").isdigit()):
                raise ValueError
            value = int(whole or b"0") * SECOND + int((frac + b"000000")[:6])
    except ValueError:
        raise ValueError(f"{what} is not a number: {one_line(text.decode('latin-1'), 24)!r}") from None
    if value < 0 or value >> 63:
        raise ValueError(f"{what} out of range: {one_line(text.decode('latin-1'), 24)}")
    return value


# --------------------------------------------------------------------------------------------
# Twitter cache-trace: timestamp,anonymized key,key size,value size,client id,operation,TTL


TWITTER_OPS = {b"get": GET, b"gets": GET, b"set": SET, b"add": SET, b"replace": SET, b"cas": SET,
               b"append": SET, b"prepend": SET, b"delete": DELETE, b"incr": INCR, b"decr": INCR}


def parse_twitter(lines: list[bytes], first: int, problems: Problems, c: Columns) -> None:
    ops = TWITTER_OPS
    t_a, op_a, k_a, ks_a, vs_a, ttl_a, cl_a = c.t.append, c.op.append, c.keys.append, c.ks.append, \
        c.vs.append, c.ttl.append, c.client.append
    for i, line in enumerate(lines):
        try:
            # the key may hold commas: the timestamp is before the first, five fields after the last five
            head, ks, vs, client, op, ttl = line.rsplit(b",", 5)
            ts, key = head.split(b",", 1)
            code = ops[op]
            t = int(ts) * SECOND
            ks, vs, client, ttl = int(ks), int(vs), int(client), int(ttl)
            if (ks | vs | client | ttl) >> 32 or t >> 63:
                raise ValueError
        except (ValueError, KeyError):
            _twitter_problem(line, first + i, problems, c)
            continue
        t_a(t)
        op_a(code)
        k_a(key)
        ks_a(ks)
        vs_a(vs)
        ttl_a(ttl)
        cl_a(client)


def _twitter_problem(line: bytes, line_no: int, problems: Problems, c: Columns) -> None:
    if not line.strip():
        problems.skip(line_no, "blank line")
        return
    fields = line.rsplit(b",", 5)
    if len(fields) < 6 or b"," not in fields[0]:
        problems.bad(line_no, f"7 comma-separated fields expected, found {line.count(b',') + 1}")
        return
    head, ks, vs, client, op, ttl = fields
    ts, key = head.split(b",", 1)
    if op.lower() not in TWITTER_OPS:
        problems.bad(line_no, f"unknown operation {one_line(op.decode('latin-1'), 20)!r}")
        return
    try:
        t = _seconds_to_us(ts)
        values = [_int_field(v, name) for v, name in ((ks, "key size"), (vs, "value size"),
                                                      (client, "client id"), (ttl, "TTL"))]
    except ValueError as exc:
        problems.bad(line_no, str(exc))
        return
    # a fractional timestamp or an upper-case op: valid after all
    c.t.append(t)
    c.op.append(TWITTER_OPS[op.lower()])
    c.keys.append(key)
    c.ks.append(values[0])
    c.vs.append(values[1])
    c.client.append(values[2])
    c.ttl.append(values[3])


# --------------------------------------------------------------------------------------------
# CacheLib KV replay CSV (cachebench's KVReplayGenerator): a header names the columns.
# Required: key, op, size. Optional: op_time (seconds), key_size, op_count, ttl; others ignored.

# CacheBench writes them in capitals; a CSV of the same columns written by hand often has them in lower case
CACHELIB_OPS = {spelled: code for name, code in ((b"GET", GET), (b"GET_LEASE", GET), (b"SET", SET),
                                                 (b"SET_LEASE", SET), (b"DELETE", DELETE))
                for spelled in (name, name.lower())}
CACHELIB_REQUIRED = ("key", "op", "size")
CACHELIB_OPTIONAL = ("op_time", "key_size", "op_count", "ttl")
MAX_OP_COUNT = 0xFFFF  # cachebench keeps the repeat count in a uint16


def cachelib_header(line: bytes, path: str) -> dict[str, int]:
    names = [f.strip().decode("latin-1") for f in line.split(b",")]
    index = {name: i for i, name in enumerate(names) if name in CACHELIB_REQUIRED + CACHELIB_OPTIONAL}
    missing = [name for name in CACHELIB_REQUIRED if name not in index]
    if missing:
        raise UserError(f"{one_line(path)}:1: not a CacheLib KV trace header (needs key, op, size; "
                        f"missing {', '.join(missing)}): {one_line(line.decode('latin-1'), 80)!r}")
    return index


def make_cachelib_parser(index: dict[str, int]) -> LineParser:
    i_key, i_op, i_size = index["key"], index["op"], index["size"]
    i_time, i_ks, i_count, i_ttl = (index.get(n) for n in CACHELIB_OPTIONAL)
    width = max(index.values()) + 1

    def parse(lines: list[bytes], first: int, problems: Problems, c: Columns) -> None:
        if c.repeat is None:
            c.repeat = []
        for n, line in enumerate(lines):
            try:
                f = line.split(b",")
                if len(f) < width:
                    raise ValueError
                key = f[i_key]
                code = CACHELIB_OPS[f[i_op]]
                size = int(f[i_size])
                t = int(f[i_time]) * SECOND if i_time is not None else 0
                ks = int(f[i_ks]) if i_ks is not None else len(key)
                count = int(f[i_count]) if i_count is not None else 1
                ttl = int(f[i_ttl]) if i_ttl is not None and f[i_ttl] else 0
                if (size | ks | ttl) >> 32 or t >> 63 or not 0 < count <= MAX_OP_COUNT:
                    raise ValueError
            except (ValueError, KeyError):
                _cachelib_problem(line, first + n, problems, width, i_op, index)
                continue
            c.t.append(t)
            c.op.append(code)
            c.keys.append(key)
            c.ks.append(ks)
            c.vs.append(size)
            c.ttl.append(ttl)
            c.client.append(0)
            c.repeat.append(count)

    return parse


def _cachelib_problem(line: bytes, line_no: int, problems: Problems, width: int, i_op: int,
                      index: dict[str, int]) -> None:
    if not line.strip():
        problems.skip(line_no, "blank line")
        return
    f = line.split(b",")
    if len(f) < width:
        problems.bad(line_no, f"{width} comma-separated fields expected, found {len(f)}")
        return
    if f[i_op] not in CACHELIB_OPS:
        problems.bad(line_no, f"unknown op {one_line(f[i_op].decode('latin-1'), 20)!r}")
        return
    for name in ("size", "op_time", "key_size", "ttl"):
        if name in index:
            try:
                if name == "op_time":
                    _seconds_to_us(f[index[name]], name)
                elif name != "ttl" or f[index[name]]:
                    _int_field(f[index[name]], name)
            except ValueError as exc:
                problems.bad(line_no, str(exc))
                return
    problems.bad(line_no, "op_count must be 1 to 65535")


# --------------------------------------------------------------------------------------------
# Redis MONITOR: 1700000000.123456 [0 127.0.0.1:5000] "SET" "key" "value" "EX" "60"

_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("a"): b"\a", ord("b"): b"\b",
            ord('"'): b'"', ord("\\"): b"\\"}


def _redis_args(text: bytes) -> list[bytes]:
    """The quoted arguments of a MONITOR line, unescaped (Redis quotes them with sdscatrepr)."""
    if b"\\" not in text:  # no escapes: no quote can appear inside an argument
        if not text or text[0] != 34:
            raise ValueError("arguments are not quoted")
        if len(text) < 2 or text[-1] != 34:
            raise ValueError("unterminated quoted argument")
        return text[1:-1].split(b'" "')
    args: list[bytes] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] != 34:
            raise ValueError("arguments are not quoted")
        i += 1
        out = bytearray()
        while True:
            if i >= n:
                raise ValueError("unterminated quoted argument")
            ch = text[i]
            if ch == 34:
                i += 1
                break
            if ch == 92:
                if i + 1 >= n:
                    raise ValueError("unterminated escape")
                nxt = text[i + 1]
                if nxt == ord("x"):
                    try:
                        out.append(int(text[i + 2:i + 4], 16))
                    except ValueError:
                        raise ValueError("bad \\x escape") from None
                    i += 4
                    continue
                out += _ESCAPES.get(nxt, bytes([nxt]))
                i += 2
                continue
            out.append(ch)
            i += 1
        args.append(bytes(out))
        if i < n:
            if text[i] != 32:
                raise ValueError("arguments are not separated by spaces")
            i += 1
    return args


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def make_redis_parser() -> LineParser:
    clients: dict[bytes, int] = {}

    def parse(lines: list[bytes], first: int, problems: Problems, c: Columns) -> None:
        for n, line in enumerate(lines):
            line_no = first + n
            try:
                sp = line.find(b" [")
                close = line.find(b"] ", sp)
                if sp < 0 or close < 0:
                    raise ValueError("not a MONITOR line")
                t = _seconds_to_us(line[:sp])
                args = _redis_args(line[close + 2:])
            except ValueError as exc:
                if not line.strip():
                    problems.skip(line_no, "blank line")
                elif line.strip() == b"OK":  # redis-cli prints it when MONITOR starts
                    problems.skip(line_no, "redis-cli's OK")
                else:
                    problems.bad(line_no, str(exc))
                continue
            who = line[sp + 2:close]
            addr = who.split(b" ", 1)[-1]
            client = clients.get(addr)
            if client is None:
                client = clients[addr] = len(clients)
            try:
                _redis_command(args, t, client, c)
            except _Unsupported as exc:
                problems.skip(line_no, f"unsupported command {exc}")
            except (ValueError, IndexError) as exc:
                why = str(exc) if isinstance(exc, ValueError) else "wrong number of arguments"
                if why.startswith("invalid literal"):
                    why = "an argument that must be an integer is not"
                problems.bad(line_no, f"{one_line(args[0].decode('latin-1').upper(), 20)}: {why}")

    return parse


class _Unsupported(Exception):
    pass


def _add(c: Columns, t: int, op: int, key: bytes, value_size: int, ttl: int, client: int) -> None:
    c.t.append(t)
    c.op.append(op)
    c.keys.append(key)
    c.ks.append(len(key))
    c.vs.append(value_size)
    c.ttl.append(ttl)
    c.client.append(client)


def _positive(text: bytes, what: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"invalid {what} {value}")
    return value


def _redis_command(args: list[bytes], t: int, client: int, c: Columns) -> None:
    name = args[0].upper()
    if name in (b"GET", b"MGET", b"DEL", b"UNLINK", b"EXISTS"):
        op = {b"GET": GET, b"MGET": GET, b"DEL": DELETE, b"UNLINK": DELETE, b"EXISTS": EXISTS}[name]
        keys = args[1:] if name != b"GET" else args[1:2]
        if not keys or (name == b"GET" and len(args) != 2):
            raise ValueError("wrong number of arguments")
        for key in keys:
            _add(c, t, op, key, 0, 0, client)
    elif name in (b"SET", b"SETNX"):
        key, value = args[1], args[2]
        ttl = 0
        options = [a.upper() for a in args[3:]]
        i = 0
        while i < len(options):
            opt = options[i]
            if opt in (b"EX", b"PX", b"EXAT", b"PXAT"):
                amount = _positive(options[i + 1], "expire time")
                if opt == b"EX":
                    ttl = amount
                elif opt == b"PX":
                    ttl = _ceil_div(amount, 1000)
                elif opt == b"EXAT":
                    ttl = max(1, amount - t // SECOND)
                else:
                    ttl = max(1, _ceil_div(amount * 1000 - t, SECOND))
                i += 2
            elif opt in (b"NX", b"XX", b"GET", b"KEEPTTL"):
                i += 1
            else:
                raise ValueError(f"unknown SET option {one_line(opt.decode('latin-1'), 12)}")
        _add(c, t, SET, key, len(value), min(ttl, U32 - 1), client)
    elif name in (b"SETEX", b"PSETEX"):
        if len(args) != 4:
            raise ValueError("wrong number of arguments")
        amount = _positive(args[2], "expire time")
        ttl = amount if name == b"SETEX" else _ceil_div(amount, 1000)
        _add(c, t, SET, args[1], len(args[3]), min(ttl, U32 - 1), client)
    elif name == b"MSET":
        if len(args) < 3 or len(args) % 2 == 0:
            raise ValueError("wrong number of arguments")
        for i in range(1, len(args), 2):
            _add(c, t, SET, args[i], len(args[i + 1]), 0, client)
    elif name in (b"INCR", b"INCRBY", b"DECR", b"DECRBY"):
        if len(args) != (2 if name in (b"INCR", b"DECR") else 3):
            raise ValueError("wrong number of arguments")
        if len(args) == 3:
            int(args[2])
        _add(c, t, INCR, args[1], 0, 0, client)
    else:
        raise _Unsupported(one_line(name.decode("latin-1"), 24))


# --------------------------------------------------------------------------------------------
# cachemark's own format: "#cachemark-trace/1", then a header naming the columns, then rows.


def own_header(line: bytes, path: str) -> bool:
    """Whether the own format's header carries raw keys (a ``key`` column after the seven)."""
    names = tuple(line.decode("latin-1").strip().split(","))
    if names == COLUMNS:
        return False
    if names == (*COLUMNS, "key"):
        return True
    raise UserError(f"{one_line(path)}:2: a cachemark trace header must be {','.join(COLUMNS)}[,key]; "
                    f"found {one_line(line.decode('latin-1'), 80)!r}")


def make_own_parser(with_keys: bool) -> LineParser:
    width = 8 if with_keys else 7

    def parse(lines: list[bytes], first: int, problems: Problems, c: Columns) -> None:
        if c.hashes is None:
            c.hashes = []
        hashes = c.hashes
        for n, line in enumerate(lines):
            try:
                f = line.split(b",")
                if len(f) != width:
                    raise ValueError
                t = int(f[0])
                code = OP_CODE[f[1].decode()]
                key = unquote_to_bytes(f[7]) if with_keys else None
                h = int(f[2]) if f[2] or key is None else None
                if h is None:
                    h = int.from_bytes(key_hashes([key]).tobytes(), "little")
                ks, vs, ttl, client = int(f[3]), int(f[4]), int(f[5]), int(f[6])
                if (ks | vs | ttl | client) >> 32 or t >> 63 or h >> 64 or h < 0:
                    raise ValueError
            except (ValueError, KeyError, UnicodeDecodeError):
                if line.startswith(b"#") or not line.strip():
                    problems.skip(first + n, "comment" if line.startswith(b"#") else "blank line")
                else:
                    problems.bad(first + n, _own_reason(line, width))
                continue
            c.t.append(t)
            c.op.append(code)
            hashes.append(h)
            if key is not None:
                c.keys.append(key)
            c.ks.append(ks)
            c.vs.append(vs)
            c.ttl.append(ttl)
            c.client.append(client)

    return parse


def _own_reason(line: bytes, width: int) -> str:
    f = line.split(b",")
    if len(f) != width:
        return f"{width} comma-separated fields expected, found {len(f)}"
    if f[1].decode("latin-1") not in OP_CODE:
        return f"unknown op {one_line(f[1].decode('latin-1'), 20)!r}"
    for i, name in enumerate(COLUMNS):
        if name == "op":
            continue
        try:
            value = int(f[i])
        except ValueError:
            if name == "key_hash" and not f[i] and width == 8:
                continue
            return f"{name} is not an integer: {one_line(f[i].decode('latin-1'), 24)!r}"
        if value < 0 or value >> (63 if name == "t_us" else 64 if name == "key_hash" else 32):
            return f"{name} out of range: {value}"
    return "cannot parse the line"


# --------------------------------------------------------------------------------------------
# libCacheSim oracleGeneral: packed little-endian (u32 time, u64 obj_id, u32 size, i64 next vtime)


def oracle_records(raw: bytes) -> np.ndarray:
    rows = np.frombuffer(raw, dtype=ORACLE_DTYPE)
    out = np.zeros(len(rows), dtype=RECORD_DTYPE)
    out["t_us"] = rows["time"].astype(np.int64) * SECOND
    out["op"] = GET
    out["key_hash"] = rows["obj_id"]
    out["value_size"] = rows["size"]
    return out


def oracle_bytes(time: Any, obj_id: Any, size: Any, next_vtime: Any = None) -> bytes:
    """Packed oracleGeneral records (for tests and benchmarks: libCacheSim writes the real ones)."""
    n = len(obj_id)
    rows = np.zeros(n, dtype=ORACLE_DTYPE)
    rows["time"], rows["obj_id"], rows["size"] = time, obj_id, size
    rows["next_vtime"] = -1 if next_vtime is None else next_vtime
    return rows.tobytes()


# --------------------------------------------------------------------------------------------
# Detection

_MONITOR = re.compile(rb"^\d+(\.\d+)? \[\d+ [^\]]*\] \"")
_TWITTER_OP = re.compile(rb",(" + b"|".join(TWITTER_OPS) + rb"),-?\d+$", re.IGNORECASE)


def detect_format(path: str | Path, head: bytes) -> str | None:
    """The format of a file from its name and first decompressed bytes, or None when unsure."""
    name = Path(path).name.lower()
    if "oraclegeneral" in name:
        return "oracle"
    if head.startswith(MAGIC):
        return "cachemark"
    lines = [line.rstrip(b"\r") for line in head.split(b"\n")[:8]]
    if len(head) == 1 << 16 and len(lines) > 1:
        lines = lines[:-1]  # the last line of the sample may be cut short
    lines = [line for line in lines if line.strip()]
    if not lines:
        return None
    if b"\x00" in head[:4096] and not _MONITOR.match(lines[0]):
        return "oracle" if len(head) >= ORACLE_DTYPE.itemsize else None
    text = [line for line in lines if line.strip() != b"OK"]
    if text and _MONITOR.match(text[0]):
        return "redis-monitor"
    header = {f.strip() for f in lines[0].split(b",")}
    if {b"key", b"op", b"size"} <= header:
        return "cachelib"
    if _TWITTER_OP.search(lines[0]) and lines[0].count(b",") >= 6:
        return "twitter"
    return None


def suggested_by_name(path: str | Path) -> str | None:
    name = Path(path).name.lower().removesuffix(".zst").removesuffix(".zstd")
    if "oraclegeneral" in name:
        return "oracle"
    if name.endswith(".cmtrace") or name.endswith(".cachemark.csv"):
        return "cachemark"
    if name.endswith(".monitor") or name.endswith(".monitor.log"):
        return "redis-monitor"
    return None


__all__ = ["FORMATS", "OPS", "canonical", "detect_format", "oracle_bytes", "oracle_records"]
