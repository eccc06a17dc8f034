"""What a worker process tells the parent, one typed message per event.

They cross a multiprocessing queue (pickled), so they are plain frozen dataclasses.
A worker sends, in order: a :class:`PhaseReport` per timed phase it ran, at most one
:class:`Fatal`, and always a final :class:`Done`.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

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


# --- a distributed run's agents ---------------------------------------------------------------
# What an agent process (run/agent.py) tells its Dask task, one JSON line each, and the task
# relays to the coordinator (run/distributed.py) through the run's Dask queue, with its agent's
# index. On the wire each is ``{"event": <its name>, **its fields}``: read back by
# :func:`agent_event`, which refuses a line that is not one of them.


@dataclass(frozen=True)
class AgentHello:
    event: ClassVar[str] = "hello"
    pid: int
    host: str | None = None
    cpus: int | None = None


@dataclass(frozen=True)
class AgentReady:
    """Its load waits for the coordinator's start of this phase."""

    event: ClassVar[str] = "ready"
    phase: int


@dataclass(frozen=True)
class AgentStarted:
    event: ClassVar[str] = "started"
    phase: int
    lag_s: float  # how late after the coordinator's start time it began


@dataclass(frozen=True)
class AgentEnded:
    event: ClassVar[str] = "ended"
    phase: int
    ops: int


@dataclass(frozen=True)
class AgentPhase:
    """Its record of a phase (PhaseRecord.to_wire: the coordinator merges, reading it with from_wire)."""

    event: ClassVar[str] = "phase"
    phase: int
    record: dict[str, Any]


@dataclass(frozen=True)
class AgentProgress:
    """Ops done so far (agent process → its task only; the task's beat carries the count on)."""

    event: ClassVar[str] = "progress"
    done: int


@dataclass(frozen=True)
class AgentBeat:
    """The task is alive (task → coordinator, every BEAT_S), with the ops its agent has done."""

    event: ClassVar[str] = "beat"
    done: int = 0


@dataclass(frozen=True)
class AgentStatus:
    event: ClassVar[str] = "status"
    status: Literal["failed", "interrupted"]
    reason: str


@dataclass(frozen=True)
class AgentError:
    event: ClassVar[str] = "error"
    kind: Literal["user", "crash"]
    message: str
    traceback: str = ""


@dataclass(frozen=True)
class AgentDone:
    event: ClassVar[str] = "done"
    cpu_s: float


@dataclass(frozen=True)
class AgentDied:
    """The task's word for an agent process that ended without its ``done``."""

    event: ClassVar[str] = "died"
    message: str
    stderr: list[str] = field(default_factory=list)


AgentEvent = (AgentHello | AgentReady | AgentStarted | AgentEnded | AgentPhase | AgentProgress | AgentBeat
              | AgentStatus | AgentError | AgentDone | AgentDied)
_AGENT_EVENTS: dict[str, type[AgentEvent]] = {
    cls.event: cls for cls in (AgentHello, AgentReady, AgentStarted, AgentEnded, AgentPhase, AgentProgress,
                               AgentBeat, AgentStatus, AgentError, AgentDone, AgentDied)}


def agent_wire(event: AgentEvent, **around: Any) -> dict[str, Any]:
    """``event`` as it travels: ``{**around, "event": name, **fields}`` (``around``: the agent's index)."""
    return {**around, "event": event.event, **{f.name: getattr(event, f.name) for f in fields(event)}}


def agent_event(wire: dict[str, Any]) -> AgentEvent:
    """The event a wire dict holds (its ``agent`` index aside); ValueError for anything else."""
    data = {k: v for k, v in wire.items() if k not in ("event", "agent")}
    cls = _AGENT_EVENTS.get(wire.get("event"))  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"not an agent event: {wire.get('event')!r}")
    try:
        return cls(**data)
    except TypeError as exc:  # a missing or unknown field
        raise ValueError(f"agent event {cls.event!r}: {exc}") from None
