"""The results file: a versioned JSON document, written atomically, validated on load.

Schema ``cachemark.results/1`` (documented in docs/results.md): the environment, the
exact experiment (so it can be re-run), and one entry per target run. :mod:`.schema`
holds the typed models every report relies on; :mod:`.store` writes (temp file +
rename) and loads (bytes → UTF-8 → JSON → schema, one line on any failure).
"""

from .schema import SCHEMA, validate
from .store import default_path, load, new_document, write_atomic

__all__ = ["SCHEMA", "default_path", "load", "new_document", "validate", "write_atomic"]
