"""The load on a driver in another stack (``?client=ruby-rails``, …): the application's own client.

run/driver.py owns the driver protocol and its processes; here it is one load path among the
others (docs/drivers.md).
"""

from __future__ import annotations

from .driver import run_driver_phases
from .load_path import LoadPath, Run
from .outcome import LoadResult


class OtherStackDriver(LoadPath):
    """One driver process per worker, started from ``drivers/<stack>/``."""

    def run_phases(self, run: Run) -> LoadResult:
        return run_driver_phases(run.target, run.workload, run.namespace, run.outcome.backend, run.monitor,
                                 run.progress)
