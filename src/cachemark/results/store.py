"""Saving and loading results files: atomic writes, and loads that end in one line or a valid document.

Writes go to a temp file in the same directory, are flushed to disk and renamed into
place, so a reader never sees a half-written file and a crash never truncates an
earlier result; when the write fails (a full disk), the temp file is removed and the
error is one line. Loads read bytes, decode UTF-8, parse JSON (``NaN``/``Infinity``,
which Python's encoder writes for a figure that could not be computed, read as null:
no figure), bound the nesting and check every field against :mod:`.schema`.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from .. import outfile
from ..errors import Crash, UserError
from ..textfile import check_tree, one_line, read_text
from .schema import SCHEMA, validate


def new_document(experiment: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": environment,
        "experiment": experiment,
        "runs": [],
    }


def default_path(directory: str | Path = "results") -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(directory) / f"cachemark-{stamp}.json"


def write_atomic(path: str | Path, document: dict[str, Any]) -> Path:
    """Write ``document`` as JSON to ``path`` all at once, or leave ``path`` as it was (``outfile``).

    Validated on write as on load, so a producer's slip shows where it is made, not when a report
    reads the file later. The file is written first either way: a slip must not lose a measurement."""
    text = outfile.json_text(document)
    written = outfile.write_text(path, text, "results")
    try:
        validate(json.loads(text, parse_constant=_no_figure), one_line(path))
    except UserError as exc:
        # a bug of ours, not the user's input: a crash (exit 70), the file kept for the report
        raise Crash(f"cachemark wrote results its own schema refuses: {exc}") from None
    return written


# Read whole, then parsed: memory is a few times the file (a 22 MB file of 3,664 runs: 136 MB in all).
# A sweep of 10,000 runs is ~60 MB; past this, a file is not one cachemark wrote.
MAX_RESULTS_BYTES = 100_000_000

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _no_figure(constant: str) -> None:
    return None


def load(path: str | Path) -> dict[str, Any]:
    """The results document at ``path``, checked against the schema; else one-line :class:`UserError`."""
    name = one_line(path)
    text = read_text(path, "results file", max_bytes=MAX_RESULTS_BYTES)
    try:
        document = json.loads(text, parse_constant=_no_figure)
    except json.JSONDecodeError as exc:
        raise UserError(f"{name}: not a results file (invalid JSON at line {exc.lineno}, column {exc.colno}: "
                        f"{exc.msg})") from None
    except RecursionError:
        raise UserError(f"{name}: not a results file (JSON nested too deeply to read)") from None
    except ValueError:  # an integer of thousands of digits
        raise UserError(f"{name}: not a results file (a number too long to read)") from None
    if not isinstance(document, dict):
        raise UserError(f"{name}: not a cachemark results file (expected a JSON object at the top level)")
    # Decoded UTF-8 holds no lone surrogate; only a "\\udXXX" escape can make one.
    check_tree(document, name, strings=_SURROGATE_ESCAPE.search(text) is not None)
    validate(document, name)
    from ..target import scrub

    return scrub(document)  # a file written before secrets were redacted everywhere
