"""Providing a target: the reachable URL a run needs, and everything started for it.

``spawn:`` targets get a private server from the lab; embedded stores given without a
path get a temp dir; targets that contain targets (``twolevel://?fast=…&slow=…``, a
Django ``LOCATION`` or ``DATABASE``) have those provided the same way. Everything is
stopped or removed when the run ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

from .. import scratch
from ..lab import server_class
from ..lab.base import LocalServer
from ..schemes import scheme, split_spawn_params
from ..target import Target, names_a_target, parse_target, with_params


@contextlib.contextmanager
def provide(target: Target) -> Iterator[tuple[Target, list[LocalServer]]]:
    """Yield a reachable target and the servers started for it, stopping them afterwards.

    ``spawn:`` targets get a private server; embedded stores without a path get a temp
    dir; targets that contain targets (``twolevel://?fast=…&slow=…``, a Django
    ``LOCATION`` or ``DATABASE``) have those provided the same way.
    """
    with contextlib.ExitStack() as stack:
        servers: list[LocalServer] = []
        yield _provide(stack, target, servers), servers


def _provide(stack: contextlib.ExitStack, target: Target, servers: list[LocalServer]) -> Target:
    row = scheme(target.scheme, target.redacted)
    if row.spawner:
        options, for_client = split_spawn_params(target)
        server = server_class(target.path)(**options).start()
        stack.callback(server.stop)
        servers.append(server)
        inner = parse_target(server.url())
        return with_params(inner, {**inner.params, **for_client})
    if row.embedded is not None and not target.path.strip("/"):
        tmpdir = scratch.make(f"cachemark-{target.scheme}-")
        stack.callback(shutil.rmtree, tmpdir, ignore_errors=True)
        # a directory store gets one of its own: the temp dir also holds its stamp (scratch.py)
        path = os.path.join(tmpdir, row.embedded or "store")
        return with_params(parse_target(f"{target.scheme}://{path}"), target.params)
    nested = {k: v for k, v in target.params.items()
              if k in row.nested and names_a_target(v)}
    if not nested:
        return target
    params = dict(target.params)
    for key, value in nested.items():
        inner = _provide(stack, parse_target(value), servers)
        served = scheme(inner.scheme)
        if key == "LOCATION" and served.location == "hosts":  # Django wants memcached as host:port lists
            params[key] = ",".join(f"{h}:{p}" for h, p in inner.hosts)
        elif key == "LOCATION" and served.embedded is not None:  # ... and directories as paths
            params[key] = inner.path
        else:
            params[key] = inner.url
    return with_params(target, params)
