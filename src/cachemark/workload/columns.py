"""Columns of fixed-width numbers in raw little-endian files, written and read a block at a time.

Owns the on-disk form of a replay's arrays (its time-sorted spool, each worker's share, the engine's
stream): one file per column, so a reader takes only the columns it needs and the engine's files are
exactly its arrays. A :class:`ColumnWriter` appends under ``.NAME.partial`` names and
:meth:`~ColumnWriter.publish` renames them into place, the last column last (its presence says the
set is whole), so a write cut short is never read as whole. A :class:`ColumnReader` reads blocks
(``np.fromfile`` at an offset) and binary-searches a sorted column with single-value reads, so memory
does not grow with the length (a memory map would not do for searches: the kernel maps up to a few MiB
around each page touched, and a search's probes touch pages all over the file); :meth:`~ColumnReader.mapped`
maps a whole column for callers that want it as one array.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

#: (column name, file name, dtype) per column; the last one is published last.
Layout = tuple[tuple[str, str, str], ...]
Block = dict[str, np.ndarray]
SEARCH_WINDOW = 4096  # rows a binary search reads at once when it has narrowed down to them


class ColumnWriter:
    """Appends blocks of equal-length columns; files are opened per append (a replay may write to
    hundreds of shares at once: no file descriptor is held between appends)."""

    def __init__(self, directory: str | Path, layout: Layout) -> None:
        self.directory = Path(directory)
        self.layout = layout
        self.length = 0
        self.directory.mkdir(parents=True, exist_ok=True)
        for _, file, _ in layout:
            self._partial(file).write_bytes(b"")

    def _partial(self, file: str) -> Path:
        return self.directory / f".{file}.partial"

    def append(self, block: Block) -> None:
        lengths = {len(block[name]) for name, _, _ in self.layout}
        if len(lengths) != 1:
            raise ValueError(f"columns of unequal length: {sorted(lengths)}")
        count = lengths.pop()
        if not count:
            return
        for name, file, dtype in self.layout:
            with open(self._partial(file), "ab") as out:
                np.asarray(block[name], dtype=dtype).tofile(out)
        self.length += count

    def publish(self) -> ColumnReader:
        for _, file, _ in self.layout:
            os.replace(self._partial(file), self.directory / file)
        return ColumnReader(self.directory, self.layout)

    def discard(self) -> None:
        for _, file, _ in self.layout:
            self._partial(file).unlink(missing_ok=True)


class ColumnReader:
    """A published set of columns: its length, blocks of rows, or one column mapped."""

    def __init__(self, directory: str | Path, layout: Layout) -> None:
        self.directory = Path(directory)
        self.layout = layout
        self._dtypes = {name: np.dtype(dtype) for name, _, dtype in layout}
        self._paths = {name: self.directory / file for name, file, _ in layout}
        lengths = {os.path.getsize(self._paths[name]) // self._dtypes[name].itemsize for name in self._paths}
        if len(lengths) != 1:
            raise ValueError(f"{self.directory}: columns of unequal length {sorted(lengths)}")
        self.length = lengths.pop()

    def __len__(self) -> int:
        return self.length

    def read(self, start: int, count: int, names: tuple[str, ...] | None = None) -> Block:
        """Rows ``[start, start + count)`` (fewer at the end) of the columns named (default: all)."""
        count = max(0, min(count, self.length - start))
        return {name: np.fromfile(self._paths[name], dtype=self._dtypes[name], count=count,
                                  offset=start * self._dtypes[name].itemsize)
                for name in (names or self._dtypes)}

    def blocks(self, size: int, names: tuple[str, ...] | None = None, start: int = 0) -> Iterator[Block]:
        """Consecutive blocks of ``size`` rows from ``start``: one open file per column, read sequentially."""
        names = names or tuple(self._dtypes)
        files = {name: open(self._paths[name], "rb") for name in names}  # noqa: SIM115 — closed below
        try:
            for name, file in files.items():
                file.seek(start * self._dtypes[name].itemsize)
            for at in range(start, self.length, size):
                count = min(size, self.length - at)
                yield {name: np.fromfile(files[name], dtype=self._dtypes[name], count=count) for name in names}
        finally:
            for file in files.values():
                file.close()

    def value(self, name: str, index: int) -> np.generic:
        return self.read(index, 1, (name,))[name][0]

    def searchsorted(self, name: str, value: int | np.integer, side: str = "left") -> int:
        """``np.searchsorted`` of a sorted column, from disk: single-value probes, then one small window."""
        dtype = self._dtypes[name]
        lo, hi = 0, self.length
        with open(self._paths[name], "rb") as file:
            while hi - lo > SEARCH_WINDOW:
                mid = (lo + hi) // 2
                probe = np.frombuffer(os.pread(file.fileno(), dtype.itemsize, mid * dtype.itemsize), dtype=dtype)[0]
                if probe < value or (side == "right" and probe == value):
                    lo = mid + 1
                else:
                    hi = mid
            window = np.fromfile(file, dtype=dtype, count=hi - lo, offset=lo * dtype.itemsize)
        return lo + int(np.searchsorted(window, value, side))

    def mapped(self, name: str) -> np.ndarray:
        """The whole column, memory-mapped read-only (pages count toward RSS only once touched)."""
        if not self.length:
            return np.zeros(0, dtype=self._dtypes[name])
        return np.memmap(self._paths[name], dtype=self._dtypes[name], mode="r", shape=(self.length,))

    def remove(self) -> None:
        for path in self._paths.values():
            path.unlink(missing_ok=True)
