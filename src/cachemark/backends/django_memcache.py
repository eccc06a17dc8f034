"""python-memcached (PyPI ``python-memcached``, module ``memcache``) as a Django cache.

Reference 000 measured it beside pylibmc through Django's ``MemcachedCache``, which Django
removed in 4.1; this class stands in for it (``django://?BACKEND=python-memcached``), on
Django's own memcached base, with the one place where the library differs from what that base
expects of a client: its ``get`` takes no default.
"""

from __future__ import annotations

import pickle
from functools import cached_property
from typing import Any

from django.core.cache.backends.memcached import BaseMemcachedCache


class MemcachedCache(BaseMemcachedCache):
    """Django's memcached cache over python-memcached, as ``MemcachedCache`` was before Django 4.1."""

    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        import memcache

        super().__init__(server, params, library=memcache, value_not_found_exception=ValueError)

    @cached_property
    def _cache(self) -> Any:
        # the removed backend's default: pickle at the newest protocol, not the library's 0
        return self._class(self.client_servers, **{"pickleProtocol": pickle.HIGHEST_PROTOCOL, **self._options})

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        value = self._cache.get(self.make_and_validate_key(key, version=version))
        return default if value is None else value
