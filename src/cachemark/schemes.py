"""Every fact about a target URL scheme, in one row: what adapter runs it, what to install,
its protocol family, its default port, how a network profile proxies it, where its server
figures come from, whether the native engine speaks it, which URL parameters it takes, and
which commands support it (tags, two-level tier, stampede, capture, cache-aside origin).

Before this table the same facts lived in six (the backend registry, the lab's kinds, the
network proxy's ports, the server sampler's sources, the engine's config, the spawn
passthrough list) and they disagreed: ``rediss://host`` changed port when ``--network``
was added, ``valkey://`` was accepted by the engine and refused by the registry,
``spawn:memcached?threads=`` never reached memcached. Adding a backend is now a row here,
its adapter, and (if it has a server) a lab row; a server that speaks an existing protocol
(``keydb://``: RESP) is one row built by its family's constructor (``_redis("keydb")``),
and every command (run, stampede, capture, origin, server stats, the engine) asks the row,
never the scheme's name.

This module imports nothing of cachemark's but errors and text helpers, so every room
may consult it.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .driver_registry import DRIVERS
from .errors import SpecError

if TYPE_CHECKING:
    from .target import Target

# Parameters of the native engine (``?client=engine``), for the schemes it speaks.
ENGINE_PARAMS = frozenset({"threads", "connections", "pipeline", "protocol"})
# Parameters every scheme takes: ``tags=versioned|native|scan`` wraps any backend with tag support.
COMMON_PARAMS = frozenset({"tags"})


@dataclass(frozen=True)
class Scheme:
    """One URL scheme: ``redis``, ``sqlite``, ``django``, …"""

    name: str
    adapter: str  # "module:Class" of its Backend, imported only when used
    package: str = ""  # what to pip install when the adapter's import fails
    params: frozenset[str] = frozenset()  # URL parameters it takes (besides COMMON_PARAMS)
    default_port: int | None = None  # a network scheme: the port when the URL gives none (and proxyable)
    proxy_param: str | None = None  # a network service reached through a URL parameter (s3: endpoint_url)
    stats: str | None = None  # where server figures come from: redis | redis-cluster | memcached | postgres | mysql
    engine: str | None = None  # the native engine's protocol family: resp | memcache
    embedded: str | None = None  # a local store: "" (a directory) or a file name a temp dir gets
    nested: tuple[str, ...] = ()  # parameters that are target URLs themselves
    open_params: str | None = None  # a regex for open-ended parameter names (Django's settings)
    tls: bool = False
    # the URL's path is a Unix domain socket (``redis+unix:///run/redis.sock``): no host, no port, no proxy
    unix: bool = False
    # further client libraries its adapter may use: their versions go into the results' fingerprint
    clients: tuple[str, ...] = ()
    stores: bool = True  # False: keeps nothing by design (null://), so the dropped-writes probe skips it
    # survives a restart of the cache: True, False, or None when its configuration decides (Redis: RDB/AOF)
    persistent: bool | None = None
    # a Redis Cluster: the URL's hosts are seeds, keys go to the node owning their hash slot
    cluster: bool = False
    # ``client=`` values naming a driver in another stack (run/driver.py), for schemes without a client choice
    drivers: frozenset[str] = frozenset()
    # a target that fails over (Sentinel): the on-error policy waits at least this long before stopping a run
    failover_grace: float | None = None
    # the wire protocol its server speaks: resp | memcache | sql | s3; None for stores in this process or on disk
    family: str | None = None
    # the tag mode it keeps natively (``tags=`` default of a two-level slow tier): "native" (Redis sets and
    # Lua, any single RESP server) or "scan" (the file backend's directory); None: only ``versioned``
    tags: str | None = None
    # its adapter applies ``tags=`` itself (twolevel: to its slow level) rather than being wrapped
    own_tags: bool = False
    # ``cachemark stampede`` runs on it: one RESP or memcached server, reached by a plain client of its family
    stampede: bool = False
    # the protocol ``cachemark capture`` records in front of it (lab/proxy.CAPTURE_PROTOCOLS), None: not capturable
    capture: str | None = None
    # a SQL server a cache-aside origin may query (``origin = "mysql://…?query=…"``): postgresql | mysql
    origin: str | None = None
    # the Django DATABASES ENGINE for it as a ``django://?DATABASE=`` (sqlite3, postgresql, mysql)
    django_engine: str | None = None
    # how a Django LOCATION names it: "hosts" (memcached's host:port list); else a path (embedded) or the URL
    location: str = ""
    # the parameters a run's default label is made of: twolevel(fast+slow), django(BACKEND's class)
    label_from: tuple[str, ...] = ()
    # ``spawn:<kind>``: not a store but a request for a lab server, whose URL has a scheme of its own
    spawner: bool = False

    @property
    def adapter_module(self) -> str:
        return self.adapter.split(":")[0]

    @property
    def network(self) -> bool:
        """A server a network profile's TCP proxy can stand in front of (hosts and ports of its own)."""
        return self.default_port is not None and not (self.unix or self.cluster or self.failover_grace is not None)

    def allowed(self) -> list[str]:
        names = set(self.params | COMMON_PARAMS)
        if self.engine:
            names |= ENGINE_PARAMS | {"client"}
        if self.drivers:
            names.add("client")
        return sorted(names)

    def takes(self, name: str) -> bool:
        return name in self.params or name in COMMON_PARAMS or (
            self.engine is not None and (name in ENGINE_PARAMS or name == "client")) or (
            name == "client" and bool(self.drivers)) or (
            self.open_params is not None and re.fullmatch(self.open_params, name) is not None)


