"""The preflight: what a run checks before anything starts, and the keys its cleanup removes.

Every load path (Python workers, the native engine, a driver, Dask agents) is checked and
cleaned up through the target's Python client: an unsupported op or a wrong URL fails
before any load starts, and cleanup removes only the run's own namespace.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..backends import backend_class
from ..errors import UnsupportedOp
from ..spec import Workload
from ..target import Target, with_params
from ..workload.keys import key_lengths, key_name
from ..workload.ops import mix_entries
from .write_probe import probe_key

ENGINE_ONLY_PARAMS = ("client", "threads", "connections", "pipeline", "protocol")


def uses_engine(target: Target) -> bool:
    return target.param("client") == "engine"


def preflight_target(target: Target) -> Target:
    """The target as its Python client reaches it: the engine path still checks and cleans up through it."""
    if not uses_engine(target):
        return target
    return with_params(target, {k: v for k, v in target.params.items() if k not in ENGINE_ONLY_PARAMS})


def check_ops(target: Target, workload: Workload) -> dict[str, Any]:
    """Refuse, before anything runs, a workload that asks for ops the backend lacks."""
    capabilities = backend_class(target).capabilities(target)
    if workload.tags is not None and target.param("tags"):
        capabilities.tags = target.param("tags")
    from .driver import driver_for

    driver = driver_for(target)
    if workload.tags is not None and driver is not None and driver.tags:
        capabilities.tags = capabilities.tags or "driver"  # the driver tags by its framework's own scheme
    for phase in workload.effective_phases():
        for entry in mix_entries(phase.mix or workload.mix):
            for op in entry.steps:
                if op == "clean":
                    if workload.tags is None:
                        raise UnsupportedOp("the clean op needs tagged entries: set workload.tags")
                    if not capabilities.tags:
                        raise UnsupportedOp(
                            f"{target.redacted}: clean-by-tag is not supported; add ?tags=versioned to the URL"
                        )
                elif not capabilities.supports(op):
                    raise UnsupportedOp(f"{target.redacted}: backend {target.scheme!r} does not support {op!r}")
    return capabilities.to_json()


def written_keys(namespace: str, workload: Workload, target: Target | None = None) -> Iterator[str]:
    """Every key a run may have written (for backends that cannot enumerate theirs), with the
    bookkeeping keys of the target's driver's tag scheme."""
    yield probe_key(namespace)
    lengths = key_lengths(workload.key_size)
    for i in range(workload.keys):
        yield key_name(namespace, i, lengths)
    if any("incr" in name for phase in workload.effective_phases() for name in (phase.mix or workload.mix)):
        for i in range(workload.keys):
            yield f"{namespace}n:{i}"
    if workload.tags is not None:  # tags=versioned keeps one version key per tag of the pool
        from ..backends.tags import version_key

        for j in range(workload.tags.pool):
            yield version_key(namespace, f"t{j}")
        from .driver import driver_for

        driver = driver_for(target) if target is not None else None
        if driver is not None and driver.tag_keys is not None:
            per_item, per_tag = driver.tag_keys
            yield from (per_item.format(ns=namespace, i=i) for i in range(workload.keys))
            yield from (per_tag.format(ns=namespace, j=j) for j in range(workload.tags.pool))
