"""Two-level caches, as Zend_Cache_Backend_TwoLevels runs them: ``twolevel://?fast=<url>&slow=<url>``.

This module owns :class:`TwoLevelBackend`. The fast level (e.g. memcached) holds no tags;
the slow level (e.g. Redis with tag sets, or the scanning file backend) holds the tags.

- write: the same envelope (lifetime, priority, data) goes to both levels; the fast copy
  gets Zend's shortened lifetime ``lifetime / (11 - priority)`` (30 days / (11 - priority)
  when the entry never expires); ``priority`` defaults to Zend's 8;
- read: the fast level, falling back to the slow one; a slow hit is copied back to fast;
- clean(tags): ask the slow level for the ids carrying the tags, clean the slow level, then
  delete those ids from the fast level (slow first, so a concurrent miss cannot refill fast
  from a slow entry that is about to go).

The slow level's tags come from its URL (``…?tags=native|scan``), defaulting to the mode its
scheme's row keeps natively: ``native`` for every single RESP server (redis://, valkey://, …),
``scan`` for file://. ``versioned`` cannot list a tag's entries, which
TwoLevels needs, so it is refused. Nested URLs must be percent-encoded inside the query
unless they have no query of their own. Not modelled: Zend's fast-level filling check
(which skips the fast write when the fast backend reports itself nearly full) and
``auto_refresh_fast_cache``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import SpecError
from ..schemes import scheme, spawned_as
from ..target import Target, parse_target
from .base import Backend, Capabilities, CleanupFailed

_HEADER = struct.Struct(">dB")  # lifetime in s (-1 = none), priority
_THIRTY_DAYS = 2592000.0


def _levels(target: Target) -> tuple[Target, Target, str]:
    fast_url, slow_url = target.param("fast"), target.param("slow")
    if not fast_url or not slow_url:
        raise SpecError(f"{target.redacted}: twolevel needs fast=<url> and slow=<url>")
    fast, slow = parse_target(fast_url), parse_target(slow_url)
    if fast.param("tags"):
        raise SpecError(f"{target.redacted}: the fast level holds no tags; drop tags= from fast")
    # by default the slow level keeps tags its own way (its row's ``tags``: Redis sets, the file scan)
    row = scheme(slow.scheme, slow.redacted)
    mode = slow.param("tags") or (spawned_as(slow.path) if row.spawner else row).tags
    if mode not in ("native", "scan"):
        raise SpecError(
            f"{target.redacted}: the slow level must list a tag's entries: use tags=native (redis) "
            f"or tags=scan (file), not {mode or 'no tags'}"
        )
    return fast, slow, mode


class TwoLevelBackend(Backend):
    scheme = "twolevel"

    def __init__(self, target: Target, namespace: str) -> None:
        from . import create_backend
        from .tags import with_tags

        super().__init__(target, namespace)
        fast_t, slow_t, self.slow_mode = _levels(target)
        self.priority = target.int_param("priority", 8)
        if self.priority is None or not 0 <= self.priority <= 10:
            raise SpecError(f"{target.redacted}: priority must be 0..10 (Zend's range)")
        self.fast = create_backend(fast_t, namespace)
        slow = create_backend(slow_t, namespace)
        self.slow = slow if slow_t.param("tags") else with_tags(slow, self.slow_mode)

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        fast_t, slow_t, mode = _levels(target)
        from . import backend_class

        shared = backend_class(fast_t).capabilities(fast_t).shared
        return Capabilities(
            native=frozenset({"get", "set", "delete", "exists", "get_many", "set_many", "clean"}),
            ttl=True,
            tags=mode,
            shared=shared,
        )

    def open(self) -> None:
        self.fast.open()
        self.slow.open()

    def close(self) -> None:
        self.fast.close()
        self.slow.close()

    def info(self) -> dict[str, Any]:
        return {"fast": self.fast.info(), "slow": self.slow.info(), "priority": self.priority,
                "tags": self.slow_mode}

    # -- Zend's envelope and fast lifetime ------------------------------------------------
    def _pack(self, value: bytes, ttl: float | None) -> bytes:
        return _HEADER.pack(-1.0 if ttl is None else ttl, self.priority) + value

    @staticmethod
    def _unpack(blob: bytes) -> tuple[bytes, float | None, int]:
        lifetime, priority = _HEADER.unpack_from(blob)
        return blob[_HEADER.size:], (None if lifetime < 0 else lifetime), priority

    @staticmethod
    def _fast_ttl(ttl: float | None, priority: int) -> float:
        return (_THIRTY_DAYS if ttl is None or ttl <= 0 else ttl) / (11 - priority)

    # -- operations ----------------------------------------------------------------------
    def set_tagged(self, key: str, value: bytes, tags: list[str], ttl: float | None = None) -> None:
        blob = self._pack(value, ttl)
        self.fast.set(key, blob, self._fast_ttl(ttl, self.priority))
        self.slow.set_tagged(key, blob, tags, ttl)

    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        self.set_tagged(key, value, [], ttl)

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        for key, value in items.items():
            self.set_tagged(key, value, [], ttl)

    def _refill(self, key: str, blob: bytes) -> bytes:
        value, lifetime, priority = self._unpack(blob)
        self.fast.set(key, blob, self._fast_ttl(lifetime, priority))
        return value

    def get(self, key: str) -> bytes | None:
        blob = self.fast.get(key)
        if blob is not None:
            return self._unpack(blob)[0]
        blob = self.slow.get(key)
        return None if blob is None else self._refill(key, blob)

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        found = {k: self._unpack(b)[0] for k, b in self.fast.get_many(keys).items()}
        missing = [k for k in keys if k not in found]
        if missing:
            for key, blob in self.slow.get_many(missing).items():
                found[key] = self._refill(key, blob)
        return found

    def exists(self, key: str) -> bool:
        return self.fast.exists(key) or self.slow.exists(key)

    def delete(self, key: str) -> bool:
        in_fast = self.fast.delete(key)
        return self.slow.delete(key) or in_fast

    def clean_tags(self, tags: list[str]) -> int:
        ids = self.slow.ids_matching_any(tags)  # type: ignore[attr-defined]
        removed = self.slow.clean_tags(tags)
        for key in ids:
            self.fast.delete(key)
        return removed

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        written = list(written_keys)
        failures = []
        for level in (self.fast, self.slow):  # a failing level must not keep the other one dirty
            try:
                level.clear_namespace(written)
            except Exception as exc:  # noqa: BLE001 - reported below, with what remains
                failures.append(str(exc) if isinstance(exc, CleanupFailed) else f"{type(exc).__name__}: {exc}")
        if failures:
            raise CleanupFailed("; ".join(failures))
        # The fast level holds copies of some entries, the slow one counts its tag metadata
        # with them: neither count is the number of entries, so say it is not known.
        return -1
