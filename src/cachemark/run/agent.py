"""What runs on an agent: one slice of a distributed run, on one Dask worker's host.

Two halves. :func:`run_agent` is the Dask task: it runs in a Dask worker's thread pool
(never on its event loop) and starts the agent proper as a plain subprocess,
``python -m cachemark.run.agent``, because a Dask worker under a nanny is a *daemonic*
process and multiprocessing refuses daemonic processes children (the Python path's
worker processes), and because a subprocess can be killed and accounted for (CPU) on its
own. The task relays between the subprocess (JSON lines on its stdin and stdout) and the
coordinator (``distributed`` Queue, Variable and Event objects, named per run):

    agent → coordinator   hello (pid, host, CPUs) · ready k · started k (start lag) · progress ·
                          ended k · phase k (the phase record: encoded HDR histograms, counters,
                          CPU, schedule lag, per-second series with their histograms) · error ·
                          done (the agent process's CPU) · died (exit status, stderr tail) · beat
    coordinator → agent   go k (a start time on the coordinator's clock; the task turns it into
                          this host's wall clock with the offset the coordinator measured) · stop

:func:`main` is the subprocess: the Python path runs a single-host run's supervision of worker
processes (forkserver, barrier, fault handling) over this agent's slice of the *global*
worker indices, so every key stream is the one a single-host run would use; the engine
path runs the engine runner's phases on a per-agent share of the workload. Both hold each
timed phase at its start until the coordinator's "go", then start at the given instant.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue as queue_mod
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from ..procs import stat_fields
from .messages import (
    AgentBeat,
    AgentDied,
    AgentDone,
    AgentEnded,
    AgentError,
    AgentEvent,
    AgentHello,
    AgentPhase,
    AgentProgress,
    AgentReady,
    AgentStarted,
    AgentStatus,
    agent_event,
    agent_wire,
    death,
)

if TYPE_CHECKING:
    from ..results.phase_record import PhaseRecord

BEAT_S = 1.0  # how often the task tells the coordinator it is alive (and its ops done)
GROUP_GRACE_S = 2.0  # how long a dead agent's resource tracker has to clean up (`_end_group`)


# --- the Dask task -------------------------------------------------------------------------


def run_agent(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one agent's slice in a subprocess; relay its events to the coordinator. Returns a short
    summary (the data itself travels through the coordinator's queue as it arrives)."""
    from distributed import Event, Queue

    agent = spec["agent"]
    up = Queue(spec["names"]["up"])
    stop = Event(spec["names"]["stop"])
    if stop.is_set():  # the run is already over (a task resubmitted after its worker was lost)
        return {"agent": agent, "exit": None}

    def send(event: AgentEvent) -> None:
        up.put(agent_wire(event, agent=agent))

    proc, lines, tail = _start_agent_process()
    _tell(proc, spec)
    finished = _relay(spec, proc, lines, send, stop)
    try:
        code = proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    if not finished:
        last_words = tail[-5:]
        _end_group(proc.pid)
        send(AgentDied(f"agent process {proc.pid} ended without reporting ({death(code)})", last_words))
    return {"agent": agent, "exit": code}


