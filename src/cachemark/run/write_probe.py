"""Does the target keep what it is given? One write, then one read, before the timed phases.

Reference 000's lesson: a misconfigured cache (Django's dummy backend, memcached with an
item size limit below the values) accepts every write and stores nothing, and its
timings look wonderful. A benchmark that does not check would rank it first. So before
the load, each run writes one value of the workload's largest size under its own
namespace and reads it back; a value that does not come back (or comes back different)
is recorded as ``dropped_writes`` in the run, named in the verdict, and makes the
command exit non-zero. The probe key is removed by the run's cleanup like every other.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..spec import Workload
from ..workload.values import ValueSizes, make_value, value_header, value_matches

PROBE_SUFFIX = "probe"


def probe_key(namespace: str) -> str:
    return f"{namespace}{PROBE_SUFFIX}"


def largest_value_size(workload: Workload) -> int:
    sizes = [ValueSizes.parse(workload.value_size).max]
    sizes += [ValueSizes.parse(p.value_size).max for p in workload.effective_phases()
              if getattr(p, "value_size", None)]
    return max(sizes)


def check_writes_kept(backend: Any, namespace: str, workload: Workload) -> str | None:
    """None when a written value reads back intact; otherwise what went wrong, in one sentence."""
    key = probe_key(namespace)
    size = largest_value_size(workload)
    header = value_header(key)
    backend.set(key, make_value(header, size), None)
    got = backend.get(key)
    with contextlib.suppress(Exception):  # the run's cleanup of its namespace removes it anyway
        backend.delete(key)
    if got is None:
        return (f"a {size:,}-byte value written without error was not there when read back: "
                "this cache drops writes (misconfigured, or values over its item size limit), "
                "so its timings are of a cache that stores nothing")
    if not value_matches(header, bytes(got)):
        return f"a {size:,}-byte value read back different from what was written ({len(got):,} bytes)"
    return None


def probe_writes(backend: Any, namespace: str, workload: Workload) -> str | None:
    """The probe as a run takes it: a probe that errors says nothing (the load will count the errors)."""
    try:
        return check_writes_kept(backend, namespace, workload)
    except Exception:  # noqa: BLE001 — the timed phases measure and report the same failure
        return None
