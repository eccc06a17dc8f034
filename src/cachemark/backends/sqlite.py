"""``sqlite:///path.db?max_entries=…&cull_frequency=3&timeout=5&synchronous=normal`` — a SQLite table.

Owns :class:`SqliteBackend`: one table it creates, ``cachemark_cache(key TEXT PRIMARY KEY,
value BLOB, expires REAL)``, with a busy timeout so worker processes can share the file.
With ``max_entries`` every write first counts the run's rows and, when full, culls the
way Django's database cache does (delete expired rows, then the first 1/``cull_frequency``
of keys in key order; ``cull_frequency=0`` empties) — deliberately, so that cost shows in
the numbers — but only ever within the run's namespace (a key range, so the primary-key
index serves it): rows of another application or of a concurrent run in the same table
are neither counted nor culled. Cleanup deletes the namespace's key range only and never
drops a table. A new database (or one holding only this table) is switched to WAL; a
database with other tables keeps its journal mode, a persistent setting that is its
owner's to choose (``info()`` records the mode the run had).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import BackendUnavailable, SpecError
from ..target import Target
from .base import Backend, Capabilities, CleanupFailed
from .file import local_path

TABLE = "cachemark_cache"
_LIVE = "(expires IS NULL OR expires > ?)"
_SYNC = ("off", "normal", "full", "extra")
# Stay below SQLITE_MAX_VARIABLE_NUMBER of old builds (999) for get_many's IN list.
_IN_CHUNK = 900


def next_prefix(prefix: str) -> str:
    """The smallest string greater than every string starting with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class SqliteBackend(Backend):
    scheme = "sqlite"

    def __init__(self, target: Target, namespace: str) -> None:
        super().__init__(target, namespace)
        self.path = local_path(target)
        if not self.path:
            raise SpecError(f"{target.redacted}: sqlite needs a file path, e.g. sqlite:///tmp/cache.db")
        self.max_entries = target.int_param("max_entries")
        self.cull_frequency = target.int_param("cull_frequency", 3)
        if self.max_entries is not None and self.max_entries < 1:
            raise SpecError(f"{target.redacted}: max_entries must be at least 1")
        if self.cull_frequency is None or self.cull_frequency < 0:
            raise SpecError(f"{target.redacted}: cull_frequency must be 0 or more")
        self.timeout = target.float_param("timeout", 5.0)
        self.synchronous = (target.param("synchronous") or "normal").lower()
        if self.synchronous not in _SYNC:
            raise SpecError(f"{target.redacted}: synchronous must be one of {', '.join(_SYNC)}")
        self.conn: sqlite3.Connection | None = None
        self.journal_mode = ""
        self._lo, self._hi = namespace, next_prefix(namespace)

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        return Capabilities(
            native=frozenset({"get", "set", "delete", "exists", "get_many", "set_many", "incr"}),
        )

    def info(self) -> dict[str, Any]:
        return {
            "client": "sqlite3",
            "client_version": sqlite3.sqlite_version,
            "max_entries": self.max_entries,
            "cull_frequency": self.cull_frequency,
            "synchronous": self.synchronous,
            "journal_mode": self.journal_mode,
        }

    def open(self) -> None:
        if self.conn is not None:
            return
        try:
            directory = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(directory):
                raise BackendUnavailable(f"{self.target.redacted}: directory {directory} does not exist")
            # isolation_level=None: autocommit, so a plain write is one statement and
            # one commit; multi-statement writes say BEGIN themselves.
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            self.journal_mode = self._journal_mode(conn)
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY, value BLOB, expires REAL)"
            )
        except sqlite3.Error as exc:
            reason = " ".join(str(exc).split())
            raise BackendUnavailable(f"{self.target.redacted}: cannot open {self.path}: {reason}") from None
        self.conn = conn

    @staticmethod
    def _journal_mode(conn: sqlite3.Connection) -> str:
        """WAL unless the database holds someone else's tables (then their mode stays)."""
        (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
        if mode.lower() == "wal":
            return "wal"
        others = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name != ? AND name NOT LIKE 'sqlite_%' LIMIT 1", (TABLE,)
        ).fetchone()
        if others is not None:
            return str(mode).lower()
        (mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
        return str(mode).lower()

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

    # -- reads ----------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        row = self.conn.execute(  # type: ignore[union-attr]
            f"SELECT value FROM {TABLE} WHERE key = ? AND {_LIVE}", (key, time.time())
        ).fetchone()
        return row[0] if row is not None else None

    def exists(self, key: str) -> bool:
        row = self.conn.execute(  # type: ignore[union-attr]
            f"SELECT 1 FROM {TABLE} WHERE key = ? AND {_LIVE}", (key, time.time())
        ).fetchone()
        return row is not None

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        now = time.time()
        for start in range(0, len(keys), _IN_CHUNK):
            chunk = keys[start : start + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            found.update(
                self.conn.execute(  # type: ignore[union-attr]
                    f"SELECT key, value FROM {TABLE} WHERE key IN ({marks}) AND {_LIVE}", (*chunk, now)
                )
            )
        return found

    # -- writes ---------------------------------------------------------------------
    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        expires = time.time() + ttl if ttl is not None else None
        conn = self.conn
        if self.max_entries is None:
            conn.execute(  # type: ignore[union-attr]
                f"INSERT OR REPLACE INTO {TABLE} (key, value, expires) VALUES (?, ?, ?)",
                (key, value, expires),
            )
            return
        conn.execute("BEGIN IMMEDIATE")  # type: ignore[union-attr]
        try:
            self._cull_if_full()
            conn.execute(  # type: ignore[union-attr]
                f"INSERT OR REPLACE INTO {TABLE} (key, value, expires) VALUES (?, ?, ?)",
                (key, value, expires),
            )
            conn.execute("COMMIT")  # type: ignore[union-attr]
        except BaseException:
            _rollback(conn)  # type: ignore[arg-type]
            raise

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        expires = time.time() + ttl if ttl is not None else None
        conn = self.conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        try:
            if self.max_entries is None:
                conn.executemany(
                    f"INSERT OR REPLACE INTO {TABLE} (key, value, expires) VALUES (?, ?, ?)",
                    [(key, value, expires) for key, value in items.items()],
                )
            else:
                for key, value in items.items():  # Django's set_many is one set (and count) per key
                    self._cull_if_full()
                    conn.execute(
                        f"INSERT OR REPLACE INTO {TABLE} (key, value, expires) VALUES (?, ?, ?)",
                        (key, value, expires),
                    )
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def _cull_if_full(self) -> None:
        """Make room for one more row of the run, Django-style, among the run's own rows.

        Runs inside the caller's transaction. Every statement is bounded by the namespace's
        key range: another application's rows, or a concurrent run's, are never touched.
        """
        conn = self.conn
        assert conn is not None and self.max_entries is not None
        ns = f"{TABLE} WHERE key >= ? AND key < ?"
        lo, hi = self._lo, self._hi
        (rows,) = conn.execute(f"SELECT COUNT(*) FROM {ns}", (lo, hi)).fetchone()
        if rows < self.max_entries:
            return
        if self.cull_frequency == 0:
            conn.execute(f"DELETE FROM {ns}", (lo, hi))
            return
        rows -= conn.execute(f"DELETE FROM {ns} AND expires <= ?", (lo, hi, time.time())).rowcount
        if rows < self.max_entries:
            return
        # Cull at least one row so the insert that follows keeps count <= max_entries.
        cull = max(1, rows // self.cull_frequency)
        row = conn.execute(f"SELECT key FROM {ns} ORDER BY key LIMIT 1 OFFSET ?", (lo, hi, cull)).fetchone()
        conn.execute(f"DELETE FROM {ns}", (lo, row[0] if row is not None else hi))

    def delete(self, key: str) -> bool:
        return self.conn.execute(f"DELETE FROM {TABLE} WHERE key = ?", (key,)).rowcount > 0  # type: ignore[union-attr]

    def incr(self, key: str, delta: int = 1) -> int:
        # One atomic upsert: a missing or expired row counts from 0; a live row keeps its TTL.
        now = time.time()
        row = self.conn.execute(  # type: ignore[union-attr]
            f"""INSERT INTO {TABLE} (key, value, expires) VALUES (?, CAST(CAST(? AS TEXT) AS BLOB), NULL)
            ON CONFLICT(key) DO UPDATE SET
              value = CAST(CAST(
                CASE WHEN expires IS NOT NULL AND expires <= ? THEN 0
                     ELSE CAST(CAST(value AS TEXT) AS INTEGER) END + ? AS TEXT) AS BLOB),
              expires = CASE WHEN expires IS NOT NULL AND expires <= ? THEN NULL ELSE expires END
            RETURNING CAST(CAST(value AS TEXT) AS INTEGER)""",
            (key, delta, now, delta, now),
        ).fetchone()
        return row[0]

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        try:
            if self.conn is None:
                self.open()
            return self.conn.execute(  # type: ignore[union-attr]
                f"DELETE FROM {TABLE} WHERE key >= ? AND key < ?", (self._lo, self._hi)
            ).rowcount
        except (sqlite3.Error, BackendUnavailable) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise CleanupFailed(
                f"cleanup failed: {self.path}: {reason}; the rows of namespace {self.namespace} "
                f"may remain in table {TABLE}"
            ) from None


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open, never masking the error that got us here.

    SQLite rolls back by itself on some errors (SQLITE_FULL among them); a second
    ROLLBACK would then raise "no transaction is active" in place of "disk is full".
    """
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
