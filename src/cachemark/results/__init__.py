"""The results file: a versioned JSON document, written atomically, validated on load.

Schema ``cachemark.results/1`` (documented in docs/results.md): the environment, the
exact experiment (so it can be re-run), and one entry per target run. :mod:`.schema`
holds the typed models every report relies on; :mod:`.builder` is the one place a document
is made and changed (producers hand it what they measured); :mod:`.store` writes (temp file +
rename) and loads (bytes → UTF-8 → JSON → schema, one line on any failure). Reports read the
typed :class:`ResultsDocument`: :func:`read` gives it for a file, :func:`as_model` for a document
:func:`load` returned (its ``.model``, validated once) or one built in memory.
"""

from .builder import ResultsBuilder, new_document
from .schema import SCHEMA, OpResult, OpSummary, Phase, ResultsDocument, Run, validate
from .store import LoadedDocument, as_model, as_run, default_path, load, read, write_atomic

__all__ = ["SCHEMA", "LoadedDocument", "OpResult", "OpSummary", "Phase", "ResultsBuilder", "ResultsDocument", "Run",
           "as_model", "as_run", "default_path", "load", "new_document", "read", "validate", "write_atomic"]
