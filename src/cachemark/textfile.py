"""Reading the files users hand us (experiment TOML, results JSON, traces) without tracebacks.

Owns :func:`read_text` (bytes from disk, decoded as UTF-8 with a one-line error naming the
first bad byte and its offset), :func:`check_tree` (a parsed document's nesting depth, and
strings that cannot be printed or saved, such as a lone surrogate from a ``\\ud800`` JSON
escape) and :func:`one_line` (text from a file or a path, made safe for a one-line message).
A parser given a deeply nested document either recurses until Python stops it or builds a
structure every later walk must recurse through; bounding the depth once, here, keeps both
out of the reports.
"""

from __future__ import annotations

import os
import stat
import unicodedata
from pathlib import Path
from typing import Any, BinaryIO

from .errors import UserError

MAX_DEPTH = 64  # cachemark's own files nest 8 deep; anything near this is not one of ours
SHOWN = 160  # characters of a path or value inside a message


def one_line(text: object, limit: int | None = SHOWN) -> str:
    """``text`` with control and line-breaking characters escaped, cut to ``limit`` characters."""
    text = str(text)
    if not text.isprintable():
        text = "".join(c if c.isprintable() or unicodedata.category(c) == "Zs" else _escape(c) for c in text)
    if limit is not None and len(text) > limit:
        keep = limit - 1
        text = text[: keep - keep // 4] + "…" + text[len(text) - keep // 4:]
    return text


def _escape(char: str) -> str:
    return char.encode("unicode_escape", errors="backslashreplace").decode("ascii")


_NOT_REGULAR = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def open_input(path: str | Path, what: str, error: type[UserError] = UserError) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (a symlink to one is); anything else, or any
    problem opening it, is ``error`` with one line. A FIFO is opened without waiting for a writer and
    refused, as is a device: either could block a read forever or never end."""
    name = one_line(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{name}: no such {what}") from None
    except IsADirectoryError:
        raise error(f"{name}: is a directory, not a {what}") from None
    except OSError as exc:
        raise error(f"{name}: cannot read: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the path: no file can have that name
        raise error(f"{name}: not a valid file name (it holds a NUL byte)") from None
    mode = os.fstat(fd).st_mode
    for test, kind in _NOT_REGULAR:
        if test(mode):
            os.close(fd)
            raise error(f"{name}: is {kind}; the {what} must be a regular file (a FIFO or a device could "
                        "block the read or never end)")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_text(path: str | Path, what: str, error: type[UserError] = UserError,
              max_bytes: int | None = None) -> str:
    """The file's text; any problem reading it is ``error`` with one line naming ``path``.

    ``what`` names the kind of file for "no such …" ("results file", "experiment file").
    A UTF-8 byte-order mark is dropped (editors on Windows write one).
    """
    name = one_line(path)
    try:
        with open_input(path, what, error) as f:
            if max_bytes is not None and os.fstat(f.fileno()).st_size > max_bytes:
                raise error(f"{name}: larger than {max_bytes:,} bytes: too large for a {what}")
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"{name}: cannot read: {exc.strerror or exc}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise error(f"{name}: larger than {max_bytes:,} bytes: too large for a {what}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{name}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start:,})") from None
    return text.removeprefix("\ufeff")


def check_tree(document: Any, source: str, error: type[UserError] = UserError,
               max_depth: int = MAX_DEPTH, strings: bool = True) -> None:
    """Refuse nesting deeper than ``max_depth`` and (``strings``) text that is not valid Unicode.

    Iterative, so the check itself cannot hit Python's recursion limit. A first pass only
    looks (a results file has tens of thousands of values); when it finds something, a
    second one names where, e.g. ``runs[0].phases[1].name``.
    """
    if _acceptable(document, max_depth, strings):
        return
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(document, ())]
    while stack:
        node, where = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        if len(where) >= max_depth:
            raise error(f"{source}: {location(where)}: nested deeper than {max_depth} levels")
        for key, value in items:
            if strings and isinstance(key, str) and not _valid_text(key):
                raise error(f"{source}: {location(where)}: a key holds an invalid character "
                            f"({_first_invalid(key)})")
            if isinstance(value, str):
                if strings and not _valid_text(value):
                    raise error(f"{source}: {location((*where, key))}: text holds an invalid character "
                                f"({_first_invalid(value)})")
            elif isinstance(value, dict | list):
                stack.append((value, (*where, key)))


def _acceptable(document: Any, max_depth: int, strings: bool) -> bool:
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        node, depth = stack.pop()
        if type(node) is dict:
            if strings and not all(map(_valid_text, node)):
                return False
            values: Any = node.values()
        else:
            values = node
        for value in values:
            kind = type(value)
            if kind is dict or kind is list:
                if depth + 1 >= max_depth:
                    return False
                stack.append((value, depth + 1))
            elif kind is str and strings and not value.isascii() and not _valid_text(value):
                return False
    return True


def _valid_text(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _first_invalid(text: str) -> str:
    for char in text:
        if 0xD800 <= ord(char) <= 0xDFFF:
            return f"lone surrogate {_escape(char)}: not UTF-8 text"
    return "not Unicode"


def location(where: tuple[str | int, ...] | list[str | int]) -> str:
    """``("runs", 0, "phases", 1, "ops", "get")`` → ``runs[0].phases[1].ops.get``."""
    out = ""
    for part in where:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier() and part.isascii():
            out += f".{part}" if out else part
        else:
            out += f"[{one_line(repr(part), 60)}]"
    return out or "the top level"
