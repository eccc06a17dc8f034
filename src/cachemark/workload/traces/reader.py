"""Streaming a trace file as batches of normalised records, in constant memory.

Owns :class:`TraceReader`: the format (given, or detected from the name and first bytes), the
decompression (zstd by magic bytes), the header lines some formats carry, and the batches —
one numpy array of :data:`~.record.RECORD_DTYPE` per chunk read (about 4 MiB of text, or
65,536 binary records), so memory does not grow with the file. ``problems`` holds what was
skipped once the batches have been consumed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ...errors import UserError
from ...textfile import one_line
from .fastcsv import has_native, native_parser, parse_cachelib_block, parse_own_block, parse_twitter_block
from .formats import (
    FORMATS,
    MAGIC,
    ORACLE_DTYPE,
    Columns,
    cachelib_header,
    canonical,
    detect_format,
    make_redis_parser,
    oracle_records,
    own_header,
    suggested_by_name,
)
from .record import Batch, Problems, Record
from .source import MAX_LINE, iter_byte_blocks, iter_line_blocks, open_bytes, peek, read_chunks

ORACLE_BATCH = 65_536


class TraceReader:
    """``TraceReader(path, format=None, strict=False, keep_keys=False)``; iterate :meth:`batches`
    (fast) or the reader itself (one :class:`~.record.Record` at a time)."""

    def __init__(self, path: str | Path, format: str | None = None, *, strict: bool = False,
                 keep_keys: bool = False) -> None:
        self.path = str(path)
        self.problems = Problems(self.path, strict)
        self.keep_keys = keep_keys
        if format:
            self.format = canonical(format)
            open_bytes(self.path).close()  # a missing or unreadable file is one line now, not at the first read
        else:
            self.format = self._detect()
        self.records = 0
        self._stream = None
        try:
            self.file_size = os.path.getsize(path)
        except OSError:
            self.file_size = 0

    def _detect(self) -> str:
        found = suggested_by_name(self.path) or detect_format(self.path, peek(self.path))
        if found is None:
            raise UserError(f"{one_line(self.path)}: cannot tell the trace format from its name or first bytes; "
                            f"give --format ({', '.join(FORMATS)})")
        return found

    def position(self) -> int:
        """Bytes of the file read so far (compressed bytes for zstd): for a progress bar."""
        return self._stream.position() if self._stream is not None else 0

    def __iter__(self) -> Iterator[Record]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[Batch]:
        with open_bytes(self.path) as stream:
            self._stream = stream
            produce = self._oracle if self.format == "oracle" else self._text
            for batch in produce(stream):
                if len(batch):
                    self.records += len(batch)
                    yield batch

    def _oracle(self, stream) -> Iterator[Batch]:
        size = ORACLE_DTYPE.itemsize
        rest = b""
        index = 0
        for chunk in read_chunks(stream, size * ORACLE_BATCH):
            data = rest + chunk if rest else chunk
            whole = len(data) - len(data) % size
            rest = data[whole:]
            for start in range(0, whole, size * ORACLE_BATCH):  # a zstd read may bring more than asked
                stop = min(start + size * ORACLE_BATCH, whole)
                index += (stop - start) // size
                yield Batch(oracle_records(data[start:stop]), None)
        if rest:
            self.problems.bad(index + 1, f"truncated record: {len(rest)} of {size} bytes at the end of the file")

    def _text(self, stream) -> Iterator[Batch]:
        if self.format == "twitter":
            native = native_parser("twitter", self.keep_keys)
            for first, block in self._blocks(stream, native is not None):
                yield self._parsed(native, block, first) if native else \
                    Batch(*parse_twitter_block(block, first, self.problems, self.keep_keys))
            return
        if self.format == "cachemark":
            yield from self._own(stream)
            return
        if self.format == "cachelib":
            yield from self._cachelib(stream)
            return
        parse = make_redis_parser()  # the one format left: MONITOR output, line by line
        for first, lines in iter_line_blocks(stream):
            columns = Columns()
            parse(lines, first, self.problems, columns)
            records, keys = columns.finish(self.keep_keys)
            yield Batch(records, keys)

    def _blocks(self, stream, native: bool) -> Iterator[tuple[int, bytes]]:
        """(number of the first line, block of whole lines). For a native parser (``fastcsv.native_parser``)
        a block may run past its last newline and its lines are not counted here: the parser ignores that
        tail and says how many lines it read (``_parsed`` moves ``_line`` on) — a copy and a count of each
        4 MiB block saved, a third of the reading time once parsing is native."""
        if not native:
            yield from iter_byte_blocks(stream)
            return
        self._line = 1
        rest = b""
        for chunk in read_chunks(stream):
            data = rest + chunk if rest else chunk
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if len(rest) > MAX_LINE:
                at = self._line + data.count(b"\n", 0, cut)
                raise UserError(f"{one_line(self.path)}:{at}: "
                                f"a line longer than {MAX_LINE:,} bytes: not a text trace (try --format)")
            if cut:
                yield self._line, data
        if rest:
            yield self._line, rest + b"\n"

    def _parsed(self, native, block: bytes, first: int) -> Batch:  # noqa: ANN001
        records, lines = native(block, first, self.problems)
        self._line = first + lines
        return Batch(records, None)

    def _own(self, stream) -> Iterator[Batch]:
        with_keys = native = None
        for first, block in self._blocks(stream, has_native("cachemark", self.keep_keys)):
            if with_keys is None:
                head = block.split(b"\n", 2)
                if not head[0].rstrip(b"\r").startswith(MAGIC):
                    raise UserError(f"{one_line(self.path)}:1: a cachemark trace starts with {MAGIC.decode()!r}")
                if len(head) < 3:
                    raise UserError(f"{one_line(self.path)}:2: the cachemark trace header line is missing")
                with_keys = own_header(head[1].rstrip(b"\r"), self.path)
                native = native_parser("cachemark", self.keep_keys, with_keys)
                block, first = head[2], first + 2
                self._line = first
                if not block:
                    continue
            yield self._parsed(native, block, first) if native else \
                Batch(*parse_own_block(block, first, self.problems, self.keep_keys, with_keys))

    def _cachelib(self, stream) -> Iterator[Batch]:
        index = native = None
        for first, block in self._blocks(stream, has_native("cachelib", self.keep_keys)):
            if index is None:
                header, _, block = block.partition(b"\n")
                header = header.rstrip(b"\r")
                index, width = cachelib_header(header, self.path), header.count(b",") + 1
                native = native_parser("cachelib", self.keep_keys, index, width)
                first += 1
                self._line = first
                if not block:
                    continue
            yield self._parsed(native, block, first) if native else \
                Batch(*parse_cachelib_block(block, first, self.problems, self.keep_keys, index, width))


def open_trace(path: str | Path, format: str | None = None, *, strict: bool = False,
               keep_keys: bool = False) -> TraceReader:
    """A reader for ``path``: ``format`` one of :data:`~.formats.FORMATS` (or an alias), else detected."""
    return TraceReader(path, format, strict=strict, keep_keys=keep_keys)
