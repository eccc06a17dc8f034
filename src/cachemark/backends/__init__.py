"""The registry: target URL scheme -> backend adapter class.

Adapters are imported lazily, so a missing optional client library only matters
to the user who asks for that backend, and the error says what to install.
"""

from __future__ import annotations

import importlib

from ..errors import BackendMissing, SpecError
from ..target import Target
from .base import OPS, Backend, Capabilities

# scheme -> (module, class name, pip extra to suggest when the import fails)
_REGISTRY: dict[str, tuple[str, str, str]] = {
    "memory": ("cachemark.backends.memory", "MemoryBackend", ""),
    "null": ("cachemark.backends.null", "NullBackend", ""),
    "file": ("cachemark.backends.file", "FileBackend", ""),
    "diskcache": ("cachemark.backends.diskcache", "DiskCacheBackend", "diskcache"),
    "sqlite": ("cachemark.backends.sqlite", "SqliteBackend", ""),
    "redis": ("cachemark.backends.redis", "RedisBackend", "redis"),
    "rediss": ("cachemark.backends.redis", "RedisBackend", "redis"),
    "memcached": ("cachemark.backends.memcached", "MemcachedBackend", "pymemcache"),
    "postgresql": ("cachemark.backends.sql", "PostgresBackend", "psycopg[binary]"),
    "postgres": ("cachemark.backends.sql", "PostgresBackend", "psycopg[binary]"),
    "mysql": ("cachemark.backends.sql", "MysqlBackend", "pymysql"),
    "mariadb": ("cachemark.backends.sql", "MysqlBackend", "pymysql"),
    "s3": ("cachemark.backends.s3", "S3Backend", "boto3"),
    "django": ("cachemark.backends.django", "DjangoBackend", "django"),
    "twolevel": ("cachemark.backends.twolevel", "TwoLevelBackend", ""),
}


def schemes() -> list[str]:
    return sorted(_REGISTRY)


def backend_class(target: Target) -> type[Backend]:
    """The adapter class for a target, or a one-line error naming the known schemes."""
    try:
        module_name, class_name, extra = _REGISTRY[target.scheme]
    except KeyError:
        raise SpecError(
            f"unknown backend scheme {target.scheme!r} in {target.redacted!r}; known: {', '.join(schemes())}"
        ) from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f" (pip install {extra})" if extra else ""
        raise BackendMissing(f"{target.scheme}: cannot import its client library: {exc}{hint}") from exc
    return getattr(module, class_name)


def create_backend(target: Target, namespace: str) -> Backend:
    backend = backend_class(target)(target, namespace)
    mode = target.param("tags")
    if mode and target.scheme != "twolevel":  # twolevel applies tags to its slow level itself
        from .tags import with_tags

        backend = with_tags(backend, mode)
    return backend


__all__ = ["OPS", "Backend", "Capabilities", "backend_class", "create_backend", "schemes"]