def _start_agent_process() -> tuple[subprocess.Popen[str], queue_mod.Queue[str | None], list[str]]:
    """The agent subprocess, with a thread queueing its stdout lines (None at the end) and one
    keeping the last 20 lines of its stderr (for a death's report)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cachemark.run.agent"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        # a process group of its own: a terminal's Ctrl-C does not reach it (we stop it), and killpg
        # ends its fork server and workers too; the same session: under CPU contention, a session
        # (an autogroup of the kernel's scheduler) per agent would give agents an unfair share
        stderr=subprocess.PIPE, text=True, bufsize=1, process_group=0,
        env=_agent_environment(),
    )
    lines: queue_mod.Queue[str | None] = queue_mod.Queue()
    tail: list[str] = []

    def read_out() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.put(line)
        lines.put(None)

    def read_err() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            tail.append(line.rstrip())
            del tail[:-20]

    threading.Thread(target=read_out, daemon=True).start()
    threading.Thread(target=read_err, daemon=True).start()
    return proc, lines, tail


def _tell(proc: subprocess.Popen[str], message: dict[str, Any]) -> None:
    """One JSON line to the agent process (nothing, once it is gone)."""
    with contextlib.suppress(OSError, ValueError):
        proc.stdin.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]


def _relay(spec: dict[str, Any], proc: subprocess.Popen[str], lines: queue_mod.Queue[str | None],
           send: Any, stop: Any) -> bool:
    """The relay loop: the agent's events up to the coordinator (its progress only as the beat's
    count), the coordinator's "go" (on this host's clock) or abort, and its stop, down to the agent;
    a beat every ``BEAT_S``. Ends with the agent's output, or a second after it exited (its last
    lines have that long to arrive). True when the agent said it was done."""
    from distributed import Variable

    waiting: int | None = None  # the phase whose "go" we wait for
    stopped = finished = False
    last_beat = 0.0
    done = 0
    exited_at: float | None = None
    while True:
        try:
            line = lines.get(timeout=0.1)
        except queue_mod.Empty:
            line = ""
            if proc.poll() is not None:  # gone: its last lines have a moment to arrive
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > 1.0:
                    break
        if line is None:
            break
        if line:
            event = _read_event(line)
            if isinstance(event, AgentReady):
                waiting = event.phase
            if isinstance(event, AgentProgress):
                done = event.done
            elif isinstance(event, AgentDone):
                finished = True
            if event is not None and not isinstance(event, AgentProgress):
                send(event)
        if waiting is not None:
            try:
                go = Variable(f"{spec['names']['go']}-{waiting}").get(timeout=0.05)
            except TimeoutError:
                go = None
            if go is not None:
                if go.get("abort"):
                    _tell(proc, {"stop": go["abort"]})
                    stopped = True
                else:
                    _tell(proc, {"go": waiting, "at": go["at"] + spec["clock"]["offset_s"]})
                waiting = None
        now = time.monotonic()
        if now - last_beat >= BEAT_S:
            last_beat = now
            send(AgentBeat(done))
            if not stopped and stop.is_set():
                _tell(proc, {"stop": "the coordinator stopped the run"})
                stopped = True
    return finished


def _read_event(line: str) -> AgentEvent | None:
    """The agent process's event on ``line``; None for anything else it printed (noise)."""
    try:
        wire = json.loads(line)
        return agent_event(wire) if isinstance(wire, dict) else None
    except ValueError:
        return None