@dataclass(frozen=True)
class LabKind:
    """A server the lab can spawn (``spawn:<name>``) and the scheme its URL has."""

    name: str
    server: str  # "module:Class" of its LocalServer
    serves: str  # the scheme of the URL the started server gives
    options: frozenset[str] = field(default_factory=frozenset)  # server options in the spawn: URL


def drivers_of(scheme_name: str) -> frozenset[str]:
    """The driver ``client=`` names that run a scheme's targets (their rows in driver_registry.py)."""
    return frozenset(name for name, driver in DRIVERS.items() if scheme_name in driver.schemes)


_REDIS = frozenset({"client", "hiredis", "socket_timeout", "socket_connect_timeout"})
_TLS = frozenset({"ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile"})
_REDIS_TLS = _REDIS | _TLS
_MEMCACHED = frozenset({"client", "binary", "connect_timeout", "no_delay", "noreply", "timeout", "tls"}) | _TLS
_SQL = frozenset({"client", "connect_timeout", "create", "cull_frequency", "max_entries", "sslmode", "table"})
_S3 = frozenset({"addressing", "aws_access_key_id", "aws_secret_access_key", "connect_timeout", "cull_frequency",
                 "emulator", "encoding", "endpoint_url", "key_naming", "max_entries", "read_timeout", "region",
                 "retries"})


# Facts every server of a protocol family shares: a RESP server keeps tags natively (sets and Lua) and runs
# stampedes, a plain-text one can be captured; a cluster or Sentinel row takes back what it cannot do.
_RESP: dict[str, Any] = {"family": "resp", "engine": "resp", "stats": "redis", "clients": ("hiredis",),
                         "tags": "native", "stampede": True}
_MEMCACHE: dict[str, Any] = {"family": "memcache", "engine": "memcache", "stats": "memcached",
                             "clients": ("pylibmc",), "persistent": False, "stampede": True, "location": "hosts"}


def _redis(name: str, tls: bool = False) -> Scheme:
    """A RESP server on TCP (``redis://``, ``valkey://``, ``keydb://``: one row each, nothing else to add)."""
    # a recorder cannot read TLS: capture refuses rediss:// with its own line (capture_command.upstream_of)
    return Scheme(name, "cachemark.backends.redis:RedisBackend", "redis", _REDIS_TLS if tls else _REDIS,
                  default_port=6379, tls=tls, capture="resp", drivers=drivers_of(name), **_RESP)


def _redis_unix(name: str) -> Scheme:
    # redis-py's unix:// URLs name the database with ?db=, as the path is the socket's
    return Scheme(name, "cachemark.backends.redis:RedisBackend", "redis", _REDIS | {"db"}, unix=True, **_RESP)


