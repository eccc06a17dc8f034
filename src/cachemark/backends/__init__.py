"""Backends by target URL scheme (the rows of :mod:`cachemark.schemes`).

Adapters are imported lazily, so a missing optional client library only matters
to the user who asks for that backend, and the error says what to install.
"""

from __future__ import annotations

from ..schemes import scheme, store_schemes
from ..target import Target
from .base import OPS, Backend, Capabilities
from .registry import backend_class
from .tags import with_tags


def schemes() -> list[str]:
    """The schemes of stores: ``spawn:`` is a request for a server, which has one of these."""
    return store_schemes()


def create_backend(target: Target, namespace: str) -> Backend:
    backend = backend_class(target)(target, namespace)
    mode = target.param("tags")
    if mode and not scheme(target.scheme).own_tags:  # twolevel applies tags to its slow level itself
        backend = with_tags(backend, mode)
    return backend


__all__ = ["OPS", "Backend", "Capabilities", "backend_class", "create_backend", "schemes"]
