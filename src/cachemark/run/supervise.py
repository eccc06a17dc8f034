"""One host's worker processes, supervised through a run's phases.

The parent of the Python workers — ``cachemark run`` itself (run/load_workers.py), or an agent
running a slice of a distributed run (run/agent.py) — starts them from the fork server,
sits at their phase barrier (so the server is read as each phase starts), reads their
reports, answers a crash or a death by stopping them all, applies the on-error policy,
and turns Ctrl-C into a clean stop that keeps what was measured. :func:`supervise` does
all of that once for both; what it gathered is a :class:`Supervised`, from which each
caller makes its status and phase records.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_mod
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import PSEUDO_OPS
from ..errors import Crash, UserError
from ..procs import tasks_left
from ..results.phase_record import PhaseRecord
from ..spec import Workload
from .error_policy import ErrorWatch
from .forkserver import context
from .messages import Done, Fatal, PhaseReport, death
from .worker import Board, WorkerTask, worker_main

Tick = Callable[[int, int, int], None]  # (phase index, ops done so far in it, keys prefilled), about every 0.1 s


@dataclass
class Supervised:
    """What one host's workers reported: each phase's reports, the phases the on-error policy
    halted (and since when, wall clock), the fatal reports, and whether Ctrl-C cut the run."""

    watch: ErrorWatch
    per_phase: dict[int, list[PhaseReport]] = field(default_factory=dict)
    halted: dict[int, float] = field(default_factory=dict)
    fatal: list[Fatal] = field(default_factory=list)
    interrupted: bool = False

    def status(self, where: str, interrupted_reason: str) -> tuple[str, str]:
        """("ok" | "failed" | "interrupted", reason). A crash of ours raises :class:`Crash`, and a
        failure before any phase reported raises :class:`UserError` (one line); ``where`` leads both."""
        crashes = [f for f in self.fatal if f.kind == "crash"]
        if crashes:
            raise Crash(f"{where}{crashes[0].message}", crashes[0].traceback)
        if self.fatal and not self.per_phase:
            raise UserError(f"{where}{self.fatal[0].message}")
        if self.fatal:
            return "failed", self.fatal[0].message
        if self.interrupted and not self.halted:
            return "interrupted", interrupted_reason
        return "ok", ""

    def records(self, workload: Workload, monitor: Any,
                merge: Callable[[Any, list[PhaseReport], Workload], PhaseRecord]) -> list[PhaseRecord]:
        """Each phase that reported as one record (``merge``), with why the on-error policy
        stopped it, handed to ``monitor.attach`` (server figures, or the coordinator)."""
        phases = workload.effective_phases()
        records = []
        for i in sorted(self.per_phase):
            record = merge(phases[i], self.per_phase[i], workload)
            if i in self.halted:
                record = record.stopped(self.watch.reason(record, self.halted[i]))
            records.append(monitor.attach(i, record))
        return records


def supervise(tasks: list[WorkerTask], workload: Workload, monitor: Any, board_slots: int,
              tick: Tick | None = None) -> Supervised:
    """Run ``tasks`` (one worker process each) through every phase of ``workload``.

    ``monitor`` is told each phase's start and end (run/monitor.py's interface); the shared
    board has ``board_slots`` slots, indexed by each task's (global) worker number."""
    n = len(tasks)
    _check_room(n)
    ctx = context()
    results: Any = ctx.Queue()
    barrier = ctx.Barrier(n + 1)
    board = Board(ctx.RawArray("q", board_slots), ctx.RawArray("q", board_slots), ctx.RawArray("b", 1),
                  ctx.RawArray("q", board_slots))
    procs = {t.worker: ctx.Process(target=worker_main, args=(t, results, barrier, board), daemon=True) for t in tasks}
    got = Supervised(ErrorWatch(workload, tasks[0].target))
    phases = workload.effective_phases()
    clock = threading.Thread(target=_phase_clock, args=(barrier, len(phases), monitor), daemon=True)
    finished: set[int] = set()
    current = 0
    try:
        _start_workers(procs, n)
        clock.start()
        while len(finished) < n:
            _take_message(results, got, finished, board, barrier, procs)
            _reap_dead(results, got, finished, barrier, procs)
            if current not in got.halted and got.watch.should_stop(sum(board.done), sum(board.failed)):
                got.halted[current] = got.watch.failing_since_wall or time.time()
                board.halt[0] = 1
            if tick is not None:
                tick(current, sum(board.done), sum(board.prefilled))
            if len(got.per_phase.get(current, [])) == n:
                monitor.phase_ended(current, sum(op.count for part in got.per_phase[current]
                                                 for name, op in part.ops.items() if name not in PSEUDO_OPS))
                current += 1
                board.reset()
                got.watch.reset()
    except KeyboardInterrupt:
        got.interrupted = True
        board.halt[0] = 1  # for a worker whose SIGINT came before its handler
        _signal_all(procs.values(), signal.SIGINT)
        barrier.abort()  # workers not yet in a phase stop at the barrier instead of starting one
        _drain(results, got.per_phase, finished, list(procs.values()), timeout=10)
    finally:
        barrier.abort()  # releases the clock thread if a phase never started
        _join_workers(procs)
    return got