def _redis_sentinel(name: str) -> Scheme:
    # the hosts are Sentinels (26379 when a port is left out), the path names the service and the database;
    # not proxyable (``network``): a proxy in front of the Sentinels would not be in front of the primary they name
    return Scheme(name, "cachemark.backends.redis:RedisBackend", "redis", _REDIS | {"sentinel_password"},
                  default_port=SENTINEL_PORT, failover_grace=FAILOVER_GRACE,
                  **{**_RESP, "stats": None, "stampede": False})  # INFO of a Sentinel is not the primary's


# Sentinel's defaults take 30 s (down-after-milliseconds) plus an election to fail over
FAILOVER_GRACE = 60.0
SENTINEL_PORT = 26379


def _redis_cluster(name: str, tls: bool = False) -> Scheme:
    # not proxyable (``network``): a network profile's proxy cannot stand in front of a cluster, whose nodes
    # hand out their own addresses (CLUSTER SLOTS, MOVED); its figures are every primary's INFO added up;
    # no native tags or stampede: a tag's keys and a lock's key live on other nodes than the Lua script's
    return Scheme(name, "cachemark.backends.redis_cluster:RedisClusterBackend", "redis",
                  ((_REDIS_TLS if tls else _REDIS) - {"hiredis"}) | {"read_from_replicas"}, default_port=6379,
                  tls=tls, cluster=True, **{**_RESP, "stats": "redis-cluster", "tags": None, "stampede": False})


def _postgres(name: str) -> Scheme:
    return Scheme(name, "cachemark.backends.sql:PostgresBackend", "psycopg[binary]", _SQL, default_port=5432,
                  stats="postgres", persistent=True, family="sql", origin="postgresql", django_engine="postgresql")


def _mysql(name: str) -> Scheme:
    return Scheme(name, "cachemark.backends.sql:MysqlBackend", "pymysql", _SQL, default_port=3306, stats="mysql",
                  persistent=True, family="sql", origin="mysql", django_engine="mysql")


_SCHEMES = {s.name: s for s in (
    Scheme("memory", "cachemark.backends.memory:MemoryBackend", params=frozenset({"max_entries"}), persistent=False,
           drivers=drivers_of("memory")),
    Scheme("null", "cachemark.backends.null:NullBackend", params=frozenset({"hit", "size"}), stores=False,
           persistent=False),
    Scheme("file", "cachemark.backends.file:FileBackend", params=frozenset({"fanout"}), embedded="", persistent=True,
           drivers=drivers_of("file"), tags="scan"),
    Scheme("diskcache", "cachemark.backends.diskcache:DiskCacheBackend", "diskcache",
           frozenset({"eviction_policy", "shards", "size_limit", "timeout"}), embedded="", persistent=True),
    Scheme("sqlite", "cachemark.backends.sqlite:SqliteBackend",
           params=frozenset({"cull_frequency", "max_entries", "synchronous", "timeout"}), embedded="cache.db",
           persistent=True, django_engine="sqlite3"),
    # redis-py's default port is 6379 for rediss:// too, so it is here: the proxy must agree with the client
    _redis("redis"), _redis("rediss", tls=True), _redis("valkey"), _redis("valkeys", tls=True), _redis("keydb"),
    _redis_unix("redis+unix"), _redis_unix("valkey+unix"), _redis_sentinel("redis+sentinel"),
    _redis_sentinel("valkey+sentinel"), _redis_cluster("redis+cluster"), _redis_cluster("valkey+cluster"),
    _redis_cluster("rediss+cluster", tls=True), _redis_cluster("valkeys+cluster", tls=True),
    Scheme("memcached", "cachemark.backends.memcached:MemcachedBackend", "pymemcache", _MEMCACHED,
           default_port=11211, capture="memcached", drivers=drivers_of("memcached"), **_MEMCACHE),
    Scheme("memcached+unix", "cachemark.backends.memcached:MemcachedBackend", "pymemcache", _MEMCACHED - _TLS - {"tls"},
           unix=True, **_MEMCACHE),
    _postgres("postgresql"), _postgres("postgres"), _mysql("mysql"), _mysql("mariadb"),
    Scheme("s3", "cachemark.backends.s3:S3Backend", "boto3", _S3, proxy_param="endpoint_url", persistent=True,
           family="s3"),
    Scheme("django", "cachemark.backends.django:DjangoBackend", "django", nested=("LOCATION", "DATABASE"),
           open_params=r"[A-Z][A-Z0-9_]*|OPTIONS\..+", clients=("django-redis",), label_from=("BACKEND",)),
    Scheme("twolevel", "cachemark.backends.twolevel:TwoLevelBackend",
           params=frozenset({"fast", "slow", "priority"}), nested=("fast", "slow"), own_tags=True,
           label_from=("fast", "slow")),
    # not a store: ``spawn:<kind>`` asks the lab for a server (run/provide.py); its parameters are split by
    # the lab row (split_spawn_params), so it has neither adapter nor parameters of its own
    Scheme("spawn", "", spawner=True),
)}

