"""The lab: local servers for ``spawn:<kind>`` targets (and for the tests).

``spawn_server("redis")`` starts a private server on a free loopback port and returns
the running :class:`~cachemark.lab.base.LocalServer`; use it as a context manager.
"""

from __future__ import annotations

import importlib

from ..schemes import lab_kind, lab_kinds
from .base import LocalServer, free_port


def kinds() -> list[str]:
    return lab_kinds()


def server_class(kind: str) -> type[LocalServer]:
    module_name, class_name = lab_kind(kind).server.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def spawn_server(kind: str, **options: object) -> LocalServer:
    """Start a server of ``kind`` and return it (already listening)."""
    return server_class(kind)(**options).start()


__all__ = ["LocalServer", "free_port", "kinds", "server_class", "spawn_server"]
