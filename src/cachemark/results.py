"""The results file: a versioned JSON document, written atomically.

Schema ``cachemark.results/1`` (documented in docs/results.md): the environment, the
exact experiment (so it can be re-run), and one entry per target run. Writes go to a
temp file in the same directory and are renamed into place, so a reader never sees a
half-written file and a crash never truncates an earlier result.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import UserError

SCHEMA = "cachemark.results/1"


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
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, indent=1, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise UserError(f"cannot write results to {path}: {exc.strerror or exc}") from None
    return path


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with path.open() as f:
            document = json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path}: no such results file") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not a results file (invalid JSON at line {exc.lineno})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    if not isinstance(document, dict) or not str(document.get("schema", "")).startswith("cachemark.results/"):
        raise UserError(f"{path}: not a cachemark results file (no cachemark.results schema)")
    return document
