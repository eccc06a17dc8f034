"""Vectorised parsers for the CSV formats (Twitter, CacheLib, cachemark's own): a block of lines per numpy pass.

Owns :func:`parse_twitter_block`, :func:`parse_cachelib_block` and :func:`parse_own_block`. The
per-line Python parsers (:mod:`.formats`) cost about a microsecond a line on an idle machine; here
the block's bytes are one ``uint8`` array, its newlines and commas are found once, and every field
of every line with the expected number of fields is decoded column-wise: integers digit position
by digit position, the operation as one 8-byte word looked up in a table, the key hashed in place
(:func:`.record.hash_spans`). A line this path cannot vouch for — a key with commas, a fractional
timestamp, an upper-case op, anything malformed — goes to the Python parser, which accepts it or
says why not; records keep the order of their lines either way.

When the native extension (``cachemark._engine``) has them, ``parse_*_csv`` do the same in one Rust
pass over the bytes (engine/sim/src/csv.rs), with exactly the same rules for which lines they handle;
the numpy code stays for ``keep_keys`` (the raw keys) and for a build without the extension.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

import numpy as np

from .formats import (
    CACHELIB_OPS,
    MAX_OP_COUNT,
    SECOND,
    TWITTER_OPS,
    Columns,
    make_cachelib_parser,
    make_own_parser,
    parse_twitter,
)
from .record import OPS, RECORD_DTYPE, Problems, hash_spans


def _native_parsers() -> dict:
    try:
        from ... import _engine
    except ImportError:  # not built: numpy does it all
        return {}
    names = ("parse_twitter_csv", "parse_own_csv", "parse_cachelib_csv")
    return {name: getattr(_engine, name) for name in names if hasattr(_engine, name)}


#: the Rust block parsers by name, when the extension has them (tests clear it to compare the paths)
NATIVE = _native_parsers()
_TWITTER_OP_LIST = list(TWITTER_OPS.items())
_OWN_OP_LIST = [(name.encode(), code) for code, name in enumerate(OPS)]
_CACHELIB_OP_LIST = list(CACHELIB_OPS.items())


def _own_columns() -> Columns:
    columns = Columns()
    columns.hashes = []  # the own format's slow path reads hashes, not keys
    return columns


_NATIVE_NAMES = {"twitter": "parse_twitter_csv", "cachemark": "parse_own_csv", "cachelib": "parse_cachelib_csv"}


def has_native(fmt: str, keep_keys: bool) -> bool:
    """Whether ``native_parser`` gives a parser for ``fmt`` (the extension has it, keys are not kept)."""
    return not keep_keys and _NATIVE_NAMES[fmt] in NATIVE


def native_parser(fmt: str, keep_keys: bool, *args):  # noqa: ANN002, ANN201 — a parse function or None
    """For the reader: ``parse(data, first, problems) -> (records, lines read)`` through the Rust parser
    of ``fmt`` (``"twitter"``; ``"cachemark"``, with_keys; ``"cachelib"``, index, width), the lines it
    leaves going through the line parser; or None when numpy must do it (no extension, or keys kept).
    The Rust parser ignores whatever follows the block's last newline, so the reader need not cut it off."""
    if not has_native(fmt, keep_keys):
        return None
    native = NATIVE[_NATIVE_NAMES[fmt]]
    if fmt == "twitter":
        extra, parse_line, new_columns = (_TWITTER_OP_LIST,), parse_twitter, Columns
    elif fmt == "cachemark":
        (with_keys,) = args
        extra, parse_line, new_columns = (_OWN_OP_LIST, with_keys), make_own_parser(with_keys), _own_columns
    else:
        index, width = args
        extra, parse_line, new_columns = (_CACHELIB_OP_LIST, index, width), make_cachelib_parser(index), Columns

    def parse(data: bytes, first: int, problems: Problems) -> tuple[np.ndarray, int]:
        records, rows, starts, ends = native(data, *extra)
        out = np.frombuffer(records, dtype=RECORD_DTYPE)
        if rows is None:  # every line gave one record
            return out, len(out)
        good, starts, ends = (np.frombuffer(b, dtype="<i8") for b in (rows, starts, ends))
        out, _ = _with_slow_lines(data, first, problems, False, starts, ends, good, out, None, parse_line,
                                  new_columns())
        return out, len(starts)

    return parse


_OP_WORDS = np.array(sorted(int.from_bytes(name, "little") for name in TWITTER_OPS), dtype=np.uint64)
_OP_CODES = np.array([TWITTER_OPS[int(w).to_bytes(8, "little").rstrip(b"\0")] for w in _OP_WORDS], dtype=np.uint8)
_MAX_DIGITS = {"ts": 12, "u32": 10}  # a timestamp of 12 digits in µs fits in i64; u32 has 10 digits


