"""The lab: local servers for ``spawn:<kind>`` targets (and for the tests).

``spawn_server("redis")`` starts a private server on a free loopback port and returns
the running :class:`~cachemark.lab.base.LocalServer`; use it as a context manager.
"""

from __future__ import annotations

import importlib

from ..errors import SpecError
from .base import LocalServer, free_port

_KINDS: dict[str, tuple[str, str]] = {
    "redis": ("cachemark.lab.redis", "RedisServer"),
    "memcached": ("cachemark.lab.memcached", "MemcachedServer"),
    "postgresql": ("cachemark.lab.postgres", "PostgresServer"),
    "postgres": ("cachemark.lab.postgres", "PostgresServer"),
    "mysql": ("cachemark.lab.mysql", "MysqlServer"),
    "mariadb": ("cachemark.lab.mysql", "MysqlServer"),
    "s3": ("cachemark.lab.s3", "S3Server"),
}


def kinds() -> list[str]:
    return sorted(_KINDS)


def server_class(kind: str) -> type[LocalServer]:
    try:
        module_name, class_name = _KINDS[kind]
    except KeyError:
        raise SpecError(f"cannot spawn {kind!r}; the lab knows: {', '.join(kinds())}") from None
    return getattr(importlib.import_module(module_name), class_name)


def spawn_server(kind: str, **options: object) -> LocalServer:
    """Start a server of ``kind`` and return it (already listening)."""
    return server_class(kind)(**options).start()


__all__ = ["LocalServer", "free_port", "kinds", "server_class", "spawn_server"]
