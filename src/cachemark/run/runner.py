"""Running one workload against one target from this host.

The run sequence (run/sequence.py) is the same for every run; what this module decides is
where a single-host run's phases run: the native engine for ``?client=engine``, a driver in
another stack for ``?client=<driver>``, else this host's Python worker processes.
"""

from __future__ import annotations

from typing import Any

from ..spec import Workload
from ..target import Target, parse_target
from .load_path import LoadPath, ProgressFn
from .outcome import RunOutcome
from .preflight import check_ops, uses_engine, written_keys
from .sequence import run_sequence

__all__ = ["ProgressFn", "RunOutcome", "check_ops", "local_load_path", "run_target", "written_keys"]


def local_load_path(target: Target) -> LoadPath:
    """Where a run's phases run on this host, as the target's ``client`` parameter says."""
    if uses_engine(target):
        from .load_engine import NativeEngine

        return NativeEngine()
    from .driver import driver_for

    if driver_for(target) is not None:  # a program in another stack runs the load (docs/drivers.md)
        from .load_driver import OtherStackDriver

        return OtherStackDriver()
    from .load_workers import PythonWorkers

    return PythonWorkers()


def run_target(target: Target | str, workload: Workload, label: str | None = None,
               progress: ProgressFn | None = None, network: Any = None, sample_server: bool = True) -> RunOutcome:
    """Run ``workload`` against ``target`` (parsed by the plan; a URL string is parsed here,
    for callers outside one); a missing server binary yields a skipped outcome."""
    target = parse_target(target) if isinstance(target, str) else target
    return run_sequence(target, workload, local_load_path(target), label, progress, network, sample_server)
