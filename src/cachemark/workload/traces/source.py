"""Opening a trace file: plain or zstd (by its magic bytes), read in fixed-size chunks.

Owns :func:`open_bytes` (a binary stream over the decompressed content, whatever the file's
name says), :func:`peek` (the first decompressed bytes, for format detection), and
:func:`iter_lines` (complete lines with their 1-based numbers, one chunk in memory at a time).
A file that is missing, a directory, unreadable or not valid zstd ends as one
:class:`~cachemark.errors.UserError` line naming it.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ...errors import UserError
from ...textfile import one_line, open_input

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
NL = b"\n"
MAX_LINE = 1 << 20  # no cache request line comes near a megabyte
CHUNK = 1 << 22  # 4 MiB of decompressed bytes per read: large enough to amortise, small enough to not matter


def _open_raw(path: str | Path) -> BinaryIO:
    return open_input(path, "trace file")  # a FIFO or a device is refused, not waited on


class _Guarded(io.RawIOBase):
    """A stream whose read errors (a corrupt zstd frame, an I/O error) become one UserError line."""

    def __init__(self, inner: BinaryIO, raw: BinaryIO, path: str, compressed: bool) -> None:
        self.inner, self.raw, self.path, self.compressed = inner, raw, path, compressed

    def read(self, size: int = -1) -> bytes:
        try:
            return self.inner.read(size)
        except OSError as exc:
            raise UserError(f"{one_line(self.path)}: cannot read: {exc.strerror or exc}") from None
        except Exception as exc:  # zstandard.ZstdError: the only other thing a read raises
            if "Unknown frame descriptor" in str(exc) or "Unsupported frame" in str(exc):
                exc = "not a valid zstd frame"
            what = "corrupt zstd data" if self.compressed else "read failed"
            raise UserError(f"{one_line(self.path)}: {what}: {one_line(exc, 100)}") from None

    def readable(self) -> bool:
        return True

    def position(self) -> int:
        """Bytes of the file consumed so far (compressed bytes for a zstd file): for progress."""
        try:
            return self.raw.tell()
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        try:
            if self.inner is not self.raw:
                self.inner.close()
        finally:
            self.raw.close()
            super().close()


def open_bytes(path: str | Path) -> _Guarded:
    """The decompressed content of ``path`` as a binary stream (zstd detected by magic bytes)."""
    raw = _open_raw(path)
    try:
        magic = raw.read(4)
        raw.seek(0)
    except OSError as exc:
        raw.close()
        raise UserError(f"{one_line(path)}: cannot read: {exc.strerror or exc}") from None
    if magic == ZSTD_MAGIC:
        return _Guarded(_Zstd(raw), raw, str(path), True)
    return _Guarded(raw, raw, str(path), False)


class _Zstd:
    """zstd frames, one after another (pzstd and large `zstd` outputs have several), decompressed
    as read. zstandard's own ``stream_reader`` ends quietly at a frame cut short — a truncated
    download would read as a shorter trace — so frames are followed here and a cut one is an error.

    One feed of compressed input inflates all at once, so its size follows the ratio seen so far:
    about a ``CHUNK`` of output per feed, from 1 KiB (up to 32 MiB out even for all-RLE blocks) to
    256 KiB. A 183 KB file that inflates to 2 GB was decoded in one call (4.4 GB asked for at once)."""

    IN = 1 << 18
    FIRST = 1 << 10

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self.raw = raw
        self.dctx = zstandard.ZstdDecompressor()
        self.obj = self.dctx.decompressobj()
        self.pieces: list[bytes] = []
        self.held = 0
        self.mid_frame = False
        self.done = False
        self.feed = self.FIRST

    def _fill(self) -> None:
        data = self.raw.read(self.feed)
        if not data:
            self.done = True
            if self.mid_frame:
                raise ValueError("the file ends inside a zstd frame (truncated?)")
            return
        fed, made = len(data), 0
        while data:
            out = self.obj.decompress(data)
            if out:
                self.pieces.append(out)
                self.held += len(out)
                made += len(out)
            self.mid_frame = True
            if not self.obj.eof:
                break
            data = self.obj.unused_data
            self.obj = self.dctx.decompressobj()
            self.mid_frame = False
        if made:
            self.feed = max(self.FIRST, min(self.IN, fed * CHUNK // made))

    def read(self, size: int = -1) -> bytes:
        """At least ``size`` bytes unless the data ends — possibly more (what one feed decompressed to):
        every caller here takes any amount, and not cutting saves a copy."""
        while not self.done and (size < 0 or self.held < size):
            self._fill()
        out = self.pieces[0] if len(self.pieces) == 1 else b"".join(self.pieces)
        self.pieces, self.held = [], 0
        return out

    def close(self) -> None:
        pass


def is_compressed(path: str | Path) -> bool:
    with _open_raw(path) as raw:
        return raw.read(4) == ZSTD_MAGIC


def peek(path: str | Path, size: int = 1 << 16) -> bytes:
    """Up to ``size`` bytes from the start of the decompressed content."""
    with open_bytes(path) as stream:
        out = bytearray()
        while len(out) < size:
            chunk = stream.read(size - len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out[:size])


def read_chunks(stream: BinaryIO, size: int = CHUNK) -> Iterator[bytes]:
    while True:
        chunk = stream.read(size)
        if not chunk:
            return
        yield chunk


def iter_line_blocks(stream: BinaryIO, size: int = CHUNK) -> Iterator[tuple[int, list[bytes]]]:
    """``(number of the first line, lines)`` for each chunk: complete lines without their ``\\n``
    (a ``\\r`` before it is dropped too); the last line of the file need not end in a newline."""
    rest = b""
    line_no = 1
    for chunk in read_chunks(stream, size):
        lines = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
        rest = lines.pop()
        if len(rest) > MAX_LINE:  # a binary file read as text: stop before memory grows with it
            raise UserError(f"{one_line(getattr(stream, 'path', 'trace'))}:{line_no + len(lines)}: "
                            f"a line longer than {MAX_LINE:,} bytes: not a text trace (try --format)")
        if lines:
            if b"\r" in chunk:
                lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
            yield line_no, lines
            line_no += len(lines)
    if rest:
        yield line_no, [rest[:-1] if rest.endswith(b"\r") else rest]


def iter_byte_blocks(stream: BinaryIO, size: int = CHUNK) -> Iterator[tuple[int, bytes]]:
    """``(number of the first line, block)`` for each chunk: a block is whole lines, each ending in
    ``\n`` (one is added after a last line that lacks it), for parsers that work on bytes."""
    rest = b""
    line_no = 1
    for chunk in read_chunks(stream, size):
        data = rest + chunk if rest else chunk
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        if len(rest) > MAX_LINE:
            at = line_no + data.count(NL, 0, cut)
            raise UserError(f"{one_line(getattr(stream, 'path', 'trace'))}:{at}: "
                            f"a line longer than {MAX_LINE:,} bytes: not a text trace (try --format)")
        if cut:
            block = data[:cut]
            yield line_no, block
            line_no += block.count(b"\n")
    if rest:
        yield line_no, rest + b"\n"
