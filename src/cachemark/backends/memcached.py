"""``memcached://h1:11211,h2:11211?client=pymemcache|pylibmc&timeout=…&connect_timeout=…`` — memcached
(``memcached+unix:///path/to/memcached.sock``: one server on a Unix domain socket).

Owns :class:`MemcachedBackend`. pymemcache (default) uses ``Client`` for one server and
``HashClient`` for several; pylibmc uses libmemcached (text protocol unless
``binary=true``, ketama consistent hashing when there are several servers). Both are
set up so errors surface: writes wait for the server's reply (pymemcache's default is
``noreply``, which would hide refused writes; ``noreply=true`` brings it back), and
HashClient neither retries nor silently answers "miss" for a failing server.

Credentials in the URL (``memcached://user:password@host:11211``, as managed memcached
services hand out) mean SASL PLAIN, which memcached speaks over its binary protocol
only: pylibmc does it (``binary=True, username=, password=``; it becomes the default
client then), pymemcache cannot and is refused in one line. pylibmc's wheels bundle
their own libsasl2, which looks for its mechanism plugins in ``/usr/lib64/sasl2`` and
reads ``SASL_PATH`` once, when pylibmc is imported: :func:`import_pylibmc` points it at
the system's plugin directory first, else PLAIN is missing and every connection fails
with "FAILED TO SEND AUTHENTICATION TO SERVER".

memcached cannot do everything natively: ``incr`` needs an existing key, so a missing
counter is created with ``add 0`` and incremented again; ``exists`` is a ``get``; and it
cannot list keys, so cleanup deletes the ``written_keys`` the runner passes in. The
cleanup connection sat idle through the run, so a server restart in between is normal:
a failed batch is retried once on a fresh connection, and if that fails too,
:class:`CleanupFailed` says how many keys of which namespace may remain.
"""

from __future__ import annotations

import math
import os
import ssl
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import BackendMissing, BackendUnavailable, SpecError
from ..schemes import drivers_of
from ..target import Target
from .base import Backend, Capabilities, CleanupFailed

_CLIENTS = ("pymemcache", "pylibmc")
_DELETE_BATCH = 1000
# where Linux distributions keep Cyrus SASL's mechanism plugins (Debian's multiarch directory first)
_SASL_PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/sasl2", "/usr/lib/aarch64-linux-gnu/sasl2", "/usr/lib64/sasl2",
                     "/usr/lib/sasl2")


def import_pylibmc() -> Any:
    """``import pylibmc``, with ``SASL_PATH`` set first (when unset) so its libsasl2 finds PLAIN."""
    if "pylibmc" not in sys.modules and not os.environ.get("SASL_PATH"):
        for directory in _SASL_PLUGIN_DIRS:
            if os.path.isdir(directory):
                os.environ["SASL_PATH"] = directory
                break
    import pylibmc

    return pylibmc


