"""Putting a run behind a network profile: one latency proxy per server the target uses.

The lab's proxy (``cachemark.lab.proxy``) sits between the client and each host of
the target URL (several for a memcached pool; S3's ``endpoint_url``); the rewritten URL
sends every connection through it. What the proxy was asked for and what it counted go
into the run's ``network`` record.
"""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import quote

from ..errors import SpecError
from ..schemes import network_schemes, scheme
from ..target import Target, parse_target, rebuilt, with_params


def through_network(stack: contextlib.ExitStack, target: Target, profile: Any) -> tuple[Target, list[Any]]:
    """The target rewritten to go through proxies playing ``profile``, and the proxies."""
    from ..lab.proxy import start_proxy

    row = scheme(target.scheme, target.redacted)
    if row.unix:
        tcp = target.scheme.split("+")[0]
        raise SpecError(f"{target.redacted}: a network profile puts a TCP proxy in front of the server, which "
                        f"cannot listen for a Unix socket; use a {tcp}:// target (or drop --network)")
    if row.failover_grace is not None:
        raise SpecError(f"{target.redacted}: a network profile's proxy would stand in front of the Sentinels, not "
                        "of the primary they name; give --network the primary's redis:// URL instead")
    if row.proxy_param:
        endpoint = target.param(row.proxy_param)
        if not endpoint:
            raise SpecError(f"{target.redacted}: a network profile needs {row.proxy_param} (a local server)")
        server = parse_target(endpoint)
        proxy = stack.enter_context(start_proxy(server.host, server.port(80), profile))
        new_endpoint = f"{server.scheme}://{proxy.host}:{proxy.port}{quote(server.path)}"
        return with_params(target, {**target.params, row.proxy_param: new_endpoint}), [proxy]
    if row.cluster:
        raise SpecError(f"{target.redacted}: a network profile's proxy cannot stand in front of a Redis Cluster "
                        "(its nodes give clients their own addresses: CLUSTER SLOTS, MOVED); drop --network")
    if row.default_port is None:
        raise SpecError(
            f"{target.redacted}: network profiles apply to network targets "
            f"({', '.join(network_schemes())}), not to {target.scheme}://"
        )
    proxies = []
    hosts = []
    for host, port in target.hosts or (("127.0.0.1", None),):
        proxy = stack.enter_context(start_proxy(host, port or row.default_port, profile))
        proxies.append(proxy)
        hosts.append((proxy.host, proxy.port))
    return rebuilt(target, hosts=hosts), proxies


def network_record(profile: Any, proxies: list[Any]) -> dict[str, Any]:
    return {
        "profile": profile.name,
        **profile.describe(),
        "proxied": any(p.proxied for p in proxies),
        "proxy_stats": [p.stats() for p in proxies if p.proxied],
    }
