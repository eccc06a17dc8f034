"""The one interface every cache backend implements (like YCSB's ``DB`` class).

Adapters are deliberately thin: the measured cost must be the client library's and
the server's, not cachemark's. Keys arrive fully formed (namespace prefix included,
as ``str``); values are ``bytes``. A backend is created from its target URL inside
each worker process, so it must not hold state that cannot be rebuilt from the URL.

What a backend does natively, emulates, or refuses is declared in
:class:`Capabilities`; the runner checks a workload against it before any run starts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import UserError
from ..target import Target

#: The operations a workload may ask for. ``clean`` is clean-by-tag. ``fetch`` is cache-aside:
#: get, and on a miss the workload's origin then set (the worker composes it; no method here).
OPS = ("get", "set", "delete", "exists", "get_many", "set_many", "incr", "clean", "fetch")
#: Not ops a workload asks for but parts of one, reported beside the ops (docs/contracts.md): the origin
#: calls of ``fetch`` and, with ``?pool=N``, their wait for a slot. Phase totals should leave them out.
PSEUDO_OPS = ("origin", "origin_wait")


class CleanupFailed(RuntimeError):
    """``clear_namespace`` could not finish; the one-line message says what may remain.

    The runner records it as the run's ``cleanup_error``: the results stand, the user
    learns what was left behind and where.
    """


def cleanup_failed(where: str, exc: BaseException, left: str) -> CleanupFailed:
    """``cleanup failed: <where>: <reason>; <left> may remain`` as one line."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return CleanupFailed(f"cleanup failed: {where}: {reason}; {left} may remain")


class ForeignData(UserError):
    """A target whose culling or settings would reach data the run did not write (exit 2)."""


@dataclass
class Capabilities:
    """What a backend supports: ``native`` ops, ``emulated`` ops (op -> how), and tags."""

    native: frozenset[str] = frozenset({"get", "set", "delete"})
    emulated: dict[str, str] = field(default_factory=dict)
    ttl: bool = True
    tags: str | None = None  # "native" | "versioned" | "scan" | None
    shared: bool = True  # False: each worker process has its own private cache (e.g. memory)

    def supports(self, op: str) -> bool:
        if op == "fetch":  # get + the origin + set, composed by the worker
            return self.supports("get") and self.supports("set")
        return op in self.native or op in self.emulated

    def to_json(self) -> dict[str, Any]:
        return {
            "native": sorted(self.native),
            "emulated": dict(sorted(self.emulated.items())),
            "ttl": self.ttl,
            "tags": self.tags,
            "shared": self.shared,
        }


class Backend(ABC):
    """A cache reached through one client library. Subclasses set ``scheme``."""

    scheme: ClassVar[str]

    def __init__(self, target: Target, namespace: str) -> None:
        self.target = target
        self.namespace = namespace

    # -- lifecycle -------------------------------------------------------------------
    def open(self) -> None:
        """Connect / open files. Raise BackendUnavailable with a one-line reason."""

    def close(self) -> None:
        """Release connections and handles. Must be safe to call twice."""

    def info(self) -> dict[str, Any]:
        """Client name and version, server version where known (goes into results)."""
        return {}

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        return Capabilities()

    # -- the operations -------------------------------------------------------------
    @abstractmethod
    def get(self, key: str) -> bytes | None: ...

    @abstractmethod
    def set(self, key: str, value: bytes, ttl: float | None = None) -> None: ...

    @abstractmethod
    def delete(self, key: str) -> bool: ...

    def exists(self, key: str) -> bool:
        return self.get(key) is not None

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        found = {}
        for key in keys:
            value = self.get(key)
            if value is not None:
                found[key] = value
        return found

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        for key, value in items.items():
            self.set(key, value, ttl)

    def incr(self, key: str, delta: int = 1) -> int:
        raise NotImplementedError(f"{self.scheme} does not support incr")

    def clean_tags(self, tags: list[str]) -> int:
        raise NotImplementedError(f"{self.scheme} does not support clean-by-tag")

    def set_tagged(self, key: str, value: bytes, tags: list[str], ttl: float | None = None) -> None:
        raise NotImplementedError(f"{self.scheme} does not support tagged writes")

    @abstractmethod
    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        """Remove every key under ``self.namespace`` and nothing else.

        ``written_keys`` lists the keys the run may have written, for backends that
        cannot enumerate their keys (memcached). Returns how many were removed, or -1
        when the backend cannot tell.
        """
