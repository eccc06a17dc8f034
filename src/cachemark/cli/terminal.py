"""The consoles every command prints through, with a width no environment can break.

``COLUMNS`` comes from the user's shell: ``abc``, ``-5``, ``0`` or twenty digits must
not end a command in a traceback, print nothing (rich draws nothing at width 0) or pad
lines to a gigabyte. A usable ``COLUMNS`` wins; otherwise a terminal's own width, and a
wide 160 columns for pipes and CI logs (rich's default of 80 wraps the tables there).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from rich.console import Console

MIN_WIDTH, MAX_WIDTH = 20, 10_000
PIPE_WIDTH = 160


def columns_from_env(value: str | None) -> int | None:
    """``COLUMNS`` as a width, or None when unset or unusable."""
    text = (value or "").strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 6:
        return None
    width = int(text)
    return width if MIN_WIDTH <= width <= MAX_WIDTH else None


def _terminal_width(stream: TextIO) -> int | None:
    try:
        if not stream.isatty():
            return None
        width = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return None
    return min(max(width, MIN_WIDTH), MAX_WIDTH) if width > 0 else None


def console_width(stream: TextIO) -> int:
    width = columns_from_env(os.environ.get("COLUMNS"))
    if width is None:
        width = _terminal_width(stream) or PIPE_WIDTH
    return width


def make_console(stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr) with a width from :func:`console_width`."""
    return Console(width=console_width(sys.stderr if stderr else sys.stdout), stderr=stderr)