def _words(buf: np.ndarray) -> np.ndarray:
    """``words[i]`` = the 8 bytes at offset i as a little-endian u64 (``buf`` has 8 spare bytes)."""
    return np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - 7, 8), strides=(1, 1)).view("<u8")[:, 0]


def _uint(buf: np.ndarray, start: np.ndarray, end: np.ndarray, max_digits: int) -> tuple[np.ndarray, np.ndarray]:
    """Decimal integers in ``buf[start:end]``: (values, which were 1…max_digits plain digits)."""
    length = end - start
    ok = (length >= 1) & (length <= max_digits)
    value = np.zeros(len(start), dtype=np.int64)
    if not ok.any():
        return value, ok
    last = len(buf) - 1
    bad = np.zeros(len(start), dtype=bool)
    for j in range(int(length[ok].max())):
        active = j < length
        digit = buf[np.minimum(start + j, last)] - np.uint8(48)  # wraps: anything but '0'…'9' is > 9
        bad |= (digit > 9) & active
        value = np.where(active, value * 10 + digit, value)
    return value, ok & ~bad


def _lines(data: bytes, commas_wanted: int):  # noqa: ANN202 — a tuple of arrays, named below
    """Split a block: (buf, line starts, line ends without \r, the lines with exactly ``commas_wanted``
    commas, and their comma positions as a (lines × commas) matrix)."""
    buf = np.frombuffer(data + bytes(8), dtype=np.uint8)
    body = buf[: len(data)]
    nl = np.flatnonzero(body == 10)
    n = len(nl)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl[:-1] + 1
    ends = nl.copy()
    cr = (ends > starts) & (body[np.maximum(ends - 1, 0)] == 13)
    ends[cr] -= 1
    commas = np.flatnonzero(body == 44)
    # commas before each line's start and end: one search per line, not one per comma
    first_comma = np.searchsorted(commas, starts)
    per_line = np.searchsorted(commas, nl) - first_comma
    fast = np.flatnonzero(per_line == commas_wanted)
    c = commas[first_comma[fast][:, None] + np.arange(commas_wanted)]
    return buf, starts, ends, fast, c


