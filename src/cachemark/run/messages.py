"""What a worker process tells the parent, one typed message per event.

They cross a multiprocessing queue (pickled), so they are plain frozen dataclasses.
A worker sends, in order: a :class:`PhaseReport` per timed phase it ran, at most one
:class:`Fatal`, and always a final :class:`Done`.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any, Literal

from ..measure.summary import OpRecord

FatalKind = Literal["user", "crash", "killed"]  # killed: by a signal (the OOM killer, a user)


@dataclass(frozen=True)
class PhaseReport:
    """One worker's measurement of one timed phase."""

    worker: int
    index: int  # the phase's position in the workload
    start_ns: int
    end_ns: int
    cpu_s: float
    ops: dict[str, OpRecord]  # by op name (histograms encoded)
    interrupted: bool
    missed: int  # open loop: ops due before the deadline that were never sent
    error_samples: list[str]
    timeseries: list[dict[str, Any]]
    # windows of failing writes (measure/outage.py), perf_counter_ns like start_ns
    write_outages: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Fatal:
    """The worker cannot go on: a user error (one line, exit 2), a crash (a bug: exit 70), or
    killed from outside (the run failed)."""

    worker: int
    message: str
    kind: FatalKind
    traceback: str = ""


@dataclass(frozen=True)
class Done:
    """The worker has finished (whatever happened) and closed its backend."""

    worker: int
    pid: int


Message = PhaseReport | Fatal | Done


def death(exitcode: int | None) -> str:
    """How a process ended, for a message: "killed by SIGKILL" or "exit code 3"."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            pass
    return f"exit code {exitcode}"
