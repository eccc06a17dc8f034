"""``redis://[:password@]host:port/db?client=redis-py&hiredis=true|false&socket_timeout=…`` (and ``rediss://``,
``redis+unix:///path/to/redis.sock?db=N``: a Unix domain socket, and
``redis+sentinel://[:password@]s1:26379,s2:26379/mymaster/db?sentinel_password=…``: the primary Sentinel names).

Owns :class:`RedisBackend`, the redis-py adapter. Each op is one redis-py call:
``get_many`` is MGET, ``set_many`` one non-transactional pipeline of SETs, TTLs go
in the SET itself (PX), ``incr`` is INCRBY. redis-py's automatic retries are turned
off so a failed op is counted as an error instead of being hidden inside a slower
success. ``hiredis=false`` forces the pure-Python RESP2 parser; by default the
hiredis parser is used when installed. A Sentinel target connects through redis-py's
``Sentinel(...).master_for(name)``: every new connection asks the Sentinels for the
primary, so after a failover the next op that reconnects reaches the new one (the ops in
between fail and are counted). Cleanup is SCAN MATCH ``<namespace>*`` plus
UNLINK in batches — never FLUSHDB. The raw client is ``self.client`` (tags use it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import redis
from redis._parsers import _HiredisParser, _RESP2Parser
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

from ..errors import BackendMissing, BackendUnavailable, SpecError
from ..schemes import drivers_of, scheme, sentinel_parts
from ..target import Target
from .base import Backend, Capabilities, cleanup_failed

_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")
_CLIENTS = ("redis-py",)
_UNLINK_BATCH = 500


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


class RedisBackend(Backend):
    scheme = "redis"

    def __init__(self, target: Target, namespace: str) -> None:
        super().__init__(target, namespace)
        client = target.param("client", "redis-py")
        # a driver in another stack runs the load (run/driver.py); redis-py checks and cleans up
        if client in drivers_of(target.scheme):
            client = "redis-py"
        if client not in _CLIENTS:
            raise SpecError(f"{target.redacted}: client={client!r} is not served here; use redis-py")
        requested = target.params.get("hiredis")
        self.hiredis = target.bool_param("hiredis", HIREDIS_AVAILABLE)
        if self.hiredis and requested is not None and not HIREDIS_AVAILABLE:
            raise BackendMissing(
                f"{target.redacted}: hiredis=true but hiredis is not installed (pip install hiredis)"
            )
        row = scheme(target.scheme)
        server = target.endpoint()
        self.socket_path = server.socket
        # a Sentinel target: the Sentinels' addresses and the service they watch (the primary is theirs to name)
        self.sentinels: list[tuple[str, int]] = []
        self.service = ""
        if row.failover_grace is not None:
            self.sentinels, self.service, db = sentinel_parts(target)
        else:
            db = server.db_number()
        self.tls = server.tls
        # Connection settings only; nothing connects until open().
        address: dict[str, Any] = {}
        if self.sentinels:  # no address: the Sentinels name one at each connect
            self.where = f"sentinel {self.service} via " + ",".join(f"{h}:{p}" for h, p in self.sentinels)
        elif self.socket_path:
            address = {"path": self.socket_path}
            self.where = server.display
        else:
            address = {"host": server.host, "port": server.port}
            self.where = f"{server.host}:{server.port}"
        self._kwargs: dict[str, Any] = {
            **address,
            "db": db,
            "username": server.username,
            "password": server.password,
            "socket_timeout": target.float_param("socket_timeout", 5.0),
            "socket_connect_timeout": target.float_param("socket_connect_timeout", 2.0),
            "retry": Retry(NoBackoff(), 0),
            "parser_class": _HiredisParser if self.hiredis else _RESP2Parser,
            "connection_class": redis.SSLConnection if self.tls else (
                redis.UnixDomainSocketConnection if self.socket_path else redis.Connection),
        }
        if self.sentinels:  # the Sentinel pool brings its own connection class (it asks where the primary is)
            del self._kwargs["connection_class"]
            self._sentinel_kwargs = {"socket_timeout": self._kwargs["socket_timeout"],
                                     "socket_connect_timeout": self._kwargs["socket_connect_timeout"],
                                     "password": target.param("sentinel_password") or None}
        self.tls_verify = self.tls and (target.param("ssl_cert_reqs") or "required").lower() != "none"
        if self.tls:
            self._kwargs["ssl_cert_reqs"] = target.param("ssl_cert_reqs", "required")
            for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
                if target.param(name):
                    self._kwargs[name] = target.param(name)
        self.client: redis.Redis | None = None
        self.server_version = ""

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        return Capabilities(
            native=frozenset({"get", "set", "delete", "exists", "get_many", "set_many", "incr"}),
        )

    def info(self) -> dict[str, Any]:
        return {
            "client": "redis-py",
            "client_version": redis.__version__,
            "hiredis": self.hiredis,
            "tls": self.tls,
            **({"tls_verify": self.tls_verify} if self.tls else {}),
            "unix_socket": self.socket_path is not None,
            **({"sentinel_service": self.service, "sentinels": len(self.sentinels), "primary": self.current_server()}
               if self.sentinels else {}),
            "server": "redis",
            "server_version": self.server_version,
        }

    def open(self) -> None:
        if self.client is not None:
            return
        if self.sentinels:
            from redis.sentinel import Sentinel

            manager = Sentinel(self.sentinels, sentinel_kwargs=self._sentinel_kwargs, **self._kwargs)
            client = manager.master_for(self.service)
            pool = client.connection_pool
        else:
            pool = redis.ConnectionPool(**self._kwargs)
            client = redis.Redis(connection_pool=pool)
        where = self.where
        try:
            client.ping()
            self.server_version = str(client.info("server").get("redis_version", ""))
        except redis.AuthenticationError as exc:
            pool.disconnect()
            raise BackendUnavailable(f"redis at {where}: authentication failed: {_one_line(exc)}") from None
        except redis.TimeoutError as exc:
            pool.disconnect()
            raise BackendUnavailable(f"redis at {where}: timed out: {_one_line(exc)}") from None
        except redis.ConnectionError as exc:
            pool.disconnect()
            raise BackendUnavailable(f"redis at {where}: cannot connect: {_one_line(exc)}") from None
        except redis.RedisError as exc:
            pool.disconnect()
            # e.g. "NOAUTH Authentication required" or a password sent to a server without one
            raise BackendUnavailable(f"redis at {where}: {_one_line(exc)}") from None
        self._bind(client, client.mget)

    def _bind(self, client: Any, mget: Any) -> None:
        """Bound methods looked up once: the per-op path is a single redis-py call."""
        self.client = client
        self._get = client.get
        self._set = client.set
        self._delete = client.delete
        self._exists = client.exists
        self._mget = mget
        self._incrby = client.incrby

    def current_server(self, key: str | None = None) -> str | None:
        """Where writes go now: the primary the Sentinels named at the last (re)connect."""
        if not self.sentinels or self.client is None:
            return self.where if self.client is not None else None
        address = getattr(self.client.connection_pool, "master_address", None)
        return f"{address[0]}:{address[1]}" if address else None

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()
            client.connection_pool.disconnect()

    def get(self, key: str) -> bytes | None:
        return self._get(key)

    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        if ttl is None:
            self._set(key, value)
        else:
            self._set(key, value, px=max(1, int(ttl * 1000)))

    def delete(self, key: str) -> bool:
        return self._delete(key) > 0

    def exists(self, key: str) -> bool:
        return self._exists(key) > 0

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        return {key: value for key, value in zip(keys, self._mget(keys), strict=True) if value is not None}

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        pipe = self.client.pipeline(transaction=False)  # type: ignore[union-attr]
        if ttl is None:
            for key, value in items.items():
                pipe.set(key, value)
        else:
            px = max(1, int(ttl * 1000))
            for key, value in items.items():
                pipe.set(key, value, px=px)
        pipe.execute()

    def incr(self, key: str, delta: int = 1) -> int:
        return self._incrby(key, delta)

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        removed = 0
        try:
            if self.client is None:
                self.open()
            client = self.client
            assert client is not None
            pattern = _GLOB_SPECIAL.sub(r"\\\1", self.namespace) + "*"
            batch: list[bytes] = []
            for key in client.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= _UNLINK_BATCH:
                    removed += client.unlink(*batch)
                    batch.clear()
            if batch:
                removed += client.unlink(*batch)
        except Exception as exc:  # noqa: BLE001 - redis-py already reconnected once; say what is left
            left = f"keys of namespace {self.namespace} ({removed:,} removed before)"
            raise cleanup_failed(f"redis at {self.where}", exc, left) from None
        return removed
