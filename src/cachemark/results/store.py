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
from .schema import SCHEMA, ResultsDocument, Run, validate


class LoadedDocument(dict[str, Any]):
    """A results document as :func:`load` read it: the JSON as a dict (what callers have always
    indexed), carrying the :class:`ResultsDocument` validated from it as ``model`` — so a report
    handed it reads the model without validating it again (:func:`as_model`). Treat it as read-only:
    replacing a top-level key drops the model (the next :func:`as_model` validates afresh), but a
    change deeper in goes unseen."""

    model: ResultsDocument | None = None

    def __setitem__(self, key: str, value: Any) -> None:
        self.model = None
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.model = None
        super().__delitem__(key)


def as_model(document: dict[str, Any] | ResultsDocument, source: str = "results") -> ResultsDocument:
    """The typed document of ``document``: itself when typed, the model :func:`load` (or a builder's
    write) kept, or one validated now from a JSON dict (a test's; a command's own).
    A dict without ``schema`` is taken as the current one. One-line :class:`UserError` when it does not fit."""
    if isinstance(document, ResultsDocument):
        return document
    kept = getattr(document, "model", None)
    if kept is not None:
        return kept
    if "schema" not in document:
        document = {"schema": SCHEMA, **document}
    return validate(document, source)


def as_run(run: dict[str, Any] | Run, source: str = "results") -> Run:
    """The typed run of ``run``: itself when typed, else validated from one run's dict (a command that
    picked a run out of a loaded document's ``runs``). One-line :class:`UserError` when it does not fit."""
    if isinstance(run, Run):
        return run
    return as_model({"schema": SCHEMA, "runs": [run]}, source).runs[0]


def without_histograms(document: dict[str, Any] | ResultsDocument) -> dict[str, Any]:
    """The document's JSON without the (large) encoded histograms; ``document`` itself is left as it was.

    The file's own dict, keys in its order (the summary JSON of ``report -f json``), not the model's
    (a typed document alone is dumped: the fields it was given, the models' order first).
    Only the containers on the way to the ops are copied: everything else is shared, which
    is safe because the result is only serialised (a deep copy cost more than the JSON).
    """
    if isinstance(document, ResultsDocument):
        document = document.model_dump(mode="json", by_alias=True, exclude_unset=True)
    def slim_op(op: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in op.items() if k not in ("histograms", "histograms_uncorrected")}

    def slim_phase(phase: dict[str, Any]) -> dict[str, Any]:
        return {**phase, "ops": {name: slim_op(op) for name, op in phase["ops"].items()}} if "ops" in phase else phase

    def slim_run(run: dict[str, Any]) -> dict[str, Any]:
        return {**run, "phases": [slim_phase(p) for p in run["phases"]]} if "phases" in run else run

    return {**document, "runs": [slim_run(r) for r in document["runs"]]} if "runs" in document else dict(document)


def default_path(directory: str | Path = "results") -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(directory) / f"cachemark-{stamp}.json"


def write_atomic(path: str | Path, document: dict[str, Any]) -> Path:
    """Write ``document`` as JSON to ``path`` all at once, or leave ``path`` as it was (``outfile``)."""
    return write_and_read(path, document)[0]


def write_and_read(path: str | Path, document: dict[str, Any]) -> tuple[Path, ResultsDocument]:
    """Write ``document`` as :func:`write_atomic` does; with the typed document the file now holds.

    Validated on write as on load, so a producer's slip shows where it is made, not when a report
    reads the file later. The file is written first either way: a slip must not lose a measurement."""
    text = outfile.json_text(document)
    written = outfile.write_text(path, text, "results")
    try:
        model = validate(json.loads(text, parse_constant=_no_figure), one_line(path))
    except UserError as exc:
        # a bug of ours, not the user's input: a crash (exit 70), the file kept for the report
        raise Crash(f"cachemark wrote results its own schema refuses: {exc}") from None
    return written, model


def read_back(document: dict[str, Any]) -> ResultsDocument:
    """The typed document a file written from ``document`` would hold (a NaN is null there, a tuple a
    list): a document its producer holds, read before it is written."""
    return validate(json.loads(outfile.json_text(document), parse_constant=_no_figure), "results")


# Read whole, then parsed: memory is a few times the file (a 22 MB file of 3,664 runs: 136 MB in all).
# A sweep of 10,000 runs is ~60 MB; past this, a file is not one cachemark wrote.
MAX_RESULTS_BYTES = 100_000_000

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _no_figure(constant: str) -> None:
    return None


def read(path: str | Path) -> ResultsDocument:
    """The typed results document at ``path`` (what the reports read); else one-line :class:`UserError`.

    >>> document = read("tests/data/report-doc.json")
    >>> run = document.runs[0]
    >>> run.name, list(run.last_phase.ops), run.last_phase.ops["get"].summary.p99_us
    ('memory #1', ['get', 'set', 'delete'], 1.012)
    """
    model = load(path).model
    assert model is not None
    return model


def load(path: str | Path) -> LoadedDocument:
    """The results document at ``path``, checked against the schema, as its JSON dict with the typed
    document kept as ``.model`` (validated once); else one-line :class:`UserError`."""
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
    escapes = _SURROGATE_ESCAPE.search(text) is not None
    del text  # a large file is held once, as its dict, while the model is built
    check_tree(document, name, strings=escapes)
    model = validate(document, name)
    from ..target import scrub

    scrubbed = scrub(document)  # a file written before secrets were redacted everywhere
    if scrubbed is not document:  # rare (such a file): the model must hold the masked text too
        del document, model
        model = validate(scrubbed, name)
    loaded = LoadedDocument(scrubbed)
    loaded.model = model
    return loaded
