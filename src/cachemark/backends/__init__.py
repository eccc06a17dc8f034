"""Backends by target URL scheme (the rows of :mod:`cachemark.schemes`).

Adapters are imported lazily, so a missing optional client library only matters
to the user who asks for that backend, and the error says what to install.
"""

from __future__ import annotations

import importlib

from ..errors import BackendMissing, SpecError
from ..schemes import scheme, store_schemes
from ..target import Target
from .base import OPS, Backend, Capabilities


def schemes() -> list[str]:
    """The schemes of stores: ``spawn:`` is a request for a server, which has one of these."""
    return store_schemes()


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


def create_backend(target: Target, namespace: str) -> Backend:
    backend = backend_class(target)(target, namespace)
    mode = target.param("tags")
    if mode and not scheme(target.scheme).own_tags:  # twolevel applies tags to its slow level itself
        from .tags import with_tags

        backend = with_tags(backend, mode)
    return backend


__all__ = ["OPS", "Backend", "Capabilities", "backend_class", "create_backend", "schemes"]
