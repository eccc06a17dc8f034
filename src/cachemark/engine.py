"""The native load engine, seen from Python: one call runs a whole load test.

:func:`run_load` hands a config dict to the Rust engine (``cachemark._engine``; see
docs/engine.md for every key) and returns its result dict: ``wall_s``,
``client_cpu_s`` (and ``client_cpu_user_s``, its user-mode part), ``ops`` (one OpResult per op,
docs/contracts.md), wire bytes, ``interrupted``, ``stopped_on_errors`` (why the on-error policy ended the run, or None),
``missed`` (open loop: ops due but never sent), ``errors_sample``, and ``write_outages`` (each load thread's
windows of failing writes, on ``perf_counter_ns``'s clock, like ``start_ns``). :func:`target_config` turns a
``redis://…?client=engine`` / ``memcached://…?client=engine`` target into the
connection part of that config. :class:`Histogram` is the engine's HDR histogram,
usable by the Python workers so both sides produce the same, mergeable histograms.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .errors import BackendUnavailable, SpecError, UserError
from .schemes import scheme, sentinel_parts
from .target import Target, parse_target, rebuilt

try:
    from ._engine import Histogram
    from ._engine import run_load as _run_load
except ImportError as exc:  # pragma: no cover - only without a built extension
    raise ImportError("cachemark._engine is not built; run `maturin develop --release -m engine/Cargo.toml`") from exc

__all__ = ["Histogram", "run_load", "target_config", "PROTOCOLS"]

PROTOCOLS = ("resp2", "resp3", "memcache_text", "memcache_meta", "memcache_binary")


def run_load(config: dict[str, Any], progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run one load test on the native engine and return its result; ``progress``, when given, is
    told the requests answered so far about every 100 ms (what raises there is raised here, after
    the engine has stopped).

    Raises :class:`SpecError` for an invalid config and :class:`BackendUnavailable`
    when a server cannot be reached, refuses the credentials, or speaks another
    protocol, and :class:`UserError` when the host refuses a load thread (its thread or
    memory limit). Ctrl-C ends the run early; the result then has ``"interrupted": True``.
    With ``on_error: "stop"`` (the default) a run whose ops all failed for ``error_grace_s``
    stops too, and says why in ``"stopped_on_errors"``.
    """
    try:
        text = json.dumps(config)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"engine config is not JSON-serialisable: {exc}") from None
    raised: list[BaseException] = []

    def told(done: int) -> bool:
        """The engine stops when this says so: when ``progress`` raised."""
        try:
            progress(done)  # type: ignore[misc]
        except BaseException as exc:  # noqa: BLE001 — raised below, once the engine has stopped
            raised.append(exc)
        return bool(raised)

    try:
        out = _run_load(text, told if progress is not None else None)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    except ConnectionError as exc:
        raise BackendUnavailable(str(exc)) from None
    except OSError as exc:  # the host refused a load thread: fewer threads is the user's remedy
        raise UserError(str(exc)) from None
    if raised:
        raise raised[0]
    return json.loads(out)


def tls_config(t: Target) -> dict[str, Any]:
    """The engine's ``tls`` section from redis-py's URL parameters (``ssl_ca_certs``,
    ``ssl_certfile``, ``ssl_keyfile``, ``ssl_cert_reqs=none``); SNI is the URL's host."""
    reqs = (t.param("ssl_cert_reqs") or "required").lower()
    if reqs not in ("required", "none"):
        raise SpecError(f"{t.redacted}: ssl_cert_reqs must be required or none for the engine")
    tls: dict[str, Any] = {"verify": reqs == "required"}
    for param, key in (("ssl_ca_certs", "ca_file"), ("ssl_certfile", "cert_file"), ("ssl_keyfile", "key_file")):
        if t.param(param):
            tls[key] = t.param(param)
    return tls


def sentinel_primary(t: Target) -> Target:
    """The primary a ``redis+sentinel://`` target's Sentinels name now, as a ``redis://`` target.

    Asked here once, at the start (a wrong service or unreachable Sentinels are one line before
    anything runs); during the run the engine follows a failover itself: each reconnect asks the
    Sentinels of :func:`sentinel_config` again (docs/engine.md), as the Python path's redis-py does."""
    from redis.exceptions import RedisError
    from redis.sentinel import Sentinel

    sentinels, service, db = sentinel_parts(t)
    timeout = t.float_param("socket_timeout", 5.0)
    manager = Sentinel(sentinels, sentinel_kwargs={"socket_timeout": timeout, "socket_connect_timeout": timeout,
                                                   "password": t.param("sentinel_password") or None})
    try:
        host, port = manager.discover_master(service)
    except RedisError as exc:
        said = " ".join(str(exc).split())
        for secret in (t.param("sentinel_password"), t.password):
            if secret:  # redis-py's message shows each Sentinel connection's repr, password included
                said = said.replace(secret, "***")
        raise BackendUnavailable(f"{t.redacted}: the Sentinels name no primary for {service!r}: {said[:200]}") from None
    finally:
        for connection in manager.sentinels:
            connection.close()
    return rebuilt(t, scheme="redis", hosts=[(host, port)], path=f"/{db}")