def _op_lookup(buf: np.ndarray, start: np.ndarray, length: np.ndarray, words: np.ndarray,
               codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Op names of up to 8 bytes, looked up as one word each: (codes, which were known names)."""
    shift = (np.clip(length, 0, 7) * 8).astype(np.uint64)
    mask = np.where(length >= 8, np.uint64(0xFFFFFFFFFFFFFFFF), (np.uint64(1) << shift) - np.uint64(1))
    word = _words(buf)[start] & mask
    at = np.minimum(np.searchsorted(words, word), len(words) - 1)
    return codes[at], (words[at] == word) & (length >= 1) & (length <= 8)


def _u64(buf: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unsigned 64-bit decimals (up to 20 digits): the last ten digits and the rest, combined."""
    split = np.maximum(end - 10, start)
    high, ok_high = _uint(buf, start, split, 10)
    low, ok_low = _uint(buf, split, end, 10)
    ok_high |= split == start  # ten digits or fewer: no high part
    limit_high, limit_low = divmod(2**64 - 1, 10**10)
    ok = ok_high & ok_low & ((high < limit_high) | ((high == limit_high) & (low <= limit_low)))
    value = high.astype(np.uint64) * np.uint64(10**10) + low.astype(np.uint64)
    return value, ok


def _with_slow_lines(data: bytes, first: int, problems: Problems, keep_keys: bool, starts: np.ndarray,
                     ends: np.ndarray, good: np.ndarray, out: np.ndarray, keys: list[bytes] | None,
                     parse_line, columns: Columns):  # noqa: ANN001, ANN202
    """Add the lines the vectorised path left (everything not in ``good``) through the line parser,
    in line order."""
    n = len(starts)
    slow = np.ones(n, dtype=bool)
    slow[good] = False  # not len(good) == n: CacheLib's repeated lines make good longer than its lines
    if not slow.any():
        return out, keys
    origin = []
    for i in np.flatnonzero(slow).tolist():
        before = len(columns.op)
        parse_line([data[starts[i]:ends[i]]], first + i, problems, columns)
        origin += [i] * (len(columns.op) - before)
    extra, extra_keys = columns.finish(keep_keys)
    origin = np.array(origin, dtype=np.int64)
    if columns.repeat is not None:  # CacheLib's op_count: finish() repeated the records, so repeat their lines
        origin = np.repeat(origin, np.array(columns.repeat, dtype=np.int64))
    merged = np.concatenate([out, extra])
    order = np.argsort(np.concatenate([good, origin]), kind="stable")
    if keys is not None:
        both = keys + (extra_keys or [])
        keys = [both[i] for i in order.tolist()]
    return merged[order], keys


def parse_twitter_block(data: bytes, first: int, problems: Problems,
                        keep_keys: bool) -> tuple[np.ndarray, list[bytes] | None]:
    """The records of a block of whole lines (each ending in ``\n``), in line order."""
    native = native_parser("twitter", keep_keys)
    if native is not None:
        return native(data, first, problems)[0], None
    buf, starts, ends, fast, c = _lines(data, 6)
    ls, le = starts[fast], ends[fast]
    ts, ok = _uint(buf, ls, c[:, 0], _MAX_DIGITS["ts"])
    ks, ok_ks = _uint(buf, c[:, 1] + 1, c[:, 2], _MAX_DIGITS["u32"])
    vs, ok_vs = _uint(buf, c[:, 2] + 1, c[:, 3], _MAX_DIGITS["u32"])
    client, ok_cl = _uint(buf, c[:, 3] + 1, c[:, 4], _MAX_DIGITS["u32"])
    ttl, ok_ttl = _uint(buf, c[:, 5] + 1, le, _MAX_DIGITS["u32"])
    ok &= ok_ks & ok_vs & ok_cl & ok_ttl & (np.maximum.reduce([ks, vs, client, ttl]) < (1 << 32))
    op, ok_op = _op_lookup(buf, c[:, 4] + 1, c[:, 5] - c[:, 4] - 1, _OP_WORDS, _OP_CODES)
    ok &= ok_op & (c[:, 5] - c[:, 4] - 1 <= 7)  # every Twitter op is 3 to 7 letters

    good = fast[ok]
    out = np.empty(len(good), dtype=RECORD_DTYPE)
    out["t_us"] = ts[ok] * SECOND
    out["op"] = op[ok]
    key_start, key_len = c[ok, 0] + 1, c[ok, 1] - c[ok, 0] - 1
    out["key_hash"] = hash_spans(buf, key_start, key_len)
    out["key_size"], out["value_size"] = ks[ok], vs[ok]
    out["ttl_s"], out["client"] = ttl[ok], client[ok]
    keys = [data[s:s + k] for s, k in zip(key_start.tolist(), key_len.tolist())] if keep_keys else None
    # the rest — a key with commas, a fractional time, an upper-case op, anything malformed — line by line
    return _with_slow_lines(data, first, problems, keep_keys, starts, ends, good, out, keys, parse_twitter,
                            Columns())


_OWN_WORDS = np.array(sorted(int.from_bytes(name.encode(), "little") for name in OPS), dtype=np.uint64)
_OWN_CODES = np.array([OPS.index(int(w).to_bytes(8, "little").rstrip(b"\0").decode()) for w in _OWN_WORDS],
                      dtype=np.uint8)


def parse_own_block(data: bytes, first: int, problems: Problems, keep_keys: bool,
                    with_keys: bool) -> tuple[np.ndarray, list[bytes] | None]:
    """The records of a block of the own format's data lines (the two header lines already read)."""
    native = native_parser("cachemark", keep_keys, with_keys)
    if native is not None:
        return native(data, first, problems)[0], None
    buf, starts, ends, fast, c = _lines(data, 7 if with_keys else 6)
    ls, le = starts[fast], ends[fast]
    last = c[:, 6] if with_keys else le
    t, ok = _uint(buf, ls, c[:, 0], 18)
    op, ok_op = _op_lookup(buf, c[:, 0] + 1, c[:, 1] - c[:, 0] - 1, _OWN_WORDS, _OWN_CODES)
    h, ok_h = _u64(buf, c[:, 1] + 1, c[:, 2])  # an empty hash (to compute from the key) fails here: slow path
    ks, ok_ks = _uint(buf, c[:, 2] + 1, c[:, 3], 10)
    vs, ok_vs = _uint(buf, c[:, 3] + 1, c[:, 4], 10)
    ttl, ok_ttl = _uint(buf, c[:, 4] + 1, c[:, 5], 10)
    client, ok_cl = _uint(buf, c[:, 5] + 1, last, 10)
    ok &= ok_op & ok_h & ok_ks & ok_vs & ok_ttl & ok_cl & (np.maximum.reduce([ks, vs, ttl, client]) < (1 << 32))
    good = fast[ok]
    out = np.empty(len(good), dtype=RECORD_DTYPE)
    out["t_us"], out["op"], out["key_hash"] = t[ok], op[ok], h[ok]
    out["key_size"], out["value_size"], out["ttl_s"], out["client"] = ks[ok], vs[ok], ttl[ok], client[ok]
    keys = None
    if keep_keys and with_keys:
        keys = [unquote_to_bytes(data[s + 1:e]) for s, e in zip(c[ok, 6].tolist(), le[ok].tolist())]
    return _with_slow_lines(data, first, problems, keep_keys, starts, ends, good, out, keys,
                            make_own_parser(with_keys), _own_columns())


# (first 8 bytes as a word, length, op code, 9th byte): "GET_LEASE" is longer than a word
_CL_TABLE = sorted((int.from_bytes(name[:8], "little"), len(name), CACHELIB_OPS[name], name[8] if len(name) > 8 else 0)
                   for name in CACHELIB_OPS)
_CL_WORDS, _CL_LENGTHS, _CL_CODES, _CL_NINTH = (np.array(column, dtype=dtype) for column, dtype in
                                                zip(zip(*_CL_TABLE), (np.uint64, np.int64, np.uint8, np.uint8)))


def parse_cachelib_block(data: bytes, first: int, problems: Problems, keep_keys: bool, index: dict[str, int],
                         columns_in_header: int) -> tuple[np.ndarray, list[bytes] | None]:
    """The records of a block of CacheLib KV lines (header read), ``op_count`` repeats applied, in line order.
    Lines with exactly the header's number of fields take the vectorised path; others (cachebench also
    accepts extra trailing fields) go line by line."""
    native = native_parser("cachelib", keep_keys, index, columns_in_header)
    if native is not None:
        return native(data, first, problems)[0], None
    commas = columns_in_header - 1
    buf, starts, ends, fast, c = _lines(data, commas)
    ls, le = starts[fast], ends[fast]

    def span(name: str) -> tuple[np.ndarray, np.ndarray]:
        k = index[name]
        return (ls if k == 0 else c[:, k - 1] + 1), (le if k == commas else c[:, k])

    key_start, key_end = span("key")
    size, ok = _uint(buf, *span("size"), 10)
    op_start, op_end = span("op")
    op_len = op_end - op_start
    word = _words(buf)[op_start] & _mask(np.minimum(op_len, 8))  # GET_LEASE: its first 8 bytes and its length
    at = np.minimum(np.searchsorted(_CL_WORDS, word), len(_CL_WORDS) - 1)
    ninth = buf[np.minimum(op_start + 8, len(buf) - 1)]
    ok &= (_CL_WORDS[at] == word) & (_CL_LENGTHS[at] == op_len) & ((op_len < 9) | (ninth == _CL_NINTH[at]))
    op = _CL_CODES[at]
    t = np.zeros(len(fast), dtype=np.int64)
    if "op_time" in index:
        t, ok_t = _uint(buf, *span("op_time"), _MAX_DIGITS["ts"])
        ok &= ok_t
    key_len = key_end - key_start
    ks = key_len
    if "key_size" in index:
        ks, ok_ks = _uint(buf, *span("key_size"), 10)
        ok &= ok_ks
    count = np.ones(len(fast), dtype=np.int64)
    if "op_count" in index:
        count, ok_count = _uint(buf, *span("op_count"), 5)
        ok &= ok_count & (count >= 1) & (count <= MAX_OP_COUNT)
    ttl = np.zeros(len(fast), dtype=np.int64)
    if "ttl" in index:
        ttl_start, ttl_end = span("ttl")
        ttl, ok_ttl = _uint(buf, ttl_start, ttl_end, 10)
        ok &= ok_ttl | (ttl_end == ttl_start)  # an empty TTL is none
    ok &= np.maximum.reduce([size, ks, ttl]) < (1 << 32)

    good = fast[ok]
    out = np.zeros(len(good), dtype=RECORD_DTYPE)
    out["t_us"] = t[ok] * SECOND
    out["op"] = op[ok]
    out["key_hash"] = hash_spans(buf, key_start[ok], key_len[ok])
    out["key_size"], out["value_size"], out["ttl_s"] = ks[ok], size[ok], ttl[ok]
    keys = [data[s:e] for s, e in zip(key_start[ok].tolist(), key_end[ok].tolist())] if keep_keys else None
    repeats = count[ok]
    if (repeats != 1).any():
        out, good = np.repeat(out, repeats), np.repeat(good, repeats)
        if keys is not None:
            keys = [k for k, r in zip(keys, repeats.tolist()) for _ in range(r)]
    return _with_slow_lines(data, first, problems, keep_keys, starts, ends, good, out, keys,
                            make_cachelib_parser(index), Columns())


def _mask(length: np.ndarray) -> np.ndarray:
    shift = (np.clip(length, 0, 7) * 8).astype(np.uint64)
    return np.where(length >= 8, np.uint64(0xFFFFFFFFFFFFFFFF), (np.uint64(1) << shift) - np.uint64(1))
