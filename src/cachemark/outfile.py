"""The one way out: every file cachemark writes (results, reports, exports, traces, thresholds).

A path naming a regular file, or nothing yet, is written beside it and renamed into place, so a
reader sees the old file or the new one, never half of one, and an error or an interrupt leaves
nothing behind. A path naming anything else — a directory, a device, a FIFO, a socket, a symlink —
is refused in one line before anything is written, and left as it was: renaming over it would put
a regular file in its place (``/dev/null`` turned into a file). ``-`` is standard output.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from .errors import UserError
from .textfile import one_line

STDOUT = "-"

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)


def is_stdout(path: str | Path) -> bool:
    return str(path) == STDOUT


def _cannot(path: str | Path, what: str) -> str:
    """The start of every line this module refuses with: ``cannot write results to r.json``."""
    return f"cannot write {what + ' to ' if what else ''}{one_line(path)}"


def check(path: str | Path, what: str = "") -> Path:
    """``path`` as a :class:`Path` if cachemark may write it; else one-line :class:`UserError`.
    Called before the work whose output it is, so a bad ``-o`` costs nothing."""
    path = Path(path)
    label = _cannot(path, what)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    except NotADirectoryError:
        raise UserError(f"{label}: a part of the path is not a directory") from None
    except ValueError:  # a NUL byte in the path
        raise UserError(f"{label}: not a valid file name") from None
    except OSError as exc:
        raise UserError(f"{label}: {exc.strerror or exc}") from None
    for test, kind in _KINDS:
        if test(mode):
            raise UserError(f"{label}: it is {kind}, which cachemark does not replace "
                            "(name a regular file, or - for standard output)")
    return path


class AtomicFile:
    """``with AtomicFile(path) as f: f.write(b"…")``: the bytes appear under ``path`` when the block
    ends without an exception, all at once; otherwise nothing is left. ``-`` writes to stdout.
    ``parents``: make missing directories (a results directory), else a missing one is an error."""

    def __init__(self, path: str | Path, what: str = "", parents: bool = True) -> None:
        self.what = what
        self.stdout = is_stdout(path)
        self.path = Path(path)
        self.file: BinaryIO
        self._tmp: str | None = None
        if self.stdout:
            sys.stdout.flush()  # what was printed as text comes first
            self.file = sys.stdout.buffer
            return
        check(self.path, what)
        try:
            if parents:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        except (OSError, ValueError) as exc:
            raise self._error(exc) from None
        self.file = os.fdopen(fd, "wb")

    def _error(self, exc: Exception) -> UserError:
        reason = "not a valid file name" if isinstance(exc, ValueError) else getattr(exc, "strerror", None) or exc
        return UserError(f"{_cannot(self.path, self.what)}: {reason}")

    def commit(self) -> Path:
        """Puts the bytes in place (flushed to disk first)."""
        if self.stdout:
            self.file.flush()
            return self.path
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            check(self.path, self.what)  # not turned into something else while we wrote
            os.replace(self._tmp, self.path)
            self._tmp = None
        except OSError as exc:
            raise self._error(exc) from None
        finally:
            self.discard()
        return self.path

    def discard(self) -> None:
        """Leaves nothing behind (the temp file closed and removed)."""
        if self.stdout:
            return
        with contextlib.suppress(OSError):
            self.file.close()
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            self._tmp = None

    def __enter__(self) -> BinaryIO:
        return self.file

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()


def _write_all(path: str | Path, chunks: Iterable[bytes], what: str) -> Path:
    out = AtomicFile(path, what)
    try:
        for chunk in chunks:
            out.file.write(chunk)
    except OSError as exc:
        out.discard()
        raise out._error(exc) from None
    except BaseException:
        out.discard()
        raise
    return out.commit()


def write_bytes(path: str | Path, data: bytes, what: str = "") -> Path:
    """``data`` to ``path`` all at once (or to stdout for ``-``)."""
    return _write_all(path, [data], what)


def write_text(path: str | Path, text: str, what: str = "") -> Path:
    """``text`` as UTF-8 to ``path`` all at once (or to stdout for ``-``)."""
    return _write_all(path, [text.encode("utf-8")], what)


def write_parts(path: str | Path, parts: Iterable[str], what: str = "") -> Path:
    """The texts ``parts`` yields, as UTF-8 to ``path``, still all at once for a reader (or to
    stdout for ``-``): each is written as it is made, so a large report never holds its whole
    text, nor an encoded copy of it, in memory."""
    return _write_all(path, (part.encode("utf-8") for part in parts), what)


def json_text(data: object) -> str:
    """How cachemark writes JSON: indented by one, a value JSON lacks (a Path, a date) as its text."""
    return json.dumps(data, indent=1, default=str) + "\n"


def write_json(path: str | Path, data: object, what: str = "") -> Path:
    """``data`` as JSON to ``path`` all at once (compare's and thresholds' documents; results go
    through :func:`cachemark.results.write_atomic`, which also checks them against their schema)."""
    return write_text(path, json_text(data), what)


def refuse_input(out: str | Path, inputs: list[str | Path] | tuple[str | Path, ...]) -> None:
    """One line (exit 2) when ``out`` names one of the command's own inputs: no command writes over
    what it reads (a trace, a results file), whatever path spells it."""
    if is_stdout(out):
        return
    target = Path(out)
    for item in inputs:
        source = Path(item)
        try:
            same = target.resolve() == source.resolve() or (target.exists() and source.exists()
                                                             and os.path.samefile(target, source))
        except OSError:
            same = False
        if same:
            raise UserError(f"{one_line(out)}: is one of this command's inputs; refusing to write over it "
                            "(choose another output path)")