def sentinel_config(t: Target) -> dict[str, Any]:
    """The engine's ``sentinel`` section: the Sentinels (``host:port``, asked in this order), the
    service name and the Sentinels' own password (``sentinel_password=``; never printed)."""
    sentinels, service, _ = sentinel_parts(t)
    section: dict[str, Any] = {"sentinels": [f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in sentinels],
                               "service": service}
    if t.param("sentinel_password"):
        section["password"] = t.param("sentinel_password")
    return section


def target_config(target: str | Target) -> dict[str, Any]:
    """The connection part of an engine config for a target URL.

    ``redis://[user:pass@]host:port[/db][?protocol=resp3]``,
    ``memcached://[user:pass@]h1:11211,h2:11211[?protocol=meta|binary]`` (credentials: SASL PLAIN over the
    binary protocol, which is then the default, as with ``binary=1``), ``redis+cluster://seed1:7000,seed2:7001``
    (``cluster``: keys are routed by hash slot over the primaries the seeds name; ``read_from_replicas=1``:
    reads rotate over each slot's primary and replicas, as redis-py's ROUND_ROBIN) and their Unix-socket forms
    (``redis+unix:///path.sock?db=N``: the engine's server is then ``unix:/path.sock``;
    ``redis+sentinel://s1,s2/mymaster/0``: the primary the Sentinels name now, asked here, and a ``sentinel``
    section the engine asks again at each reconnect, so it follows a failover); ``rediss://``
    and ``memcached://…?tls=1`` add a ``tls`` section (:func:`tls_config`);
    engine knobs given in the query (``threads``, ``connections``, ``pipeline``) are copied too.
    """
    t = parse_target(target) if isinstance(target, str) else target
    cfg: dict[str, Any] = {}
    row = scheme(t.scheme, t.redacted)
    family = row.engine
    if family == "resp":
        proto = (t.param("protocol") or "resp2").lower()
        cfg["protocol"] = {"2": "resp2", "3": "resp3"}.get(proto, proto)
        if cfg["protocol"] not in ("resp2", "resp3"):
            raise SpecError(f"{t.redacted}: protocol must be resp2 or resp3")
        if row.failover_grace is not None:
            cfg["sentinel"] = sentinel_config(t)
            t = sentinel_primary(t)  # a redis:// target of the primary, the Sentinels' database in its path
        server = t.endpoint()
        if server.db:
            cfg["db"] = server.db_number()
        cfg["username"] = server.username
        cfg["password"] = server.password
        if row.cluster:
            cfg["cluster"] = True  # the hosts are seeds: the engine asks one for the slot map
            if cfg.pop("db", 0):
                raise SpecError(f"{t.redacted}: a Redis Cluster has database 0 only")
            if t.bool_param("read_from_replicas"):  # reads rotate over a slot's primary and its replicas
                cfg["read_from_replicas"] = True
        elif len(t.hosts) > 1:
            raise SpecError(f"{t.redacted}: the engine takes one Redis server (a cluster's seeds: redis+cluster://)")
    elif family == "memcache":
        server = t.endpoint()
        sasl = server.username is not None or server.password is not None
        proto = (t.param("protocol") or ("binary" if sasl or t.bool_param("binary") else "text")).lower()
        cfg["protocol"] = {"text": "memcache_text", "meta": "memcache_meta", "binary": "memcache_binary"}.get(
            proto, proto)
        if cfg["protocol"] not in ("memcache_text", "memcache_meta", "memcache_binary"):
            raise SpecError(f"{t.redacted}: protocol must be text, meta or binary")
        if sasl:
            if cfg["protocol"] != "memcache_binary":
                raise SpecError(f"{t.redacted}: protocol={proto} with a user and password; memcached's SASL "
                                f"is binary-only (protocol=binary)")
            if not (server.username and server.password):
                raise SpecError(f"{t.redacted}: SASL needs both a user and a password "
                                f"(memcached://USER:PASSWORD@host)")
            cfg["username"] = server.username
            cfg["password"] = server.password
    else:
        raise SpecError(f"{t.redacted}: the native engine speaks redis:// and memcached:// only")
    if server.socket is not None:
        cfg["servers"] = [f"unix:{server.socket}"]
    else:  # every server, the row's default port where the URL gives none
        cfg["servers"] = [f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in server.hosts]
    if server.tls:
        cfg["tls"] = tls_config(t)
    for knob in ("threads", "connections", "pipeline"):
        value = t.int_param(knob)
        if value is not None:
            cfg[knob] = value
    return cfg
