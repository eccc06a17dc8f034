"""Writing cachemark's own trace format, ``#cachemark-trace/1`` (spec in docs/traces.md).

Owns :class:`TraceWriter`: one request per line, ``t_us,op,key_hash,key_size,value_size,ttl_s,client``
and, only when asked (``raw_keys=True``), a percent-encoded ``key`` column. Keys are hashed by
default (:func:`~.record.key_hash`), so a trace captured from production carries no key names. A
name ending in ``.zst`` is written zstd-compressed; ``-`` is standard output. The file appears under
its name only when the writer is closed without an error (:class:`~cachemark.outfile.AtomicFile`),
so a capture that crashes never leaves half a trace that looks whole.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from urllib.parse import quote_from_bytes

import numpy as np

from ...outfile import AtomicFile
from ...textfile import one_line
from .formats import COLUMNS, MAGIC
from .record import OP_CODE, OPS, key_hashes

_SAFE = "/:;=@!$&'()*+-._~"  # kept as-is in the key column: everything else (',' '%' quotes, bytes) is %XX


class TraceWriter:
    """``with TraceWriter(path) as w: w.write(t_us, "get", b"key", value_size)``."""

    def __init__(self, path: str | Path, *, raw_keys: bool = False, compress: bool | None = None,
                 level: int = 3) -> None:
        self.path = Path(path)
        self.raw_keys = raw_keys
        compress = self.path.name.endswith((".zst", ".zstd")) if compress is None else compress
        self._atomic = AtomicFile(path, "the trace", parents=False)  # refuses a directory, device, FIFO, …
        self._file = self._atomic.file
        self._out = self._file
        if compress:
            import zstandard

            self._out = zstandard.ZstdCompressor(level=level).stream_writer(self._file, closefd=False)
        self._lines: list[bytes] = []
        self._pending: list[tuple] = []
        self._keys: list[bytes] = []
        self.count = 0
        header = ",".join(COLUMNS) + (",key" if raw_keys else "")
        self._out.write(MAGIC + b"\n" + header.encode() + b"\n")

    def write(self, t_us: int, op: str, key: bytes, value_size: int = 0, ttl_s: int = 0, client: int = 0,
              key_size: int | None = None) -> None:
        """One request; ``op`` one of cachemark's op names. Keys are hashed a batch at a time."""
        if op not in OP_CODE:
            raise ValueError(f"unknown op {op!r}")
        self._pending.append((int(t_us), op, len(key) if key_size is None else key_size, value_size, ttl_s, client))
        self._keys.append(key)
        if len(self._keys) >= 65_536:
            self._flush()

    def write_records(self, records: np.ndarray, keys: list[bytes] | None = None) -> None:
        """A batch as a reader yields it (keys required when the writer keeps raw keys)."""
        if self.raw_keys and keys is None:
            raise ValueError("this writer keeps raw keys: pass them")
        self._flush()
        rows = records.tolist()
        for i, (t, op, h, ks, vs, ttl, client) in enumerate(rows):
            line = f"{t},{OPS[op]},{h},{ks},{vs},{ttl},{client}"
            if self.raw_keys:
                line += "," + quote_from_bytes(keys[i], safe=_SAFE)
            self._lines.append(line.encode())
        self._flush()

    def write_lines(self, lines: bytes, count: int) -> None:
        """``count`` lines already in this format, each ending in ``\\n`` (what the capture recorder
        formats natively, hashing keys with the same :func:`~.record.key_hash`)."""
        self._flush()
        if count:
            self._out.write(lines)
            self.count += count

    def comment(self, text: str) -> None:
        """A ``# text`` line (readers skip it): e.g. a capture saying it is incomplete."""
        self._flush()
        self._out.write(b"# " + one_line(text).encode() + b"\n")

    def _flush(self) -> None:
        if self._keys:
            hashes = key_hashes(self._keys).tolist()
            for i, (t, op, ks, vs, ttl, client) in enumerate(self._pending):
                line = f"{t},{op},{hashes[i]},{ks},{vs},{ttl},{client}"
                if self.raw_keys:
                    line += "," + quote_from_bytes(self._keys[i], safe=_SAFE)
                self._lines.append(line.encode())
            self._pending, self._keys = [], []
        if self._lines:
            self._out.write(b"\n".join(self._lines) + b"\n")
            self.count += len(self._lines)
            self._lines = []

    def close(self, ok: bool = True) -> None:
        try:
            if ok:
                self._flush()
            if self._out is not self._file:
                self._out.close()
            if ok:
                self._atomic.commit()
        finally:
            self._atomic.discard()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(ok=kind is None)
