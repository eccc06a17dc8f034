"""``memory://?max_entries=N`` — the in-process baseline: a dict in each worker process.

Owns :class:`MemoryBackend`, an LRU built on :class:`collections.OrderedDict` with
optional per-key TTL. Nothing is shared between worker processes (``shared=False``),
so its numbers are the floor any out-of-process cache is compared against; every
method is kept to the handful of dict operations the semantics need.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from time import monotonic
from typing import Any

from ..target import Target
from .base import Backend, Capabilities


class MemoryBackend(Backend):
    scheme = "memory"

    def __init__(self, target: Target, namespace: str) -> None:
        super().__init__(target, namespace)
        self.max_entries = target.int_param("max_entries")
        if self.max_entries is not None and self.max_entries < 1:
            from ..errors import SpecError

            raise SpecError(f"{target.redacted}: max_entries must be at least 1")
        self._data: OrderedDict[str, bytes] = OrderedDict()
        # Expiry times live apart from the values so the common no-TTL path stores
        # and reads a bare value (no tuple to build or unpack per op).
        self._expires: dict[str, float] = {}

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        return Capabilities(
            native=frozenset({"get", "set", "delete", "exists", "get_many", "set_many", "incr"}),
            shared=False,
        )

    def info(self) -> dict[str, Any]:
        return {"client": "cachemark.memory", "max_entries": self.max_entries}

    def close(self) -> None:
        self._data.clear()
        self._expires.clear()

    def get(self, key: str) -> bytes | None:
        value = self._data.get(key)
        if value is None:
            return None
        if self._expires:
            expires = self._expires.get(key)
            if expires is not None and expires <= monotonic():
                del self._data[key]
                del self._expires[key]
                return None
        if self.max_entries is not None:
            self._data.move_to_end(key)  # only matters when something can be evicted
        return value

    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        data = self._data
        data[key] = value
        if ttl is not None:
            self._expires[key] = monotonic() + ttl
        elif self._expires:
            self._expires.pop(key, None)
        if self.max_entries is not None:
            data.move_to_end(key)
            while len(data) > self.max_entries:
                old, _ = data.popitem(last=False)
                self._expires.pop(old, None)

    def delete(self, key: str) -> bool:
        if self._data.pop(key, None) is None:
            return False
        self._expires.pop(key, None)
        return True

    def exists(self, key: str) -> bool:
        return self.get(key) is not None

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        get = self.get
        found = {}
        for key in keys:
            value = get(key)
            if value is not None:
                found[key] = value
        return found

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        set_ = self.set
        for key, value in items.items():
            set_(key, value, ttl)

    def incr(self, key: str, delta: int = 1) -> int:
        current = self.get(key)
        number = (int(current) if current is not None else 0) + delta
        # Keep the key's TTL, as Redis and memcached do for an increment.
        expires = self._expires.get(key) if self._expires else None
        self.set(key, str(number).encode())
        if expires is not None:
            self._expires[key] = expires
        return number

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        doomed = [key for key in self._data if key.startswith(self.namespace)]
        for key in doomed:
            del self._data[key]
            self._expires.pop(key, None)
        return len(doomed)