_LAB = {k.name: k for k in (
    LabKind("redis", "cachemark.lab.redis:RedisServer", "redis",
            frozenset({"password", "maxmemory", "maxmemory_policy", "unix", "tls"})),
    LabKind("redis-sentinel", "cachemark.lab.sentinel:SentinelLab", "redis+sentinel", frozenset({"down_after_ms"})),
    LabKind("redis-cluster", "cachemark.lab.redis_cluster:RedisClusterServer", "redis+cluster",
            frozenset({"nodes", "replicas", "tls"})),
    LabKind("memcached", "cachemark.lab.memcached:MemcachedServer", "memcached",
            frozenset({"memory_mb", "threads", "max_connections", "max_item_size", "unix", "tls", "sasl"})),
    LabKind("postgresql", "cachemark.lab.postgres:PostgresServer", "postgresql"),
    LabKind("postgres", "cachemark.lab.postgres:PostgresServer", "postgresql"),
    LabKind("mysql", "cachemark.lab.mysql:MysqlServer", "mysql"),
    LabKind("mariadb", "cachemark.lab.mysql:MysqlServer", "mysql"),
    LabKind("s3", "cachemark.lab.s3:S3Server", "s3"),
)}


def schemes() -> list[str]:
    """Every scheme a target URL may have (``spawn`` included)."""
    return sorted(_SCHEMES)


def store_schemes() -> list[str]:
    """The schemes of stores (every one but ``spawn``): what ``cachemark targets`` lists."""
    return sorted(name for name, row in _SCHEMES.items() if not row.spawner)


def client_packages() -> list[str]:
    """Every client library an adapter may import (distribution names), for the fingerprint."""
    names = {s.package.split("[")[0] for s in _SCHEMES.values() if s.package}
    names |= {c for s in _SCHEMES.values() for c in s.clients}
    return sorted(names)


def lab_kinds() -> list[str]:
    return sorted(_LAB)


def scheme(name: str, shown: str = "") -> Scheme:
    """The row of a scheme, or one line naming the known ones.

    >>> row = scheme("redis")
    >>> row.default_port, row.family
    (6379, 'resp')
    >>> scheme("rediss-typo")
    Traceback (most recent call last):
    cachemark.errors.SpecError: unknown backend scheme 'rediss-typo'...
    """
    try:
        return _SCHEMES[name]
    except KeyError:
        where = f" in {shown!r}" if shown else ""
        raise SpecError(f"unknown backend scheme {name!r}{where}{_did_you_mean(name, schemes())}; "
                        f"known: {', '.join(schemes())}") from None


def adapter_modules(scheme_name: str, path: str) -> list[str]:
    """The modules a target's adapter comes from (a ``spawn:<kind>`` target's: the scheme its server is
    reached by), for the workers' fork server to import before it forks any; a scheme that nests other
    targets (django, twolevel) adds redis-py's adapter, the store they most often wrap.

    >>> adapter_modules("spawn", "memcached"), adapter_modules("twolevel", "")
    (['cachemark.backends.memcached'], ['cachemark.backends.twolevel', 'cachemark.backends.redis'])
    """
    row = spawned_as(path) if scheme(scheme_name).spawner else scheme(scheme_name)
    return [row.adapter_module, _SCHEMES["redis"].adapter_module] if row.nested else [row.adapter_module]


