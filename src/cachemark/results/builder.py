"""The one place a results document is made and changed: producers hand it what they measured.

An experiment (run/experiment.py) starts a document from the environment and the experiment as
run, adds each run's record as it ends (with its sweep point, its repeat and the name every report
shows), the network proxy's own overhead, and a sweep's saturation; it writes the document after
each change (:func:`.store.write_atomic`, validated on write). Nothing else assigns into a results
document, so its shape is decided here once (tests/test_results.py scans src/ for such assignments).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from .names import run_name
from .saturation import saturation_summary
from .schema import SCHEMA
from .store import as_model, write_atomic


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

    @property
    def document(self) -> dict[str, Any]:
        """The document as built so far: read it; change it only through the builder."""
        return self._document

    @property
    def has_runs(self) -> bool:
        return bool(self._document["runs"])

    def set_proxy_overhead(self, figures: dict[str, Any]) -> None:
        """What the network proxy itself adds (lab/proxy.py), measured once for the experiment's proxied runs."""
        self._document["environment"] = {**self._document["environment"], "proxy_overhead": figures}

    def add_run(self, run: dict[str, Any], sweep: dict[str, Any] | None, repeat: int | None) -> dict[str, Any]:
        """Add one run's record (``RunOutcome.to_json()``) at its sweep point (None: not a sweep) and
        repeat (None: the experiment runs each once), named as every report names it; the record as saved."""
        saved = {**run, "sweep": sweep or None, "repeat": repeat}
        saved["display"] = run_name(saved)
        self._document["runs"].append(saved)
        return saved

    def summarize_saturation(self) -> None:
        """A load sweep's saturation point per target, from the runs added so far (results/saturation.py)."""
        self._document["saturation"] = saturation_summary(as_model(self._document).runs)

    def write(self, path: str | Path) -> Path:
        """The document as built so far, written atomically to ``path``."""
        return write_atomic(path, self._document)
