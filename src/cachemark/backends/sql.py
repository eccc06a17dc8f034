"""SQL databases as caches: PostgreSQL (psycopg 3) and MariaDB/MySQL (PyMySQL or mysqlclient).

This module owns the cache-table adapters ``postgresql://user:pw@host:5432/db`` and
``mysql://user:pw@host:3306/db``. One table (default ``cachemark_cache``, created if
missing, never dropped) holds ``(cache_key, value, expires)`` with ``expires`` as epoch
seconds (NULL = never). Writes are single-statement upserts. With ``max_entries=N`` every
write first counts the rows and culls the way Django's database cache does (delete expired
rows, then every key below the ``count // cull_frequency``-th in key order), so the cost of
that policy shows in the ``set`` latency. Counting and culling are limited to this run's
namespace, so a shared table's other rows are never touched.

Query parameters: ``table``, ``max_entries``, ``cull_frequency`` (default 3, as Django;
0 = empty the namespace), ``create`` (default true), ``connect_timeout`` (s, default 5),
``client`` (mysql only: ``pymysql`` default, or ``mysqlclient``), ``sslmode`` (postgresql).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import BackendMissing, BackendUnavailable, SpecError
from ..target import Target
from .base import Backend, Capabilities, cleanup_failed

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_NATIVE = frozenset({"get", "set", "delete", "exists", "get_many", "set_many", "incr"})


def _one_line(exc: BaseException) -> str:
    """Driver messages span lines (libpq adds DETAIL/HINT); the CLI prints one."""
    text = str(exc.args[-1] if isinstance(exc.args, tuple) and exc.args and len(exc.args) == 2 else exc)
    return " ".join(part.strip() for part in text.splitlines() if part.strip()) or type(exc).__name__


def _prefix_upper(prefix: str) -> str:
    """The smallest string greater than every string starting with ``prefix``.

    Keys compare byte-wise (COLLATE "C" / VARBINARY), and UTF-8 byte order is code-point
    order, so ``prefix <= key < upper`` is exactly "starts with prefix" and uses the index.
    """
    if not prefix:
        return "\U0010ffff"
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class _SqlBackend(Backend):
    """Shared logic; subclasses supply the driver, the dialect's statements and DDL."""

    def __init__(self, target: Target, namespace: str) -> None:
        super().__init__(target, namespace)
        self.server = target.endpoint()  # host, port (the row's default), credentials
        self.table = target.param("table", "cachemark_cache") or "cachemark_cache"
        if not _IDENT.match(self.table):
            raise SpecError(f"{target.redacted}: table={self.table!r} is not a plain SQL identifier")
        self.max_entries = target.int_param("max_entries")
        self.cull_frequency = target.int_param("cull_frequency", 3) or 0
        self.create = target.bool_param("create", True)
        self.connect_timeout = target.float_param("connect_timeout", 5.0) or 5.0
        self.database = target.path.lstrip("/") or self.default_database()
        self.conn: Any = None
        self._lo = namespace
        self._hi = _prefix_upper(namespace)

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        return Capabilities(native=_NATIVE, ttl=True)

    def default_database(self) -> str:
        return ""

    # -- lifecycle -------------------------------------------------------------------
    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a dead connection must not raise
                conn.close()

    def _ensure_table(self) -> None:
        if not self.create or self._table_exists():
            return
        try:
            self._execute(self.ddl())
        except Exception:
            # Several workers may race to create it; losing that race is fine.
            if not self._table_exists():
                raise

    # -- dialect hooks ---------------------------------------------------------------
    def ddl(self) -> str:
        raise NotImplementedError

    def _table_exists(self) -> bool:
        raise NotImplementedError

    def _upsert_sql(self) -> str:
        raise NotImplementedError

    def _execute(self, sql: str, params: Any = None) -> Any:
        cur = self.conn.cursor()
        cur.execute(sql, params)
        return cur

    def _in_clause(self, keys: list[str]) -> tuple[str, list[Any]]:
        raise NotImplementedError

    @staticmethod
    def _key(raw: Any) -> str:
        return raw.decode() if isinstance(raw, (bytes, bytearray, memoryview)) else raw

    # -- culling, as Django's DatabaseCache does it ------------------------------------
    def _maybe_cull(self) -> None:
        if self.max_entries is None:
            return
        t = self.table
        cur = self._execute(f"SELECT COUNT(*) FROM {t} WHERE cache_key >= %s AND cache_key < %s",
                            (self._lo, self._hi))
        num = cur.fetchone()[0]
        if num <= self.max_entries:
            return
        if self.cull_frequency == 0:
            self._delete_namespace()
            return
        cur = self._execute(
            f"DELETE FROM {t} WHERE cache_key >= %s AND cache_key < %s AND expires < %s",
            (self._lo, self._hi, time.time()),
        )
        remaining = num - max(cur.rowcount, 0)
        if remaining <= self.max_entries:
            return
        cur = self._execute(
            f"SELECT cache_key FROM {t} WHERE cache_key >= %s AND cache_key < %s "
            f"ORDER BY cache_key LIMIT 1 OFFSET %s",
            (self._lo, self._hi, remaining // self.cull_frequency),
        )
        row = cur.fetchone()
        if row:
            self._execute(f"DELETE FROM {t} WHERE cache_key >= %s AND cache_key < %s",
                          (self._lo, self._key(row[0])))

    # -- operations ------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        cur = self._execute(f"SELECT value, expires FROM {self.table} WHERE cache_key = %s", (key,))
        row = cur.fetchone()
        if row is None:
            return None
        value, expires = row
        if expires is not None and expires <= time.time():
            # Django deletes expired rows it reads; do the same so the cost matches.
            self._execute(f"DELETE FROM {self.table} WHERE cache_key = %s AND expires <= %s",
                          (key, time.time()))
            return None
        return bytes(value)

    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        self._maybe_cull()
        expires = None if ttl is None else time.time() + ttl
        self._execute(self._upsert_sql(), (key, value, expires))

    def delete(self, key: str) -> bool:
        cur = self._execute(f"DELETE FROM {self.table} WHERE cache_key = %s", (key,))
        return cur.rowcount > 0

    def exists(self, key: str) -> bool:
        cur = self._execute(
            f"SELECT 1 FROM {self.table} WHERE cache_key = %s AND (expires IS NULL OR expires > %s)",
            (key, time.time()),
        )
        return cur.fetchone() is not None

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        clause, params = self._in_clause(keys)
        cur = self._execute(f"SELECT cache_key, value, expires FROM {self.table} WHERE {clause}", params)
        now = time.time()
        return {self._key(k): bytes(v) for k, v, exp in cur.fetchall() if exp is None or exp > now}

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        if not items:
            return
        self._maybe_cull()
        expires = None if ttl is None else time.time() + ttl
        cur = self.conn.cursor()
        cur.executemany(self._upsert_sql(), [(k, v, expires) for k, v in items.items()])

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        try:
            return self._delete_namespace()
        except Exception:  # noqa: BLE001 - the idle connection may have died with a server restart
            self.close()
        try:
            return self._delete_namespace()
        except Exception as exc:  # noqa: BLE001 - a fresh connection failed too: say what is left
            where = f"{self.scheme} at {self.server.display}"
            raise cleanup_failed(where, exc, f"the rows of namespace {self.namespace} in table {self.table}"
                                 ) from None

    def _delete_namespace(self) -> int:
        if self.conn is None:
            self.open()
        cur = self._execute(f"DELETE FROM {self.table} WHERE cache_key >= %s AND cache_key < %s",
                            (self._lo, self._hi))
        return max(cur.rowcount, 0)


class PostgresBackend(_SqlBackend):
    scheme = "postgresql"

    def default_database(self) -> str:
        return "postgres"

    def open(self) -> None:
        try:
            import psycopg
        except ImportError as exc:
            hint = "pip install 'psycopg[binary]'"
            raise BackendMissing(f"postgresql: psycopg is not installed ({exc}); {hint}") from None
        self._psycopg = psycopg
        kwargs: dict[str, Any] = {
            "host": self.server.host,
            "port": self.server.port,
            "dbname": self.database,
            "connect_timeout": max(1, round(self.connect_timeout)),
            "autocommit": True,
        }
        if self.server.username:
            kwargs["user"] = self.server.username
        if self.server.password is not None:
            kwargs["password"] = self.server.password
        if self.target.param("sslmode"):
            kwargs["sslmode"] = self.target.param("sslmode")
        try:
            self.conn = psycopg.connect(**kwargs)
            self._ensure_table()
        except psycopg.Error as exc:
            self.close()
            raise BackendUnavailable(f"{self.target.redacted}: {_one_line(exc)}") from None

    def ddl(self) -> str:
        # COLLATE "C": byte order, so namespace ranges are prefix ranges and use the index.
        return (
            f'CREATE TABLE IF NOT EXISTS {self.table} ('
            f'cache_key VARCHAR(255) COLLATE "C" PRIMARY KEY, '
            f"value BYTEA NOT NULL, expires DOUBLE PRECISION)"
        )

    def _table_exists(self) -> bool:
        cur = self._execute("SELECT to_regclass(%s)", (self.table,))
        return cur.fetchone()[0] is not None

    def _upsert_sql(self) -> str:
        return (
            f"INSERT INTO {self.table} (cache_key, value, expires) VALUES (%s, %s, %s) "
            f"ON CONFLICT (cache_key) DO UPDATE SET value = EXCLUDED.value, expires = EXCLUDED.expires"
        )

    def _in_clause(self, keys: list[str]) -> tuple[str, list[Any]]:
        return "cache_key = ANY(%s)", [keys]

    def incr(self, key: str, delta: int = 1) -> int:
        # Redis INCRBY semantics: a missing (or expired) key starts from 0. One statement,
        # so concurrent increments are atomic under the row lock.
        t = self.table
        cur = self._execute(
            f"INSERT INTO {t} AS t (cache_key, value, expires) VALUES (%s, %s, NULL) "
            f"ON CONFLICT (cache_key) DO UPDATE SET "
            f"value = CASE WHEN t.expires IS NOT NULL AND t.expires <= %s THEN EXCLUDED.value "
            f"ELSE convert_to((convert_from(t.value, 'UTF8')::bigint + %s)::text, 'UTF8') END, "
            f"expires = CASE WHEN t.expires IS NOT NULL AND t.expires <= %s THEN NULL ELSE t.expires END "
            f"RETURNING value",
            (key, str(delta).encode(), time.time(), delta, time.time()),
        )
        return int(bytes(cur.fetchone()[0]))

    def info(self) -> dict[str, Any]:
        import psycopg

        out: dict[str, Any] = {
            "client": "psycopg",
            "client_version": psycopg.__version__,
            "libpq_version": psycopg.pq.version(),
            "table": self.table,
            "max_entries": self.max_entries,
        }
        if self.conn is not None:
            out["server"] = "postgresql"
            out["server_version"] = self._execute("SHOW server_version").fetchone()[0]
        return out


class MysqlBackend(_SqlBackend):
    scheme = "mysql"

    def open(self) -> None:
        client = self.target.param("client", "pymysql")
        try:
            if client == "pymysql":
                import pymysql as driver
            elif client == "mysqlclient":
                import MySQLdb as driver  # type: ignore[import-not-found]
            else:
                raise SpecError(f"{self.target.redacted}: client={client!r}; use pymysql or mysqlclient")
        except ImportError as exc:
            raise BackendMissing(f"mysql: {client} is not installed ({exc}); pip install {client}") from None
        self._driver = driver
        self._client = client
        kwargs: dict[str, Any] = {
            "host": self.server.host,
            "port": self.server.port,
            "user": self.server.username or "root",
            "connect_timeout": max(1, round(self.connect_timeout)),
            "autocommit": True,
            "charset": "utf8mb4",
        }
        if self.database:
            kwargs["database"] = self.database
        if self.server.password is not None:
            kwargs["password"] = self.server.password
        try:
            self.conn = driver.connect(**kwargs)
            self._ensure_table()
        except driver.Error as exc:
            self.close()
            raise BackendUnavailable(f"{self.target.redacted}: {_one_line(exc)}") from None

    def ddl(self) -> str:
        # VARBINARY: byte-wise comparison, so namespace ranges are prefix ranges.
        return (
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            f"cache_key VARBINARY(255) NOT NULL PRIMARY KEY, "
            f"value LONGBLOB NOT NULL, expires DOUBLE NULL) ENGINE=InnoDB"
        )

    def _table_exists(self) -> bool:
        cur = self._execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = %s",
            (self.table,),
        )
        return cur.fetchone() is not None

    def _upsert_sql(self) -> str:
        # VALUES() rather than a row alias: MariaDB has no "AS new" form.
        return (
            f"INSERT INTO {self.table} (cache_key, value, expires) VALUES (%s, %s, %s) "
            f"ON DUPLICATE KEY UPDATE value = VALUES(value), expires = VALUES(expires)"
        )

    def _in_clause(self, keys: list[str]) -> tuple[str, list[Any]]:
        return f"cache_key IN ({', '.join(['%s'] * len(keys))})", list(keys)

    def incr(self, key: str, delta: int = 1) -> int:
        # Upsert then read back in one transaction: the upsert's row lock makes it atomic.
        t = self.table
        self.conn.begin()
        try:
            now = time.time()
            self._execute(
                f"INSERT INTO {t} (cache_key, value, expires) VALUES (%s, %s, NULL) "
                f"ON DUPLICATE KEY UPDATE "
                f"value = IF(expires IS NOT NULL AND expires <= %s, VALUES(value), "
                f"CAST(CAST(value AS SIGNED) + %s AS CHAR)), "
                f"expires = IF(expires IS NOT NULL AND expires <= %s, NULL, expires)",
                (key, str(delta).encode(), now, delta, now),
            )
            row = self._execute(f"SELECT value FROM {t} WHERE cache_key = %s", (key,)).fetchone()
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise
        return int(bytes(row[0]))

    def info(self) -> dict[str, Any]:
        client = getattr(self, "_client", self.target.param("client", "pymysql"))
        out: dict[str, Any] = {"client": client, "table": self.table, "max_entries": self.max_entries}
        driver = getattr(self, "_driver", None)
        if driver is not None:
            out["client_version"] = getattr(driver, "__version__", None) or ".".join(
                str(p) for p in getattr(driver, "version_info", ())[:3]
            )
        if self.conn is not None:
            version = self._execute("SELECT VERSION()").fetchone()[0]
            out["server"] = "mariadb" if "mariadb" in version.lower() else "mysql"
            out["server_version"] = version
        return out
