"""The native load engine, seen from Python: one call runs a whole load test.

:func:`run_load` hands a config dict to the Rust engine (``cachemark._engine``; see
docs/engine.md for every key) and returns its result dict: ``wall_s``,
``client_cpu_s``, ``ops`` (one OpResult per op, docs/contracts.md), wire bytes,
``interrupted``, ``stopped_on_errors`` (why the on-error policy ended the run, or None),
``missed`` (open loop: ops due but never sent) and ``errors_sample``. :func:`target_config` turns a
``redis://…?client=engine`` / ``memcached://…?client=engine`` target into the
connection part of that config. :class:`Histogram` is the engine's HDR histogram,
usable by the Python workers so both sides produce the same, mergeable histograms.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import BackendUnavailable, SpecError
from .schemes import scheme, unix_socket
from .target import Target, parse_target

try:
    from ._engine import Histogram
    from ._engine import run_load as _run_load
except ImportError as exc:  # pragma: no cover - only without a built extension
    raise ImportError("cachemark._engine is not built; run `maturin develop --release -m engine/Cargo.toml`") from exc

__all__ = ["Histogram", "run_load", "target_config", "PROTOCOLS"]

PROTOCOLS = ("resp2", "resp3", "memcache_text", "memcache_meta")


def run_load(config: dict[str, Any]) -> dict[str, Any]:
    """Run one load test on the native engine and return its result.

    Raises :class:`SpecError` for an invalid config and :class:`BackendUnavailable`
    when a server cannot be reached, refuses the credentials, or speaks another
    protocol. Ctrl-C ends the run early; the result then has ``"interrupted": True``.
    With ``on_error: "stop"`` (the default) a run whose ops all failed for ``error_grace_s``
    stops too, and says why in ``"stopped_on_errors"``.
    """
    try:
        text = json.dumps(config)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"engine config is not JSON-serialisable: {exc}") from None
    try:
        out = _run_load(text)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    except ConnectionError as exc:
        raise BackendUnavailable(str(exc)) from None
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


def target_config(target: str | Target) -> dict[str, Any]:
    """The connection part of an engine config for a target URL.

    ``redis://[user:pass@]host:port[/db][?protocol=resp3]``,
    ``memcached://h1:11211,h2:11211[?protocol=meta]``, ``redis+cluster://seed1:7000,seed2:7001`` (``cluster``:
    keys are routed by hash slot over the primaries the seeds name) and their Unix-socket forms
    (``redis+unix:///path.sock?db=N``: the engine's server is then ``unix:/path.sock``); ``rediss://``
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
        db = t.param("db", "") if row.unix else t.path.strip("/")
        if db:
            if not db.isdigit():
                raise SpecError(f"{t.redacted}: database {db!r} must be a number")
            cfg["db"] = int(db)
        cfg["username"] = t.username
        cfg["password"] = t.password
        if row.cluster:
            cfg["cluster"] = True  # the hosts are seeds: the engine asks one for the slot map
            if cfg.pop("db", 0):
                raise SpecError(f"{t.redacted}: a Redis Cluster has database 0 only")
        elif len(t.hosts) > 1:
            raise SpecError(f"{t.redacted}: the engine takes one Redis server (a cluster's seeds: redis+cluster://)")
    elif family == "memcache":
        proto = (t.param("protocol") or "text").lower()
        cfg["protocol"] = {"text": "memcache_text", "meta": "memcache_meta"}.get(proto, proto)
        if cfg["protocol"] not in ("memcache_text", "memcache_meta"):
            raise SpecError(f"{t.redacted}: protocol must be text or meta")
    else:
        raise SpecError(f"{t.redacted}: the native engine speaks redis:// and memcached:// only")
    default_port = row.default_port or (6379 if family == "resp" else None)
    hosts = t.hosts or (("127.0.0.1", None),)
    if row.unix:
        cfg["servers"] = [f"unix:{unix_socket(t)}"]
    else:
        cfg["servers"] = [f"{h}:{p or default_port}" if ":" not in h else f"[{h}]:{p or default_port}"
                          for h, p in hosts]
    if row.tls or (family == "memcache" and t.bool_param("tls")):
        cfg["tls"] = tls_config(t)
    for knob in ("threads", "connections", "pipeline"):
        value = t.int_param(knob)
        if value is not None:
            cfg[knob] = value
    return cfg