def _end_group(group: int, grace_s: float = GROUP_GRACE_S) -> None:
    """End what is left of a dead agent's process group (the agent leads one of its own):
    its fork server and Python workers would wait out their barrier, or run ops, with nobody
    to report to, so they are killed at once — all but multiprocessing's resource tracker.

    The tracker, in the group too, is what unlinks the semaphores the agent created in
    /dev/shm (its queue's and barrier's), and it does so once every process holding it is
    gone. Killed with the rest, it left those names on the user's host (7 per dead agent);
    spared, it has ``grace_s`` to clean up and go before the group is killed whole."""
    members = _group_members(group)
    for pid in members or ():
        if not _is_resource_tracker(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + (grace_s if members else 0.0)
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _group_members(group: int) -> list[int] | None:
    """The processes of process group ``group`` (from /proc; None where there is none)."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    members = []
    for pid in pids:
        try:
            fields = stat_fields(pid)
        except (OSError, IndexError):
            continue  # gone meanwhile
        if len(fields) > 2 and int(fields[2]) == group:
            members.append(pid)
    return members


def _is_resource_tracker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"multiprocessing.resource_tracker" in f.read()
    except OSError:
        return False


def _agent_environment() -> dict[str, str]:
    """The Dask worker's environment without what its nanny set for Dask's own sake: a
    ``MALLOC_TRIM_THRESHOLD_`` of 64 KiB makes glibc hand memory back at every turn, which
    slows an allocating Python op loop (a single-host run has glibc's default)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        import dask

        for name, value in (dask.config.get("distributed.nanny.pre-spawn-environ") or {}).items():
            if name == "MALLOC_TRIM_THRESHOLD_" and env.get(name) == str(value):
                del env[name]
    except Exception:  # noqa: BLE001 — an unusual dask config: keep the environment as it is
        pass
    return env


# --- the agent process ---------------------------------------------------------------------


class _Out:
    """JSON lines to the task, one writer at a time (the clock thread and the main thread)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.lock = stream, threading.Lock()

    def __call__(self, event: AgentEvent) -> None:
        line = json.dumps(agent_wire(event))
        with self.lock, contextlib.suppress(OSError, ValueError):
            self.stream.write(line + "\n")
            self.stream.flush()


class Gate:
    """The runners' phase monitor, seen from an agent: each timed phase waits here for the
    coordinator's start time, then starts on it; its end and record go back to the coordinator.

    Commands come on stdin (read by a thread); "stop", or stdin closing (the task or its Dask
    worker is gone), interrupts this process as Ctrl-C would, so what was measured is kept."""

    def __init__(self, out: _Out, stdin: Any) -> None:
        self.out = out
        self.go: dict[int, float] = {}
        self.stopped: str | None = None
        self.changed = threading.Condition()
        self.started: dict[int, float] = {}  # phase -> this host's wall clock at its start
        self.lag: dict[int, float] = {}
        threading.Thread(target=self._listen, args=(stdin,), daemon=True).start()

    def _listen(self, stdin: Any) -> None:
        for line in stdin:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self.changed:
                if "go" in message:
                    self.go[int(message["go"])] = float(message["at"])
                if "stop" in message:
                    self.stopped = str(message["stop"])
                self.changed.notify_all()
            if "stop" in message:
                os.kill(os.getpid(), signal.SIGINT)
        with self.changed:
            if self.stopped is None:
                self.stopped = "the Dask task went away"
                self.changed.notify_all()
            else:
                return
        os.kill(os.getpid(), signal.SIGINT)

    # the PhaseMonitor interface (run/monitor.py) the runners call
    def phase_coming(self, index: int) -> None:
        pass

    def phase_started(self, index: int) -> None:
        self.out(AgentReady(index))
        with self.changed:
            self.changed.wait_for(lambda: index in self.go or self.stopped is not None)
            at = self.go.get(index)
        if at is None:
            return  # stopped: the SIGINT we sent ourselves ends the run
        while (left := at - time.time()) > 0:
            time.sleep(min(left, 0.05) if left > 0.002 else left)
        now = time.time()
        self.started[index] = now
        self.lag[index] = now - at
        self.out(AgentStarted(index, now - at))

    def phase_ended(self, index: int, total_ops: int) -> None:
        self.out(AgentEnded(index, total_ops))

    def attach(self, index: int, record: PhaseRecord) -> PhaseRecord:
        """The record goes to the coordinator (which samples the server once, not every agent), with
        how late this agent started it; the engine path's starts right after the gate opens."""
        if record.start_wall is None:
            start = self.started.get(index, time.time())
            record = record.on_agent_clock(start, start + record.wall_s)
        record = record.with_start_lag(self.lag.get(index))
        self.out(AgentPhase(index, record.to_wire()))
        return record

    def stop_all(self) -> None:
        pass


def _cpu_total() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _merge_keeping_seconds(merge: Any) -> Any:
    """The Python workers' phase merge (run/load_workers.py), plus what the coordinator needs for an exact
    merge across agents: the per-second series with their histograms, and the phase's start and end on
    this host's wall clock (from the workers' monotonic clock: CLOCK_MONOTONIC is one clock for every
    process of a host)."""

    def merged(phase: Any, parts: list[Any], workload: Any) -> PhaseRecord:
        from ..measure.summary import merge_seconds

        wall_now, mono_now = time.time(), time.perf_counter_ns()
        start_wall = wall_now - (mono_now - min(p.start_ns for p in parts)) / 1e9
        end_wall = wall_now - (mono_now - max(p.end_ns for p in parts)) / 1e9
        seconds = merge_seconds([part.timeseries for part in parts])
        return merge(phase, parts, workload).on_agent_clock(start_wall, end_wall, seconds)

    return merged


def _python_path(spec: dict[str, Any], gate: Gate, out: _Out) -> tuple[list[PhaseRecord], str, str]:
    from ..spec import Workload
    from ..target import parse_target
    from .worker import WorkerTask

    target = parse_target(spec["target"])
    workload = Workload.model_validate(spec["workload"])
    first, count = spec["workers"]
    tasks = [WorkerTask(target, spec["namespace"], spec["workload"], w, spec["total_workers"], spec["shared"])
             for w in range(first, first + count)]
    return supervise(tasks, workload, gate, out)


def supervise(tasks: list[Any], workload: Any, gate: Gate, out: _Out) -> tuple[list[PhaseRecord], str, str]:
    """The Python workers of this agent's slice of *global* worker indices (the shared board
    has a slot per global worker; deaths are told by worker id), with progress once a second.
    Returns (phase records, status, reason)."""
    from .load_workers import merge_phase
    from .supervise import supervise as supervise_workers

    last_progress = [0.0]

    def tick(current: int, done: int, prefilled: int) -> None:  # an agent's slice never prefills
        if time.monotonic() - last_progress[0] >= 1.0:
            last_progress[0] = time.monotonic()
            out(AgentProgress(done))

    got = supervise_workers(tasks, workload, gate, tasks[0].workers, tick)
    status, reason = got.status("", gate.stopped or "interrupted")
    return got.records(workload, gate, _merge_keeping_seconds(merge_phase)), status, reason


def _engine_path(spec: dict[str, Any], gate: Gate) -> list[PhaseRecord]:
    from ..spec import Workload
    from ..target import parse_target
    from .engine_runner import run_engine_phases

    return run_engine_phases(parse_target(spec["target"]), Workload.model_validate(spec["workload"]),
                             spec["namespace"], gate)


def main() -> None:
    """``python -m cachemark.run.agent``: one spec line on stdin, JSON-line events on stdout."""
    from ..errors import Crash, UserError

    # The protocol gets a descriptor of its own that no child inherits (os.dup's are not
    # inheritable), and fd 1 becomes stderr: a fork server or worker outliving us must not
    # hold the task's pipe open, and nothing else may write into the protocol.
    # A LocalCluster's workers run with the terminal's signals blocked (distributed.connect),
    # and so did we, from them: SIGINT is how a stop reaches this process.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    out = _Out(os.fdopen(os.dup(1), "w", buffering=1))
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    spec = json.loads(sys.stdin.readline())
    out(AgentHello(os.getpid(), socket.gethostname(), os.cpu_count()))
    gate = Gate(out, sys.stdin)
    cpu0 = _cpu_total()
    try:
        if spec["engine"]:
            _engine_path(spec, gate)
        else:
            _, status, reason = _python_path(spec, gate, out)
            if status != "ok":
                out(AgentStatus(status, reason))
    except KeyboardInterrupt:
        out(AgentStatus("interrupted", gate.stopped or "interrupted"))
    except UserError as exc:
        out(AgentError("user", str(exc)))
    except Crash as exc:
        out(AgentError("crash", str(exc), exc.details))
    except Exception as exc:  # noqa: BLE001 — reported to the coordinator, which decides
        out(AgentError("crash", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a late stop must not cut the last report
    out(AgentDone(_cpu_total() - cpu0))


if __name__ == "__main__":
    main()
