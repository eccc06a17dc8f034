"""Any Django cache, configured standalone: ``django://?BACKEND=…&LOCATION=…&OPTIONS=…``.

This module owns :class:`DjangoBackend` and :func:`django_url` (a ``CACHES`` entry, e.g. a
dict from a TOML file, turned into a target URL). The workload runs through Django's cache
API exactly as an application calls it, so the framework's key making, pickling and the
client library it drives are all part of the figure; :meth:`DjangoBackend.info` names the
client library and its version. No Django project is needed: settings are configured in
the worker process on first use, and the cache object is built the way Django's own
``CacheHandler`` builds it (``backend_cls(LOCATION, params)``).

Parameters: ``BACKEND`` (dotted path, or a short name: locmem, filebased, db, dummy,
pymemcache, pylibmc, python-memcached, redis, django_redis, diskcache), ``LOCATION``, ``TIMEOUT``,
``KEY_PREFIX``, ``VERSION``, any other upper-case key a backend reads from its ``CACHES``
entry (e.g. diskcache's ``SHARDS``), ``MAX_ENTRIES`` and ``CULL_FREQUENCY`` (these go into
OPTIONS, where Django reads them), ``OPTIONS`` (a JSON object) and ``OPTIONS.<name>=<value>``.
The database cache also takes ``DATABASE=<postgresql://…|mysql://…|sqlite:///path>``; its
table is created like ``createcachetable`` does. Pinned to the Django 5.2 LTS line.

Django's own cull (``MAX_ENTRIES``, default 300; ``CULL_FREQUENCY=0`` clears everything)
deletes any entry in its directory or table, not only the run's, so these caches get a
place of their own: the file-based and DiskCache caches write in ``<LOCATION>/<namespace
dir>`` (created and removed by the run; whatever else ``LOCATION`` holds is never
touched), and the database cache uses a table named after the run (dropped at cleanup)
unless ``LOCATION`` names one. A named table that holds rows the run did not write is
refused (:class:`ForeignData`, exit 2) before anything is written; a named table the run
created is dropped again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote

from ..errors import BackendMissing, BackendUnavailable, SpecError, UserError
from ..schemes import find_scheme
from ..target import Target, parse_target, redact
from .base import Backend, Capabilities, CleanupFailed, ForeignData
from .file import PrivateDir, run_temp_dir
from .memcached import import_pylibmc

SHORT_NAMES = {
    "locmem": "django.core.cache.backends.locmem.LocMemCache",
    "filebased": "django.core.cache.backends.filebased.FileBasedCache",
    "db": "django.core.cache.backends.db.DatabaseCache",
    "dummy": "django.core.cache.backends.dummy.DummyCache",
    "pymemcache": "django.core.cache.backends.memcached.PyMemcacheCache",
    "pylibmc": "django.core.cache.backends.memcached.PyLibMCCache",
    # reference 000's pure-Python client, through the backend Django 4.1 removed (backends/django_memcache.py)
    "python-memcached": "cachemark.backends.django_memcache.MemcachedCache",
    "redis": "django.core.cache.backends.redis.RedisCache",
    "django_redis": "django_redis.cache.RedisCache",
    "diskcache": "diskcache.DjangoCache",
}
_MYSQL_ENGINE = "django.db.backends.mysql"  # speaks MySQLdb's API (PyMySQL can stand in)
_DEFAULT_DATABASE = {"django.db.backends.postgresql": "postgres"}
_STRINGS = ("LOCATION", "KEY_PREFIX", "KEY_FUNCTION")  # top-level CACHES keys kept as text
_IN_OPTIONS = ("MAX_ENTRIES", "CULL_FREQUENCY")
_NOT_PARAMS = ("BACKEND", "OPTIONS", "DATABASE", *_IN_OPTIONS)
_DELETE_BATCH = 1000

# Database-cache tables -> DB alias; read by the router installed when we configure settings.
# DatabaseCache always asks the router which database to use, and without a router the
# answer is "default", so this is how several DATABASE= targets coexist in one process.
_TABLE_ALIAS: dict[str, str] = {}


class _CacheTableRouter:
    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return _TABLE_ALIAS.get(getattr(model._meta, "db_table", ""))

    db_for_write = db_for_read


def django_url(config: Mapping[str, Any]) -> str:
    """A ``CACHES`` entry (``{"BACKEND": …, "LOCATION": …, "OPTIONS": {…}}``) as a target URL."""
    parts = []
    for name, value in config.items():
        if name == "OPTIONS":
            value = json.dumps(value, sort_keys=True)
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        parts.append(f"{quote(str(name), safe='._')}={quote(str(value), safe='._-')}")
    return "django://?" + "&".join(parts)


def _as_bytes(value: Any) -> Any:
    """A counter written by incr comes back from Django as an int; every get returns bytes."""
    return str(value).encode() if type(value) is int else value


def _parse_option(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


class DjangoBackend(Backend):
    scheme = "django"

    def __init__(self, target: Target, namespace: str) -> None:
        super().__init__(target, namespace)
        params = target.params
        backend = params.get("BACKEND")
        if not backend:
            raise SpecError(f"{target.redacted}: BACKEND= is required (e.g. BACKEND=locmem or a dotted path)")
        self.backend_path = SHORT_NAMES.get(backend, backend)
        options: dict[str, Any] = {}
        if params.get("OPTIONS"):
            try:
                options = json.loads(params["OPTIONS"])
            except ValueError:
                raise SpecError(f"{target.redacted}: OPTIONS must be a JSON object") from None
            if not isinstance(options, dict):
                raise SpecError(f"{target.redacted}: OPTIONS must be a JSON object")
        for name, raw in params.items():
            if name.startswith("OPTIONS."):
                options[name[len("OPTIONS."):]] = _parse_option(raw)
            elif name in _IN_OPTIONS:
                options[name] = target.int_param(name)
        self.params: dict[str, Any] = {"OPTIONS": options}
        for name, value in params.items():
            if name in _STRINGS:
                self.params[name] = value
            elif name.isupper() and name not in _NOT_PARAMS:
                # TIMEOUT, VERSION, and backend-specific ones such as diskcache's SHARDS.
                self.params[name] = None if value.lower() == "none" else _parse_option(value)
        self.private: PrivateDir | None = None  # file-based caches: the run's own directory
        self._own_table = False  # database cache: a table named after the run
        self._created_table = False  # database cache: a named table this instance created
        self._drop_on_close = False  # set by clear_namespace: the run's table goes with the handle
        self.location = self._location(params.get("LOCATION") or "")
        self.database_url = params.get("DATABASE")
        if self.database_url and not self.backend_path.endswith(".DatabaseCache"):
            raise SpecError(f"{target.redacted}: DATABASE= only applies to the database cache (BACKEND=db)")
        self.cache: Any = None
        self.db_alias: str | None = None

    def _location(self, given: str) -> str:
        """Where the cache lives: never a place whose other entries Django's cull could reach."""
        if self.backend_path.endswith("FileBasedCache") or self.backend_path == "diskcache.DjangoCache":
            root = given or run_temp_dir("django", self.namespace)
            self.private = PrivateDir(root, self.namespace, temp_root=not given)
            return self.private.path
        if given:
            return given
        if self.backend_path.endswith("DatabaseCache"):
            self._own_table = True
            return "cachemark_django_" + hashlib.sha1(self.namespace.encode()).hexdigest()[:12]
        return "cachemark"  # locmem: the name of the in-process cache

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        path = target.params.get("BACKEND", "")
        path = SHORT_NAMES.get(path, path)
        return Capabilities(
            native=frozenset({"get", "set", "delete", "exists", "get_many", "set_many", "incr"}),
            ttl=True,
            # locmem lives in each worker process: workers do not see each other's writes.
            shared=not path.endswith("LocMemCache"),
        )

    # -- lifecycle -------------------------------------------------------------------
    def open(self) -> None:
        try:
            import django
            from django.utils.module_loading import import_string
        except ImportError as exc:
            hint = "pip install 'Django>=5.2,<5.3'"
            raise BackendMissing(f"django: Django is not installed ({exc}); {hint}") from None
        self._ensure_settings(django)
        if self.database_url:
            self._add_database()
        if self.backend_path.endswith("PyLibMCCache"):
            # before Django's first `import pylibmc`: its libsasl2 must find PLAIN (OPTIONS username/password)
            with contextlib.suppress(ImportError):
                import_pylibmc()
        try:
            backend_cls = import_string(self.backend_path)
        except ImportError as exc:
            raise BackendMissing(f"django: cannot import BACKEND {self.backend_path!r}: {exc}") from None
        if self.private is not None:
            try:
                self.private.create()
            except OSError as exc:
                raise BackendUnavailable(f"django: cannot create {self.location}: {exc.strerror}") from None
        try:
            self.cache = backend_cls(self.location, self.params)
            self._probe()
            if self.db_alias:
                self._refuse_foreign_rows()
        except UserError:
            raise
        except ImportError as exc:
            raise BackendMissing(f"django: {self.backend_path} needs a client library: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - any client's "cannot reach server" becomes one line
            self.cache = None
            where = redact(self.location) if "://" in str(self.location) else self.location
            reason = " ".join(str(exc).split()) or type(exc).__name__
            name = self.backend_path.rsplit(".", 1)[-1]
            raise BackendUnavailable(f"django {name} at {where}: {reason}") from None

    @staticmethod
    def _ensure_settings(django: Any) -> None:
        from django.conf import settings

        if not settings.configured:
            settings.configure(
                DATABASES={},
                DATABASE_ROUTERS=[_CacheTableRouter()],
                INSTALLED_APPS=[],
                USE_TZ=True,
                CACHES={"default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}},
            )
            django.setup()

    def _add_database(self) -> None:
        from django.db import DEFAULT_DB_ALIAS, connections

        assert self.database_url is not None
        alias = "cachemark_" + hashlib.sha1(self.database_url.encode()).hexdigest()[:12]
        if alias not in connections.settings:
            config = _database_config(self.database_url)
            configured = connections.configure_settings(
                {DEFAULT_DB_ALIAS: connections.settings[DEFAULT_DB_ALIAS], alias: config}
            )
            connections.settings[alias] = configured[alias]
        self.db_alias = alias
        _TABLE_ALIAS[self.location] = alias
        self._create_cache_table(alias)

    def _create_cache_table(self, alias: str) -> None:
        from django.core.management.commands.createcachetable import Command
        from django.db import connections

        try:
            names = connections[alias].introspection.table_names()
            if self.location not in names:
                Command().create_table(alias, self.location, dry_run=False)
                self._created_table = True
        except Exception as exc:  # noqa: BLE001
            # Workers race to create the table; losing the race is fine, anything else is not.
            try:
                if self.location in connections[alias].introspection.table_names():
                    return
            except Exception:  # noqa: BLE001
                pass
            raise BackendUnavailable(
                f"django db cache on {parse_target(self.database_url or '').redacted}: "
                f"{' '.join(str(exc).split())}"
            ) from None

    def _refuse_foreign_rows(self) -> None:
        """A named cache table with rows the run did not write: refuse before writing any.

        Django's cull deletes by expiry and key order over the whole table (all of it with
        CULL_FREQUENCY=0), so another application's rows, or a concurrent run's, would go.
        """
        if self._own_table:
            return
        from django.db import connections

        connection = connections[self.db_alias]
        # The run's rows are the keys Django makes from the namespace (KEY_PREFIX:VERSION:ns…).
        prefix = self.cache.make_key(self.namespace)
        pattern = prefix.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"
        table = connection.ops.quote_name(self.location)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE cache_key NOT LIKE %s ESCAPE '!'", [pattern])
            (foreign,) = cursor.fetchone()
        if foreign:
            where = parse_target(self.database_url or "").redacted
            cull = f"MAX_ENTRIES={self.cache._max_entries}, CULL_FREQUENCY={self.cache._cull_frequency}"
            self.close()
            raise ForeignData(
                f"django db cache table {self.location!r} on {where} holds {foreign:,} rows cachemark did not "
                f"write, and Django's cull ({cull}) may delete any row of it: leave LOCATION out (the run then "
                f"uses a table of its own) or name a new or empty table"
            )

    def _probe(self) -> None:
        # Constructing a Django cache never connects; one read proves the server is there.
        self.cache.get(self.namespace + "probe")

    def close(self) -> None:
        cache, self.cache = self.cache, None
        if cache is not None:
            with contextlib.suppress(Exception):  # closing a dead client must not raise
                cache.close()
        if self.db_alias:
            from django.db import connections

            if self._drop_on_close:
                # Emptied by clear_namespace (which reported any failure); an empty table
                # left by a failed DROP holds nothing of anyone's.
                self._drop_on_close = False
                with contextlib.suppress(Exception):
                    self._drop_table()
            connections[self.db_alias].close()

    def info(self) -> dict[str, Any]:
        from django import get_version

        out: dict[str, Any] = {"framework": "django", "django_version": get_version(),
                               "backend": self.backend_path}
        out.update(_client_info(self))
        return out

    # -- operations ------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        return _as_bytes(self.cache.get(key))

    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        # Django's default timeout is 300 s; a cachemark "no TTL" means forever (None).
        self.cache.set(key, value, timeout=ttl)

    def delete(self, key: str) -> bool:
        return bool(self.cache.delete(key))

    def exists(self, key: str) -> bool:
        return self.cache.has_key(key)

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        return {key: _as_bytes(value) for key, value in self.cache.get_many(keys).items()}

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        failed = self.cache.set_many(dict(items), timeout=ttl)
        if failed:  # Django reports keys the server refused; a silent drop is an error
            raise RuntimeError(f"django cache did not store {len(failed)} of {len(items)} keys")

    def incr(self, key: str, delta: int = 1) -> int:
        # Django's incr refuses a missing key; cachemark's incr starts it from 0 (Redis INCRBY).
        for _ in range(3):
            try:
                return int(self.cache.incr(key, delta))
            except ValueError:
                if self.cache.add(key, delta, timeout=None):
                    return delta
        raise RuntimeError(f"django cache lost counter {key!r} between add and incr three times")

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        name = self.backend_path.rsplit(".", 1)[-1]
        if self.private is not None:  # the whole directory is the run's
            if self.cache is not None:
                self.cache.clear()  # this handle then answers misses until close()
            self.private.remove(f"the files of namespace {self.namespace}")
            return -1
        keys = [k for k in written_keys if k.startswith(self.namespace)]
        try:
            if self.cache is None:
                self.open()
            if self._own_table or self._created_table:  # the whole table is the run's
                self.cache.clear()  # this handle then answers misses; close() drops the table
                self._drop_on_close = True
                return -1
            for start in range(0, len(keys), _DELETE_BATCH):
                self.cache.delete_many(keys[start:start + _DELETE_BATCH])
        except UserError as exc:
            raise CleanupFailed(f"cleanup failed: {exc}; up to {len(keys):,} keys of namespace "
                                f"{self.namespace} may remain") from None
        except Exception as exc:  # noqa: BLE001 - any client's error: say what is left
            reason = " ".join(str(exc).split()) or type(exc).__name__
            left = f"table {self.location!r}" if self._own_table or self._created_table else (
                f"up to {len(keys):,} keys of namespace {self.namespace}")
            raise CleanupFailed(f"cleanup failed: django {name}: {reason}; {left} may remain") from None
        return -1  # Django's API cannot count what it removed

    def _drop_table(self) -> None:
        from django.db import connections

        connection = connections[self.db_alias]
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {connection.ops.quote_name(self.location)}")


def _database_config(url: str) -> dict[str, Any]:
    """A Django DATABASES entry for a postgresql://, mysql:// or sqlite:/// URL."""
    t = parse_target(url)
    row = find_scheme(t.scheme)
    engine = row.django_engine if row is not None else None
    if row is None or engine is None:
        raise SpecError(f"DATABASE={t.redacted}: use a postgresql://, mysql:// or sqlite:/// URL")
    engine = f"django.db.backends.{engine}"
    if row.embedded is not None:  # a database in a file (sqlite:///path.db): no server to log in to
        return {"ENGINE": engine, "NAME": unquote(t.path) or ":memory:"}
    server = t.endpoint()
    if engine == _MYSQL_ENGINE and "MySQLdb" not in sys.modules:
        try:
            import MySQLdb  # type: ignore[import-not-found]  # noqa: F401
        except ImportError:
            try:
                import pymysql
            except ImportError:
                raise BackendMissing("django mysql cache: install mysqlclient or pymysql") from None
            # Django's MySQL backend speaks MySQLdb's API; PyMySQL can stand in for it.
            pymysql.install_as_MySQLdb()
    return {
        "ENGINE": engine,
        # PostgreSQL always has a database to connect to; MySQL may be reached without one
        "NAME": server.db or _DEFAULT_DATABASE.get(engine, ""),
        "USER": server.username or "",
        "PASSWORD": server.password or "",
        "HOST": server.host,
        "PORT": str(server.port),
    }


def _version(module: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return None


def _client_info(backend: DjangoBackend) -> dict[str, Any]:
    """Which client library the Django backend drives, and the server's version where cheap."""
    path, cache = backend.backend_path, backend.cache
    out: dict[str, Any] = {}
    try:
        if path.endswith("backends.redis.RedisCache"):
            out.update(client="redis-py", client_version=_version("redis"), hiredis=_version("hiredis"))
            if cache is not None:
                out["server_version"] = cache._cache.get_client().info("server").get("redis_version")
        elif path.startswith("django_redis"):
            out.update(client="django-redis", client_version=_version("django-redis"),
                       redis_py_version=_version("redis"))
            if cache is not None:
                out["server_version"] = cache.client.get_client().info("server").get("redis_version")
        elif path.endswith("PyMemcacheCache"):
            out.update(client="pymemcache", client_version=_version("pymemcache"))
        elif path.endswith("django_memcache.MemcachedCache"):
            out.update(client="python-memcached", client_version=_version("python-memcached"))
        elif path.endswith("PyLibMCCache"):
            pylibmc = import_pylibmc()

            out.update(client="pylibmc", client_version=pylibmc.__version__,
                       libmemcached_version=pylibmc.libmemcached_version)
        elif path == "diskcache.DjangoCache":
            out.update(client="diskcache", client_version=_version("diskcache"))
        elif path.endswith("DatabaseCache") and backend.db_alias:
            from django.db import connections

            conn = connections[backend.db_alias]
            driver = conn.Database
            # PyMySQL installed as MySQLdb keeps its own module name, so this names the real client.
            name = driver.__name__.split(".")[0]
            out.update(client=name, server=conn.vendor,
                       client_version=getattr(driver, "__version__", None) or _version(name))
            out["server_version"] = ".".join(str(p) for p in conn.get_database_version())
        else:
            out["client"] = "django"  # locmem, filebased, dummy: Django itself is the client
        if path.endswith(("PyMemcacheCache", "PyLibMCCache", "django_memcache.MemcachedCache")) and cache is not None:
            client = cache._cache
            if hasattr(client, "clients"):  # pymemcache's HashClient: ask its first server
                version = next(iter(client.clients.values())).version()
            else:
                stats = client.get_stats()
                version = stats[0][1].get("version") if stats else None
            out["server_version"] = version.decode() if isinstance(version, bytes) else version
    except Exception as exc:  # noqa: BLE001 - info is best effort; never fail a run over it
        out["info_error"] = type(exc).__name__
    return out