class WriteRejected(RuntimeError):
    """memcached answered a write with NOT_STORED (or the client reported it failed)."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _tls_context(target: Target) -> ssl.SSLContext:
    """``?tls=1``: the CA file (``ssl_ca_certs``, else the system's), a client certificate
    (``ssl_certfile`` + ``ssl_keyfile``), or no verification (``ssl_cert_reqs=none``), as redis-py names them."""
    try:
        context = ssl.create_default_context(cafile=target.param("ssl_ca_certs"))
        if (target.param("ssl_cert_reqs") or "required").lower() == "none":
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if target.param("ssl_certfile"):
            context.load_cert_chain(target.param("ssl_certfile"), target.param("ssl_keyfile"))
    except (OSError, ssl.SSLError) as exc:
        raise SpecError(f"{target.redacted}: TLS: {_one_line(exc)}") from None
    return context


def _name(server: tuple[str, int] | str) -> str:
    """``host:port``, or a socket's path."""
    return server if isinstance(server, str) else f"{server[0]}:{server[1]}"


def _expire(ttl: float | None) -> int:
    # memcached counts whole seconds and reads 0 as "never": round a TTL up, never down to 0.
    return 0 if ttl is None else max(1, math.ceil(ttl))


class MemcachedBackend(Backend):
    scheme = "memcached"

    def __init__(self, target: Target, namespace: str) -> None:
        super().__init__(target, namespace)
        self.server = target.endpoint()  # addresses (the row's default port), credentials, TLS
        # user:password in the URL: SASL PLAIN over the binary protocol, which only pylibmc speaks
        self.sasl = self.server.username is not None or self.server.password is not None
        default = "pylibmc" if self.sasl else "pymemcache"
        self.client_name = target.param("client", default) or default
        # a driver in another stack runs the load (run/driver.py); a Python client checks and cleans up
        if self.client_name in drivers_of("memcached"):
            self.client_name = default
        if self.client_name not in _CLIENTS:
            raise SpecError(
                f"{target.redacted}: client={self.client_name!r}; use one of {', '.join(_CLIENTS)}"
            )
        if self.sasl and self.client_name == "pymemcache":
            raise SpecError(f"{target.redacted}: pymemcache does not speak SASL (user:password needs memcached's "
                            f"binary protocol); use client=pylibmc or client=engine")
        if self.sasl and not (self.server.username and self.server.password):
            raise SpecError(f"{target.redacted}: SASL needs both a user and a password (memcached://USER:PASSWORD@host)")
        server = self.server
        # a server is (host, port), or a socket path: both clients take a string starting with "/" as one
        self.servers: list[Any] = [server.socket] if server.socket is not None else list(server.hosts)
        self.timeout = target.float_param("timeout", 5.0)
        self.connect_timeout = target.float_param("connect_timeout", 2.0)
        self.no_delay = target.bool_param("no_delay", True)
        self.noreply = target.bool_param("noreply", False)
        self.binary = target.bool_param("binary", self.sasl)
        if self.sasl and not self.binary:
            raise SpecError(f"{target.redacted}: binary=0 with a user and password; memcached's SASL is binary-only")
        self.tls = target.bool_param("tls", False)
        self.tls_verify = self.tls and (target.param("ssl_cert_reqs") or "required").lower() != "none"
        self.tls_context = _tls_context(target) if self.tls else None
        if self.tls and self.client_name == "pylibmc":
            raise SpecError(f"{target.redacted}: pylibmc does not speak TLS; use client=pymemcache or client=engine")
        self.client: Any = None
        self.server_versions: list[str] = []

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        return Capabilities(
            native=frozenset({"get", "set", "delete", "get_many", "set_many"}),
            emulated={
                "incr": "incr; on a missing key, add '0' then incr again (two or three round trips)",
                "exists": "get (the value travels back; memcached has no exists command)",
            },
        )

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "client": self.client_name,
            "servers": len(self.servers),
            "unix_socket": isinstance(self.servers[0], str),
            "tls": self.tls,
            **({"tls_verify": self.tls_verify} if self.tls else {}),
            "sasl": self.sasl,
            "server": "memcached",
        }
        if self.client_name == "pymemcache":
            import pymemcache

            info.update(
                client_version=pymemcache.__version__,
                client_class="HashClient" if len(self.servers) > 1 else "Client",
                noreply=self.noreply,
                no_delay=self.no_delay,
            )
        else:
            pylibmc = import_pylibmc()

            info.update(
                client_version=pylibmc.__version__,
                libmemcached_version=pylibmc.libmemcached_version,
                binary=self.binary,
            )
        versions = sorted(set(self.server_versions))
        info["server_version"] = versions[0] if len(versions) == 1 else ",".join(versions)
        return info

    # -- lifecycle -------------------------------------------------------------------
    def open(self) -> None:
        if self.client is not None:
            return
        if self.client_name == "pymemcache":
            self._open_pymemcache()
        else:
            self._open_pylibmc()

    def _open_pymemcache(self) -> None:
        from pymemcache.client.base import Client
        from pymemcache.client.hash import HashClient

        options = {
            "connect_timeout": self.connect_timeout,
            "timeout": self.timeout,
            "no_delay": self.no_delay,
            "default_noreply": self.noreply,
            "tls_context": self.tls_context,
        }
        if len(self.servers) == 1:
            client: Any = Client(self.servers[0], **options)
            members = [(self.servers[0], client)]
        else:
            # retry_attempts=0 + dead_timeout=0: a failing server raises on every op
            # instead of being skipped (its keys would silently move or read as misses).
            client = HashClient(self.servers, retry_attempts=0, dead_timeout=0, ignore_exc=False, **options)
            members = [(server, client.clients[f"{server[0]}:{server[1]}"]) for server in self.servers]
        versions = []
        for server, member in members:
            try:
                versions.append(member.version().decode())
            except Exception as exc:  # OSError, socket.timeout, MemcacheError: the server does not answer
                client.close()
                raise BackendUnavailable(f"memcached at {_name(server)}: {_one_line(exc)}") from None
        self.server_versions = versions
        self.client = client
        self._members = [member for _, member in members]
        self._bind(client)
        self._not_found: tuple[type[BaseException], ...] = ()

    def _open_pylibmc(self) -> None:
        try:
            pylibmc = import_pylibmc()
        except ImportError as exc:
            raise BackendMissing(
                f"{self.target.redacted}: pylibmc is not installed (pip install pylibmc)"
            ) from exc
        behaviors: dict[str, Any] = {
            "tcp_nodelay": self.no_delay,
            "connect_timeout": int(self.connect_timeout * 1000),  # milliseconds
            "send_timeout": int(self.timeout * 1_000_000),  # microseconds
            "receive_timeout": int(self.timeout * 1_000_000),
        }
        if len(self.servers) > 1:
            behaviors["ketama"] = True
        credentials = {"username": self.server.username, "password": self.server.password} if self.sasl else {}
        client = pylibmc.Client([_name(server) for server in self.servers], binary=self.binary, behaviors=behaviors,
                                **credentials)
        try:
            stats = client.get_stats()
        except pylibmc.Error as exc:
            client.disconnect_all()
            if self.sasl and "AUTHENTICATION FAILURE" in str(exc):
                raise BackendUnavailable(f"memcached at {self._where()} refused the credentials of user "
                                         f"{self.target.username!r} (SASL PLAIN)") from None
            hint = " (with SASL on it needs memcached://USER:PASSWORD@host)" if self.binary and not self.sasl else ""
            raise BackendUnavailable(f"memcached at {self._where()}: {_one_line(exc)}{hint}") from None
        answered = {name.decode().split(" ")[0]: s for name, s in stats}
        for server in self.servers:
            # libmemcached names a socket server by its path (with a ":0" port on some versions)
            entry = answered.get(_name(server)) or (answered.get(f"{server}:0") if isinstance(server, str) else None)
            if entry is None:
                client.disconnect_all()
                raise BackendUnavailable(f"memcached at {_name(server)}: no answer to stats")
            self.server_versions.append(entry.get("version", b"").decode())
        self.client = client
        self._members = [client]
        self._bind(client)
        self._not_found = (pylibmc.NotFound,)

    def _where(self) -> str:
        return ",".join(_name(server) for server in self.servers)

    def _bind(self, client: Any) -> None:
        # Bound methods looked up once; the two clients share get/set/delete/add names.
        self._get = client.get
        self._set = client.set
        self._delete = client.delete
        self._add = client.add
        self._incr = client.incr
        if self.client_name == "pymemcache":
            self._get_many = client.get_many
            self._set_many = client.set_many
        else:
            self._get_many = client.get_multi
            self._set_many = client.set_multi

    def close(self) -> None:
        client, self.client = self.client, None
        if client is None:
            return
        if self.client_name == "pymemcache":
            client.close()
        else:
            client.disconnect_all()

    # -- the operations -------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        return self._get(key)

    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        # pymemcache returns True/False (None with noreply); pylibmc returns a bool.
        if self._set(key, value, _expire(ttl)) is False:
            raise WriteRejected(f"memcached did not store {key!r}")

    def delete(self, key: str) -> bool:
        return bool(self._delete(key))

    def exists(self, key: str) -> bool:
        return self._get(key) is not None

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        return self._get_many(keys)

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        failed = self._set_many(items, _expire(ttl))  # both clients return the keys not stored
        if failed:
            raise WriteRejected(f"memcached did not store {len(failed)} of {len(items)} keys")

    def incr(self, key: str, delta: int = 1) -> int:
        for _ in range(3):
            try:
                number = self._incr(key, delta)
            except self._not_found:  # pylibmc raises where pymemcache returns None
                number = None
            if number is not None:
                return int(number)
            # A concurrent worker may win the add; then our incr simply finds the key.
            self._add(key, b"0", 0)
        raise WriteRejected(f"memcached lost counter {key!r} between add and incr three times")

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        """Delete the run's written keys (memcached cannot enumerate); returns -1 (not counted)."""
        # never touch a key outside the namespace
        keys = (key for key in written_keys if key.startswith(self.namespace))
        batch: list[str] = []
        try:
            if self.client is None:
                self.open()
            for key in keys:
                batch.append(key)
                if len(batch) >= _DELETE_BATCH:
                    self._delete_with_retry(batch)
                    batch = []
            if batch:
                self._delete_with_retry(batch)
        except Exception as exc:  # noqa: BLE001 - any client's failure: say what may be left
            left = len(batch) + sum(1 for _ in keys)
            if isinstance(exc, BackendUnavailable):  # the reconnect failed: it names the server
                reason = str(exc)
            else:
                reason = f"memcached at {self._where()}: {_one_line(exc)}"
            raise CleanupFailed(
                f"cleanup failed: {reason}; up to {left:,} keys of namespace {self.namespace} may remain "
                f"(they expire or are evicted normally)"
            ) from None
        return -1

    def _delete_with_retry(self, keys: list[str]) -> None:
        try:
            self._delete_batch(keys)
        except Exception:  # noqa: BLE001 - e.g. the server restarted under an idle connection
            self.close()
            self.open()  # a fresh client; BackendUnavailable if the server is really gone
            self._delete_batch(keys)

    def _delete_batch(self, keys: list[str]) -> None:
        if self.client_name == "pymemcache":
            # Each member gets the whole batch in one pipelined write; keys it does not
            # own answer NOT_FOUND. Cheaper than HashClient.delete_many's per-key round trips.
            for member in self._members:
                member.delete_many(keys, noreply=False)
        else:
            self.client.delete_multi(keys)