def _start_workers(procs: dict[int, Any], n: int) -> None:
    """Start every worker (``n`` in all) from the fork server.

    Ctrl-C waits until every worker has started: one half started (its pid unknown to us)
    would find the queue and barrier gone when it unpickles them."""
    with interrupts_deferred():
        for p in procs.values():
            try:
                p.start()
            except (OSError, EOFError) as exc:  # the fork server could not fork (and died): a host limit
                raise UserError(f"the host refused worker process {p.name} of {n} ({exc}): ask for fewer "
                                "workers") from None


def _take_message(results: Any, got: Supervised, finished: set[int], board: Board, barrier: Any,
                  procs: dict[int, Any]) -> None:
    """Wait up to 0.1 s for one worker message and act on it: a report is kept, a fatal one
    halts and interrupts every worker, a Done marks its worker finished."""
    try:
        message = results.get(timeout=0.1)
    except queue_mod.Empty:
        return
    if isinstance(message, PhaseReport):
        got.per_phase.setdefault(message.index, []).append(message)
        got.interrupted |= message.interrupted
    elif isinstance(message, Fatal):
        got.fatal.append(message)
        board.halt[0] = 1
        barrier.abort()
        _signal_all(procs.values(), signal.SIGINT)
    elif isinstance(message, Done):
        finished.add(message.worker)


def _reap_dead(results: Any, got: Supervised, finished: set[int], barrier: Any, procs: dict[int, Any]) -> None:
    """A worker gone without its Done is a fatal report of its own, once nothing it sent is
    left to read (its Done may be queued, or still in flight)."""
    dead = [w for w, p in procs.items() if not p.is_alive() and w not in finished]
    if dead and results.empty():  # else read what is queued first: its Done may be there
        time.sleep(0.2)  # its last messages may still be in flight
        if results.empty():
            code = procs[dead[0]].exitcode
            # killed by a signal (the OOM killer, a user): the run failed; an exit code: a bug of ours
            got.fatal.append(Fatal(dead[0], f"worker {dead[0]} died ({death(code)})",
                                   "killed" if code is not None and code < 0 else "crash"))
            barrier.abort()
            finished.update(dead)


def _join_workers(procs: dict[int, Any]) -> None:
    """Wait for every started worker to exit (5 s each), then kill what is left."""
    for p in procs.values():
        if p.pid is None:
            continue  # never started
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()


# A worker process holds two tasks (its main thread and the run watch); the parent adds a few
# threads of its own (the phase clock, the server's sampler) to what the fork server holds.
TASKS_PER_WORKER = 2
PARENT_TASKS = 8


def _check_room(workers: int) -> None:
    """One line, before any fork, where the host's process limit will not let the workers
    start: a fork refused inside multiprocessing's fork server kills it, and the run with it."""
    left = tasks_left()
    need = workers * TASKS_PER_WORKER + PARENT_TASKS
    if left is not None and need > left:
        most = max((left - PARENT_TASKS) // TASKS_PER_WORKER, 0)
        raise UserError(f"{workers} workers need about {need} processes and threads, and this host allows "
                        f"{left} more (a pids cgroup or RLIMIT_NPROC): ask for at most {most} workers")


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP noted, and raised as KeyboardInterrupt only at the end."""
    pending: list[int] = []
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, lambda signum, frame: pending.append(signum)) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if pending:
        raise KeyboardInterrupt


def _phase_clock(barrier, phases: int, monitor: Any) -> None:
    """The parent's seat at the workers' barrier: it learns the instant each phase starts.

    The server's start reading is taken once every worker waits at the barrier (none can
    send a timed op yet), so a phase of a few ops loses none of them to the reading."""
    workers = barrier.parties - 1
    for index in range(phases):
        monitor.phase_coming(index)
        while barrier.n_waiting < workers and not barrier.broken:
            time.sleep(0.001)  # only while workers prefill or warm up: nothing timed runs
        monitor.phase_started(index)
        try:
            barrier.wait(timeout=600)
        except threading.BrokenBarrierError:
            return


def _drain(results, per_phase, finished, procs, timeout: float) -> None:
    """After Ctrl-C: collect what the workers still send, until each is done or gone."""
    deadline = time.monotonic() + timeout
    while len(finished) < len(procs) and time.monotonic() < deadline:
        try:
            message = results.get(timeout=0.2)
        except (queue_mod.Empty, KeyboardInterrupt):
            if not any(p.pid is not None and p.is_alive() for p in procs):
                return  # nobody left to send anything
            continue
        if isinstance(message, PhaseReport):
            per_phase.setdefault(message.index, []).append(message)
        elif isinstance(message, Done):
            finished.add(message.worker)


def _signal_all(procs, sig) -> None:
    for p in procs:
        if p.is_alive() and p.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, sig)
