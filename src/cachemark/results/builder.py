"""The one place a results document is made and changed: producers hand it what they measured.

An experiment (run/experiment.py) starts a document from the environment and the experiment as
run, adds each run's record as it ends (with its sweep point, its repeat and the name every report
shows), the network proxy's own overhead, and a sweep's saturation; it writes the document after
each change (validated on write: the typed document of the file is kept for the session's reports).
Nothing else assigns into a results document, so its shape is decided here once, as a phase's is in
:mod:`.phase_record` (tests/test_results.py scans src/ for such assignments).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from .names import run_name
from .saturation import saturation_summary
from .schema import SCHEMA, ResultsDocument
from .store import LoadedDocument, read_back, write_and_read


def new_document(experiment: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
    """An empty results document: no run yet, stamped now."""
    return {
        "schema": SCHEMA,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": environment,
        "experiment": experiment,
        "runs": [],
    }


class ResultsBuilder:
    """One experiment's results document, built a run at a time."""

    def __init__(self, experiment: dict[str, Any], environment: dict[str, Any]) -> None:
        self._document = new_document(experiment, environment)
        self._written: ResultsDocument | None = None  # the typed document of the last write, while unchanged

    @property
    def document(self) -> dict[str, Any]:
        """The document as built so far: read it; change it only through the builder."""
        return self._document

    @property
    def model(self) -> ResultsDocument:
        """The typed document as built so far, as its file holds it: the one the last write validated
        (read back now if it changed since)."""
        if self._written is None:
            self._written = read_back(self._document)
        return self._written

    def saved(self) -> LoadedDocument:
        """The document with its typed model kept, so the reports a session draws read it without
        validating it again (results.as_model)."""
        loaded = LoadedDocument(self._document)
        loaded.model = self.model
        return loaded

    @property
    def has_runs(self) -> bool:
        return bool(self._document["runs"])

    def set_proxy_overhead(self, figures: dict[str, Any]) -> None:
        """What the network proxy itself adds (lab/proxy.py), measured once for the experiment's proxied runs."""
        self._change("environment", {**self._document["environment"], "proxy_overhead": figures})

    def add_run(self, run: dict[str, Any], sweep: dict[str, Any] | None, repeat: int | None) -> dict[str, Any]:
        """Add one run's record (``RunOutcome.to_json()``) at its sweep point (None: not a sweep) and
        repeat (None: the experiment runs each once), named as every report names it; the record as saved."""
        saved = {**run, "sweep": sweep or None, "repeat": repeat}
        saved["display"] = run_name(saved)
        self._document["runs"].append(saved)
        self._written = None
        return saved

    def summarize_saturation(self) -> None:
        """A load sweep's saturation point per target, from the runs added so far (results/saturation.py)."""
        self._change("saturation", saturation_summary(self.model.runs))

    def write(self, path: str | Path) -> Path:
        """The document as built so far, written atomically to ``path``."""
        written, self._written = write_and_read(path, self._document)
        return written

    def _change(self, key: str, value: Any) -> None:
        self._document[key] = value
        self._written = None
