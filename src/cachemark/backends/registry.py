"""The adapter class of a target: its scheme row's ``module:Class``, imported only when asked for.

Apart from the package's ``create_backend`` so that wrappers (``tags.py``) can ask for the class
they wrap without importing the package that imports them.
"""

from __future__ import annotations

import importlib

from ..errors import BackendMissing, SpecError
from ..schemes import scheme
from ..target import Target
from .base import Backend


def backend_class(target: Target) -> type[Backend]:
    """The adapter class for a target (its row in :mod:`cachemark.schemes`)."""
    row = scheme(target.scheme, target.redacted)
    if row.spawner:  # provide() turns it into the started server's URL first
        raise SpecError(f"{target.redacted}: a spawn: target has no backend until the lab has started its server")
    module_name, class_name = row.adapter.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f" (pip install {row.package})" if row.package else ""
        raise BackendMissing(f"{target.scheme}: cannot import its client library: {exc}{hint}") from exc
    return getattr(module, class_name)
