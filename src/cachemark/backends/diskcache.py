"""``diskcache:///path?shards=8&timeout=0.01&size_limit=…`` — the DiskCache library.

Owns :class:`DiskCacheBackend`: ``diskcache.Cache`` without ``shards``, ``FanoutCache``
with it (each shard is its own SQLite file, so writers contend less). Values are
stored raw (bytes) through the library's own calls; nothing here adds work per op
beyond turning a refused write into an exception.

DiskCache persists its settings (``size_limit``, ``eviction_policy``, …) inside the cache
and culls the whole cache to them, so the run's cache is always a DiskCache of its own:
``<path>/<namespace dir>``, created by the run and removed at cleanup. A user's cache in
``<path>`` is never opened, let alone culled or re-configured. ``diskcache://`` (no
path) puts that directory under a temp directory derived from the namespace, so all
workers of a run share it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import diskcache

from ..errors import BackendUnavailable, SpecError
from ..target import Target
from .base import Backend, Capabilities
from .file import PrivateDir, local_path, run_temp_dir


class WriteRejected(RuntimeError):
    """The cache answered a write with failure (e.g. FanoutCache's timeout returns False)."""


class DiskCacheBackend(Backend):
    scheme = "diskcache"

    def __init__(self, target: Target, namespace: str) -> None:
        super().__init__(target, namespace)
        path = local_path(target)
        self.private = PrivateDir(path or run_temp_dir("diskcache", namespace), namespace, temp_root=not path)
        self.directory = self.private.path
        self.shards = target.int_param("shards")
        if self.shards is not None and self.shards < 1:
            raise SpecError(f"{target.redacted}: shards must be at least 1")
        self.settings: dict[str, Any] = {}
        timeout = target.float_param("timeout")
        if timeout is not None:
            self.settings["timeout"] = timeout
        size_limit = target.int_param("size_limit")
        if size_limit is not None:
            self.settings["size_limit"] = size_limit
        policy = target.param("eviction_policy")
        if policy is not None:
            if policy not in diskcache.EVICTION_POLICY:
                allowed = ", ".join(diskcache.EVICTION_POLICY)
                raise SpecError(f"{target.redacted}: eviction_policy must be one of {allowed}")
            self.settings["eviction_policy"] = policy
        self.cache: diskcache.Cache | diskcache.FanoutCache | None = None

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        return Capabilities(
            native=frozenset({"get", "set", "delete", "exists", "incr"}),
            emulated={
                "get_many": "one get per key",
                "set_many": "one set per key (inside one transaction for a single Cache)",
            },
        )

    def info(self) -> dict[str, Any]:
        return {
            "client": "diskcache",
            "client_version": diskcache.__version__,
            "class": "FanoutCache" if self.shards is not None else "Cache",
            "shards": self.shards,
            "directory": self.directory,
            **{k: v for k, v in self.settings.items()},
        }

    def open(self) -> None:
        try:
            self.private.create()
            if self.shards is not None:
                self.cache = diskcache.FanoutCache(self.directory, shards=self.shards, **self.settings)
            else:
                self.cache = diskcache.Cache(self.directory, **self.settings)
        except Exception as exc:  # OSError, sqlite3 errors, diskcache.Timeout: all mean "cannot open"
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise BackendUnavailable(
                f"{self.target.redacted}: cannot open {self.directory}: {reason}"
            ) from None
        self._bind()

    def _bind(self) -> None:
        cache = self.cache
        assert cache is not None
        # Bound methods looked up once: the per-op path is a single library call.
        self._get = cache.get
        self._set = cache.set
        self._delete = cache.delete
        self._incr = cache.incr

    def close(self) -> None:
        cache, self.cache = self.cache, None
        if cache is not None:
            cache.close()

    def get(self, key: str) -> bytes | None:
        value = self._get(key)
        if value.__class__ is int:  # written by incr: diskcache stores counters as integers
            return str(value).encode()
        return value

    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        if not self._set(key, value, expire=ttl):
            raise WriteRejected(f"diskcache refused the write of {key!r} (timeout)")

    def delete(self, key: str) -> bool:
        return self._delete(key)

    def exists(self, key: str) -> bool:
        return key in self.cache  # type: ignore[operator]

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        cache = self.cache
        ctx = cache.transact() if isinstance(cache, diskcache.Cache) else contextlib.nullcontext()
        with ctx:
            for key, value in items.items():
                if not self._set(key, value, expire=ttl):
                    raise WriteRejected(f"diskcache refused the write of {key!r} (timeout)")

    def incr(self, key: str, delta: int = 1) -> int:
        number = self._incr(key, delta, default=0)
        if number is None:  # FanoutCache answers a shard timeout with None
            raise WriteRejected(f"diskcache refused the increment of {key!r} (timeout)")
        return number

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        # The whole cache is the run's own. Emptied through the library first, so this
        # handle keeps answering (misses) until close(); then its directory is unlinked.
        if self.cache is None:
            self.open()
        assert self.cache is not None
        removed = self.cache.clear(retry=True)
        self.private.remove(f"the run's DiskCache (namespace {self.namespace})")
        return removed