def find_scheme(name: str) -> Scheme | None:
    """The row of a scheme, or None (for callers that have a fallback)."""
    return _SCHEMES.get(name)


def lab_kind(name: str) -> LabKind:
    try:
        return _LAB[name]
    except KeyError:
        raise SpecError(f"cannot spawn {name!r}{_did_you_mean(name, lab_kinds())}; the lab knows: "
                        f"{', '.join(lab_kinds())}") from None


def _did_you_mean(name: str, known: list[str]) -> str:
    """`` (did you mean redis?)`` for a misspelling, as the command line says it for flags."""
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def network_schemes() -> list[str]:
    """Schemes a network profile can put a proxy in front of."""
    return sorted(n for n, s in _SCHEMES.items() if s.network or s.proxy_param)


def capture_schemes() -> list[str]:
    """Schemes ``cachemark capture`` records in front of (plain-text RESP and memcached servers)."""
    return sorted(n for n, s in _SCHEMES.items() if s.capture and not s.tls)


def stampede_schemes() -> list[str]:
    """Schemes ``cachemark stampede`` measures on."""
    return sorted(n for n, s in _SCHEMES.items() if s.stampede)


def origin_schemes() -> list[str]:
    """Schemes of SQL servers a cache-aside origin may query."""
    return sorted(n for n, s in _SCHEMES.items() if s.origin)


def origin_lab_kinds() -> list[str]:
    """The lab kinds whose server a cache-aside origin may query (``spawn:postgresql?query=…``), in row order."""
    return [name for name, kind in _LAB.items() if _SCHEMES[kind.serves].origin]


def spawned_as(kind: str) -> Scheme:
    """The row of the scheme a ``spawn:<kind>`` server's URL has (``spawn:mariadb`` → mysql)."""
    return scheme(lab_kind(kind).serves)


def split_spawn_params(target: Target) -> tuple[dict[str, str], dict[str, str]]:
    """A ``spawn:`` target's parameters: (for the server, for the client of the scheme it serves).

    A name the lab server declares goes to the server (``spawn:memcached?threads=4`` is
    memcached's ``-t 4``); every other one must be a parameter of the served scheme.
    """
    kind = lab_kind(target.path)
    served = scheme(kind.serves)
    server, client = {}, {}
    for name, value in target.params.items():
        if name in kind.options:
            server[name] = value
        elif served.takes(name):
            client[name] = value
        else:
            raise SpecError(f"spawn:{kind.name}: unknown parameter {name!r}; the server takes "
                            f"{', '.join(sorted(kind.options)) or 'none'}, the client {', '.join(served.allowed())}")
    return server, client


def unix_socket(target: Target) -> str:
    """The socket path of a ``+unix`` target (``redis+unix:///run/redis.sock`` → ``/run/redis.sock``)."""
    if any(host for host, _ in target.hosts) or not target.path.startswith("/"):
        raise SpecError(f"{target.redacted}: {target.scheme}:// takes an absolute socket path after three "
                        f"slashes, e.g. {target.scheme}:///run/{target.scheme.split('+')[0]}.sock")
    return target.path


def sentinel_parts(target: Target) -> tuple[list[tuple[str, int]], str, int]:
    """A ``redis+sentinel://h1:26379,h2:26379/mymaster/0`` target's Sentinels, service name and database."""
    name, _, db = target.path.strip("/").partition("/")
    if not target.hosts or not name:
        raise SpecError(f"{target.redacted}: {target.scheme}:// takes the Sentinels and the service name, e.g. "
                        f"{target.scheme}://127.0.0.1:26379,127.0.0.1:26380/mymaster/0")
    try:
        database = int(db) if db else 0
    except ValueError:
        raise SpecError(f"{target.redacted}: database {db!r} (after the service name) must be a number") from None
    port = scheme(target.scheme).default_port
    return [(host or "127.0.0.1", given or port or SENTINEL_PORT) for host, given in target.hosts], name, database
