"""``null://?hit=true&size=N`` — a backend that does nothing, to measure the harness itself.

Owns :class:`NullBackend`. The harness-overhead benchmark runs the full worker loop
against it, so every method is a single attribute load or constant: whatever time
remains is cachemark's own cost. ``hit=true`` makes reads return one constant value
of ``size`` bytes (default 100) instead of ``None``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..target import Target
from .base import Backend, Capabilities


class NullBackend(Backend):
    scheme = "null"

    def __init__(self, target: Target, namespace: str) -> None:
        super().__init__(target, namespace)
        size = target.int_param("size", 100) or 0
        self._value: bytes | None = b"x" * size if target.bool_param("hit") else None
        self._hit = self._value is not None

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        return Capabilities(
            native=frozenset({"get", "set", "delete", "exists", "get_many", "set_many", "incr", "clean"}),
            tags="native",
            shared=False,
        )

    def info(self) -> dict[str, Any]:
        return {"client": "cachemark.null", "hit": self._hit}

    def get(self, key: str) -> bytes | None:
        return self._value

    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        return None

    def delete(self, key: str) -> bool:
        return self._hit

    def exists(self, key: str) -> bool:
        return self._hit

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        if self._value is None:
            return {}
        return dict.fromkeys(keys, self._value)

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        return None

    def incr(self, key: str, delta: int = 1) -> int:
        return delta

    def set_tagged(self, key: str, value: bytes, tags: list[str], ttl: float | None = None) -> None:
        return None

    def clean_tags(self, tags: list[str]) -> int:
        return 0

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        return 0
