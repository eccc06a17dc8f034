"""Distributed runs: one experiment driven from many Dask workers, merged into one exact result.

The coordinator (this module, in the ``cachemark run --cluster …`` process) owns the cluster
connection (``tcp://scheduler:8786``, or ``local:N`` for a LocalCluster of N worker
processes), the load path of a distributed run (:class:`ClusterAgents`: the target is
provided, checked, probed and cleaned up by the run sequence every run shares,
:mod:`.sequence`; here it is prefilled once, before any agent starts), the split of the
load (each agent a disjoint slice of the global worker indices; open-loop rates and op
budgets divided to match), the clocks (an NTP-style offset
per agent from round trips), the synchronised start of every timed phase (a barrier of "ready"
messages, then one start instant on the coordinator's clock), fault handling (an agent that
dies or never joins is named, never waited for beyond bounded timeouts), and the merge:
HDR histograms added, counters summed, per-second series aligned on the coordinator's start
— never a percentile averaged. What runs on each agent is :mod:`.agent`.

Cluster URL parameters: ``agents=K`` (use K workers of an existing cluster), ``measure=R`` (one
more agent runs open loop at R ops/s with one worker, and its latencies are reported apart
from the load agents': mutilate's split), ``join_timeout=S`` (default 60 s), ``connect_timeout=S``
(default 5 s).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import Crash, PrefillFailed, UserError
from ..measure.histogram import Histogram
from ..measure.summary import OpRecord, merge_ops, merge_timeseries
from ..results.phase_record import PhaseRecord
from ..spec import Workload
from ..target import Target, split_query
from ..textfile import one_line
from ..workload.ops import split_ops
from .load_path import LoadPath, ProgressFn, Run
from .messages import (
    AgentBeat,
    AgentDied,
    AgentDone,
    AgentEnded,
    AgentError,
    AgentHello,
    AgentPhase,
    AgentReady,
    AgentStarted,
    AgentStatus,
    agent_event,
)
from .outcome import INTERRUPTED, LoadResult, RunOutcome, engine_info
from .preflight import uses_engine
from .sequence import run_sequence

BEAT_TIMEOUT_S = 5.0  # an agent silent this long (its task beats every second) is gone
SKEW_FLAG_S = 0.001  # a clock offset above this is flagged in the results and on the terminal
CLOCK_ROUNDS = 15
# Dask's own housekeeping, made rarer: its sampling profiler (every 10 ms), memory monitor
# (100 ms), system monitor and event-loop tick cost CPU the load's workers then lack.
# Applied to our LocalCluster; for `dask worker` processes set them in their dask config
# (docs/distributed.md).
QUIET_DASK = {
    "distributed.worker.profile.enabled": False,
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.admin.system-monitor.gil.enabled": False,
    "distributed.admin.tick.interval": "500ms",
}


@dataclass
class ClusterSpec:
    """``--cluster`` parsed: ``local:N[?…]`` or ``tcp://host:port[?…]``."""

    text: str
    kind: str  # local | tcp
    address: str  # the scheduler's address, or "local:N"
    local_workers: int = 0
    agents: int | None = None
    measure_rate: float | None = None
    join_timeout: float = 60.0
    connect_timeout: float = 5.0


def parse_cluster(text: str) -> ClusterSpec:
    base, params = split_query(text)  # read as a target URL's query is
    known = {"agents", "measure", "join_timeout", "connect_timeout"}
    unknown = sorted(set(params) - known)
    if unknown:
        raise UserError(f"--cluster {one_line(text, 80)}: unknown parameter {unknown[0]!r} "
                        f"(allowed: {', '.join(sorted(known))})")
    try:
        agents = int(params["agents"]) if "agents" in params else None
        measure = float(params["measure"]) if "measure" in params else None
        join = float(params.get("join_timeout", 60))
        connect = float(params.get("connect_timeout", 5))
    except ValueError:
        raise UserError(f"--cluster {one_line(text, 80)}: agents must be a whole number, measure, "
                        "join_timeout and connect_timeout numbers") from None
    if (agents is not None and agents < 1) or (measure is not None and measure <= 0) or join <= 0 or connect <= 0:
        raise UserError(f"--cluster {one_line(text, 80)}: agents, measure and timeouts must be positive")
    if base.startswith("local:"):
        count = base.removeprefix("local:")
        if not count.isdigit() or not 1 <= int(count) <= 64:
            raise UserError(f"--cluster {one_line(text, 80)}: local:N needs N from 1 to 64 worker processes")
        return ClusterSpec(text, "local", base, int(count), agents, measure, join, connect)
    if base.startswith(("tcp://", "tls://", "ws://", "wss://", "inproc://", "ucx://")):
        return ClusterSpec(text, "tcp", base, 0, agents, measure, join, connect)
    raise UserError(f"--cluster {one_line(text, 80)}: give a scheduler address (tcp://host:8786) or local:N")


@dataclass
class Cluster:
    """A connected cluster: the client, and the LocalCluster we started (if any)."""

    spec: ClusterSpec
    client: Any
    local: Any = None

    def workers(self) -> list[str]:
        return sorted(self.client.scheduler_info(n_workers=-1)["workers"])


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise UserError("--cluster needs Dask's distributed: pip install 'cachemark[distributed]'") from None
    return distributed


def connect(text: str) -> Cluster:
    """Connect to (or start) the cluster; one line (UserError) when it cannot be reached."""
    spec = parse_cluster(text)
    distributed = _import_distributed()
    # a refused connection is our one line; a scheduler call cut short by Ctrl-C is no traceback
    for name in ("distributed", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if spec.kind == "local":
        import dask

        dask.config.set(QUIET_DASK)  # the worker processes get the config from their nannies
        # A terminal's Ctrl-C reaches the whole process group: our worker processes must not die
        # of it (with tracebacks) before the agents report; we stop them. Blocked here, the
        # signals stay blocked in the event-loop thread started now and in every process it
        # spawns (the agents unblock them for themselves).
        from multiprocessing import resource_tracker

        terminal = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, terminal)
        try:
            resource_tracker.ensure_running()  # its start unblocks SIGINT and SIGTERM: now, not later
            signal.pthread_sigmask(signal.SIG_BLOCK, terminal)
            local = distributed.LocalCluster(n_workers=spec.local_workers, threads_per_worker=1, processes=True,
                                             host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR,
                                             # no dashboard, and its health endpoint on any free port
                                             scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
        except Exception as exc:  # noqa: BLE001 — the user's environment: one line
            raise UserError(f"cannot start a local Dask cluster of {spec.local_workers}: "
                            f"{one_line(f'{type(exc).__name__}: {exc}', 200)}") from None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        client = distributed.Client(local, timeout=f"{spec.connect_timeout}s")
        return Cluster(spec, client, local)
    try:
        client = distributed.Client(spec.address, timeout=f"{spec.connect_timeout}s")
    except Exception as exc:  # noqa: BLE001 — OSError, TimeoutError, a protocol mismatch: one line
        raise UserError(f"cannot reach the Dask scheduler at {spec.address}: "
                        f"{one_line(f'{type(exc).__name__}: {exc}', 200)}") from None
    return Cluster(spec, client)


def close(cluster: Cluster) -> None:
    with contextlib.suppress(Exception):
        cluster.client.close(timeout=5)
    if cluster.local is not None:
        with contextlib.suppress(Exception):
            cluster.local.close(timeout=10)


@contextlib.contextmanager
def cluster_session(text: str | None) -> Iterator[Cluster | None]:
    """``cachemark run --cluster``: the cluster every run of the experiment goes through (handed to
    run/experiment.py), closed after; none without ``--cluster``."""
    if not text:
        yield None
        return
    cluster = connect(text)
    try:
        yield cluster
    finally:
        close(cluster)


# --- one run -------------------------------------------------------------------------------


@dataclass
class DistributedOutcome(RunOutcome):
    # the Dask cluster's agents, hosts and clocks (``run.dask``; a Redis Cluster's figures are ``phase.cluster``)
    dask: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "dask": self.dask}


@dataclass
class _Agent:
    index: int
    role: str  # load | measure
    worker: str  # the Dask worker's address
    first: int = 0
    count: int = 0
    host: str = ""
    hostname: str = ""
    cpus: int | None = None
    pid: int | None = None
    offset_s: float = 0.0
    rtt_s: float = 0.0
    state: str = "pending"  # pending | joined | done | died | never joined
    reason: str = ""
    status: str = "ok"
    last_seen: float = 0.0
    ready: set[int] = field(default_factory=set)
    ended: set[int] = field(default_factory=set)
    records: dict[int, PhaseRecord] = field(default_factory=dict)
    lags: dict[int, float] = field(default_factory=dict)
    done_ops: int = 0
    cpu_s: float | None = None
    error: AgentError | None = None  # what it reported when its run ended in an error

    @property
    def alive(self) -> bool:
        return self.state in ("pending", "joined")

    @property
    def name(self) -> str:
        where = self.hostname or self.host or self.worker
        return f"agent {self.index} ({where}, {self.worker}" + (f", pid {self.pid})" if self.pid else ")")


def clock_offsets(client: Any, workers: list[str], rounds: int = CLOCK_ROUNDS) -> dict[str, tuple[float, float]]:
    """Per worker: (offset, round trip) of its wall clock against ours, NTP-style: the offset
    from the round with the shortest trip, (worker time) − (midpoint of our send and receive)."""
    best: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):
        for worker in workers:
            t0 = time.time()
            theirs = client.run(time.time, workers=[worker])[worker]
            t1 = time.time()
            rtt = t1 - t0
            if worker not in best or rtt < best[worker][1]:
                best[worker] = (theirs - (t0 + t1) / 2, rtt)
    return best


def _host_info() -> dict[str, Any]:
    import os
    import socket

    return {"hostname": socket.gethostname(), "cpus": os.cpu_count(), "pid": os.getpid()}


def _check_distributable(target: Target, workload: Workload, network: Any, capabilities: dict[str, Any],
                         spec: ClusterSpec) -> None:
    if network is not None:
        raise UserError("--network and --cluster together are not supported: run the proxy where the agents are")
    if not capabilities.get("shared", True):
        raise UserError(f"{target.redacted}: each process has its own cache there; a distributed run needs a "
                        "server every agent reaches")
    if spec.measure_rate is not None and any(p.duration is None for p in workload.effective_phases()):
        raise UserError("--cluster …?measure=R needs phases that end by duration (the measuring agent runs "
                        "alongside them)")


def slices(workers: int, agents: int) -> list[tuple[int, int]]:
    """(first, count) of global worker indices per agent: disjoint, contiguous, together all."""
    out, first = [], 0
    for i in range(agents):
        count = split_ops(workers, i, agents) or 0
        out.append((first, count))
        first += count
    return out


def agent_workload(workload: Workload, first: int, count: int, engine: bool, index: int) -> dict[str, Any]:
    """What one load agent runs. Python path: the global workload (its workers take their global
    indices, so rates, op budgets and key streams split exactly as on one host). Engine path: a
    share of it — ``count`` of ``workers`` connections, the rate and op budget in proportion,
    and its own seed (the engine's streams are per seed, not per worker index)."""
    phases = workload.effective_phases()
    if not engine:
        return workload.model_copy(update={"prefill": False, "phases": phases}).model_dump(mode="json")
    total = workload.workers
    shared = []
    for phase in phases:
        ops = sum(split_ops(phase.ops, w, total) or 0 for w in range(first, first + count)) if phase.ops else None
        rate = phase.rate * count / total if phase.rate else None
        shared.append(phase.model_copy(update={"ops": ops or (None if phase.ops is None else 1), "rate": rate}))
    return workload.model_copy(update={"prefill": False, "phases": shared, "workers": count,
                                       "seed": workload.seed + 7919 * index}).model_dump(mode="json")


def measure_workload(workload: Workload, rate: float, index: int) -> dict[str, Any]:
    phases = [p.model_copy(update={"rate": rate, "ops": None}) for p in workload.effective_phases()]
    return workload.model_copy(update={"prefill": False, "phases": phases, "workers": 1,
                                       "seed": workload.seed + 7919 * index}).model_dump(mode="json")


def _agent_target(target: Target, engine: bool, count: int, total: int, role: str) -> str:
    """The engine's ``connections=`` (a total, like ``--workers``) split as the workers are."""
    if not engine:
        return target.url
    connections = target.int_param("connections")
    if role == "measure":
        connections = 1
    elif connections is not None:
        connections = max(1, round(connections * count / total))
    if connections is None:
        return target.url
    from ..target import with_params

    return with_params(target, {**target.params, "connections": str(connections)}).url


def prefill_once(target: Target, workload: Workload, namespace: str, shared: bool) -> None:
    """The coordinator writes every key once, before any agent starts (never timed)."""
    if not workload.prefill:
        return
    phases = workload.effective_phases()
    if uses_engine(target):
        from .engine_runner import _run_untimed, phase_config

        config = phase_config(target, workload, phases[0], namespace, True)
        _run_untimed({**config, "warmup_s": 0.0})
        return
    from .worker import Worker, WorkerTask

    worker = Worker(WorkerTask(target, namespace, workload.model_dump(), 0, 1, shared))
    worker.backend.open()
    try:
        worker.prefill()
    finally:
        worker.backend.close()


class ClusterAgents(LoadPath):
    """A distributed run's load path: the cluster's agents, each a slice of the workers, every
    phase started together; the coordinator prefills once, before any agent starts."""

    outcome_class = DistributedOutcome

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def check(self, target: Target, workload: Workload, capabilities: dict[str, Any], network: Any) -> None:
        _check_distributable(target, workload, network, capabilities, self.cluster.spec)

    def prefill(self, run: Run) -> None:
        try:
            prefill_once(run.target, run.workload, run.namespace, run.shared)
        except PrefillFailed as exc:  # named by the user's URL, as a single-host run's refusals are
            raise PrefillFailed(f"{run.outcome.target}: {exc}") from None

    def run_phases(self, run: Run) -> LoadResult:
        got = _Run(self.cluster, run.target, run.workload, run.namespace, run.outcome.target, run.progress,
                   run.monitor, run.shared).run()
        if uses_engine(run.target):
            return replace(got, client_info=engine_info(run.outcome.backend.info))
        return got


def run_distributed(cluster: Cluster, target: Target | str, workload: Workload, label: str | None = None,
                    progress: ProgressFn | None = None, network: Any = None) -> RunOutcome:
    """Run ``workload`` against ``target`` from the cluster's agents; one merged outcome."""
    return run_sequence(target, workload, ClusterAgents(cluster), label, progress, network)


class _Run:
    """One distributed run: submit the agents, hold the barrier of every phase, merge."""

    def __init__(self, cluster: Cluster, target: Target, workload: Workload, namespace: str,
                 named: str, progress: ProgressFn | None, monitor: Any, shared: bool) -> None:
        self.cluster, self.client, self.spec = cluster, cluster.client, cluster.spec
        self.target, self.workload, self.namespace = target, workload, namespace
        self.named, self.progress, self.monitor, self.shared = named, progress, monitor, shared  # named: redacted
        self.engine = uses_engine(target)
        self.phases = workload.effective_phases()
        self.go: dict[int, float] = {}
        self.interrupted = False
        run_id = uuid.uuid4().hex[:10]
        self.names = {"up": f"cachemark-{run_id}-up", "go": f"cachemark-{run_id}-go",
                      "stop": f"cachemark-{run_id}-stop"}

    # -- set-up ---------------------------------------------------------------------
    def _agents(self) -> list[_Agent]:
        spec = self.spec
        # agents=K: K load agents (and one more to measure); local:N: N workers in all; else every worker
        wanted = spec.agents + (1 if spec.measure_rate else 0) if spec.agents else spec.local_workers
        if wanted:
            try:
                self.client.wait_for_workers(wanted, timeout=spec.join_timeout)
            except Exception:  # noqa: BLE001 — TimeoutError: say how many came
                raise UserError(f"the Dask cluster at {spec.address} has {len(self.cluster.workers())} workers "
                                f"after {spec.join_timeout:g} s; this run needs {wanted}") from None
        workers = self.cluster.workers()
        if not workers:
            raise UserError(f"the Dask cluster at {spec.address} has no workers")
        if wanted:
            workers = workers[:wanted]
        load = workers[:-1] if spec.measure_rate else workers
        if not load:
            raise UserError("--cluster …?measure=R needs at least two workers: one measures, the others load")
        if self.workload.workers < len(load):
            raise UserError(f"--workers {self.workload.workers} is fewer than the cluster's {len(load)} load agents: "
                            f"give --workers {len(load)} or more (workers are split over agents)")
        agents = [_Agent(i, "load", w, *cut) for i, (w, cut) in enumerate(zip(load, slices(self.workload.workers,
                                                                                         len(load))))]
        if spec.measure_rate:
            agents.append(_Agent(len(load), "measure", workers[-1], 0, 1))
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        hosts = self.client.run(_host_info, workers=[a.worker for a in agents])
        offsets = clock_offsets(self.client, [a.worker for a in agents])
        for a in agents:
            a.host = info.get(a.worker, {}).get("host", "")
            a.hostname = hosts[a.worker]["hostname"]
            a.cpus = hosts[a.worker]["cpus"]
            a.offset_s, a.rtt_s = offsets[a.worker]
        return agents

    def _spec(self, a: _Agent) -> dict[str, Any]:
        if a.role == "measure":
            workload = measure_workload(self.workload, self.spec.measure_rate or 1.0, a.index)
            first, count, total = 0, 1, 1
        else:
            workload = agent_workload(self.workload, a.first, a.count, self.engine, a.index)
            first, count, total = a.first, a.count, self.workload.workers
            if self.engine:
                first, total = 0, count
        return {
            "agent": a.index, "role": a.role, "names": self.names, "engine": self.engine,
            "target": _agent_target(self.target, self.engine, a.count, self.workload.workers, a.role),
            "namespace": self.namespace, "workload": workload, "shared": self.shared,
            "workers": [first, count], "total_workers": total,
            "clock": {"offset_s": a.offset_s, "rtt_s": a.rtt_s},
        }

    # -- the run --------------------------------------------------------------------
    def run(self) -> LoadResult:
        distributed = _import_distributed()
        from .agent import run_agent

        self.agents = agents = self._agents()
        self.up = distributed.Queue(self.names["up"], client=self.client)
        self.stop = distributed.Event(self.names["stop"], client=self.client)
        submitted = time.monotonic()
        for a in agents:
            a.last_seen = submitted
        self.futures = {
            a.index: self.client.submit(run_agent, self._spec(a), key=f"cachemark-agent-{self.names['up']}-{a.index}",
                                        workers=[a.worker], allow_other_workers=False, pure=False, retries=0)
            for a in agents
        }
        try:
            self._phases()
        except KeyboardInterrupt:
            self.interrupted = True
        finally:
            self.stop.set()
            self._wait(lambda: not any(a.alive for a in agents), 20.0, progress_of=None)
            for a in agents:
                if a.alive:
                    a.state, a.reason = "died", a.reason or "did not stop within 20 s of the run's end"
            for future in self.futures.values():
                with contextlib.suppress(Exception):
                    future.cancel()
            for k in self.go:
                with contextlib.suppress(Exception):
                    distributed.Variable(f"{self.names['go']}-{k}", client=self.client).delete()
        return self._finish()

    def _phases(self) -> None:
        distributed = _import_distributed()
        for k, phase in enumerate(self.phases):
            limit = self.spec.join_timeout + (phase.warmup or 0) + (0 if k == 0 else self._phase_cap(k - 1))
            self._wait(lambda k=k: all(k in a.ready or not a.alive for a in self.agents), limit,
                       progress_of=k - 1 if k else None)
            late = [a for a in self.agents if a.alive and k not in a.ready]
            for a in late:
                a.state = "never joined" if not a.pid else "died"
                a.reason = (f"never joined: not ready within {self.spec.join_timeout:g} s" if not a.pid else
                            f"not ready for phase {phase.name!r} in time")
            if k == 0 and any(a.state == "never joined" for a in self.agents):
                # a run short of agents would measure a smaller load than asked: it fails, named
                distributed.Variable(f"{self.names['go']}-{k}", client=self.client).set(
                    {"abort": "an agent never joined"})
                self.go[k] = time.time()
                return
            if not any(a.alive and a.role == "load" for a in self.agents):
                return
            self.monitor.phase_coming(k)
            self.monitor.phase_started(k)
            lead = max(0.2, 4 * max(a.rtt_s for a in self.agents))
            at = time.time() + lead
            self.go[k] = at
            distributed.Variable(f"{self.names['go']}-{k}", client=self.client).set({"at": at})
            self._wait(lambda k=k: all(k in a.ended or not a.alive for a in self.agents if a.role == "load"),
                       self._phase_cap(k), progress_of=k)
            self.monitor.phase_ended(k, sum(a.done_ops for a in self.agents if a.role == "load"))
        self._wait(lambda: not any(a.alive for a in self.agents), 60.0 + 10 * len(self.agents), progress_of=None)

    def _phase_cap(self, k: int) -> float:
        """How long a phase may take before it counts as hung: generous, but bounded."""
        phase = self.phases[k]
        return (phase.duration or 3600.0) * 2 + 60.0

    def _wait(self, until: Callable[[], bool], limit: float, progress_of: int | None) -> None:
        deadline = time.monotonic() + limit
        while not until() and time.monotonic() < deadline:
            self._pump()
            if progress_of is not None and self.progress is not None and progress_of in self.go:
                phase = self.phases[progress_of]
                self.progress(phase.name, sum(a.done_ops for a in self.agents if a.role == "load"), phase.ops,
                              max(0.0, time.time() - self.go[progress_of]), phase.duration)

    def _pump(self) -> None:
        try:  # a long poll on the scheduler (cheap), then whatever else is queued
            messages = [self.up.get(timeout=0.25)]
            messages += self.up.get(batch=True)
        except TimeoutError:
            messages = []
        except Exception:  # noqa: BLE001 — the scheduler went away: the agents are gone with it
            messages = []
            time.sleep(0.25)
        now = time.monotonic()
        for m in messages:
            a = self.agents[m["agent"]]
            a.last_seen = now
            self._take(a, m)
        for a in self.agents:
            future = self.futures[a.index]
            if a.alive and future.status in ("error", "cancelled", "lost"):
                a.state, a.reason = "died", f"its Dask task failed ({future.status})"
            elif a.state == "joined" and now - a.last_seen > BEAT_TIMEOUT_S:
                a.state, a.reason = "died", f"silent for {BEAT_TIMEOUT_S:g} s (its Dask worker is gone)"
            elif a.state == "pending" and now - a.last_seen > self.spec.join_timeout:
                a.state, a.reason = "never joined", f"never joined: no word within {self.spec.join_timeout:g} s"

    def _take(self, a: _Agent, m: dict[str, Any]) -> None:
        try:
            event = agent_event(m)
        except ValueError:  # not one of ours (a newer agent's event): nothing this coordinator acts on
            return
        match event:
            case AgentHello():
                a.pid, a.state = event.pid, "joined" if a.alive else a.state
                a.hostname = event.host or a.hostname
            case AgentReady():
                a.ready.add(event.phase)
            case AgentStarted():
                a.lags[event.phase] = event.lag_s
            case AgentEnded():
                a.ended.add(event.phase)
            case AgentBeat():
                a.done_ops = event.done
            case AgentPhase():
                a.records[event.phase] = PhaseRecord.from_wire(event.record)
                a.ended.add(event.phase)
            case AgentStatus():
                a.status, a.reason = event.status, event.reason
            case AgentError():
                a.error = event
            case AgentDone():
                a.cpu_s = event.cpu_s
                if a.alive:
                    a.state = "done"
            case AgentDied() if a.alive:
                a.state, a.reason = "died", event.message

    # -- the merge ------------------------------------------------------------------
    def _finish(self) -> LoadResult:
        load = [a for a in self.agents if a.role == "load"]
        crashes = [a.error for a in self.agents if a.error and a.error.kind == "crash"]
        merged = []
        for k, phase in enumerate(self.phases):
            if k not in self.go:
                break
            parts = [(a, a.records[k]) for a in load if k in a.records]
            if not parts:
                continue
            merged.append(self.monitor.attach(k, self._merge(k, phase, parts)))
        extra = {"dask": self._dask_record()}
        if crashes and not merged:
            raise Crash(f"{self.named}: agent: {crashes[0].message}", crashes[0].traceback)
        users = [a.error for a in self.agents if a.error and a.error.kind == "user"]
        if users and not merged:
            raise UserError(f"{self.named}: {users[0].message}")
        lost = [a for a in self.agents if a.state in ("died", "never joined")]
        if lost:
            kept = "; no phase was measured" if not merged else (
                f"; the results keep the data of the {len([a for a in load if a not in lost])} other agents "
                "(phases name who is missing)")
            return LoadResult(merged, "failed", "; ".join(f"{a.name} {a.reason}" for a in lost) + kept, extra=extra)
        if self.interrupted or any(a.status == "interrupted" for a in self.agents):
            return LoadResult(merged, "interrupted", INTERRUPTED, extra=extra)
        if crashes or users:
            error = (crashes or users)[0]
            return LoadResult(merged, "failed", f"agent: {error.message}", extra=extra)
        if any(a.status == "failed" for a in self.agents):
            a = next(a for a in self.agents if a.status == "failed")
            return LoadResult(merged, "failed", f"{a.name}: {a.reason}", extra=extra)
        return LoadResult(merged, extra=extra)

    def _coordinator_time(self, a: _Agent, wall: float | None) -> float:
        assert wall is not None  # an agent's gate sends where each phase began and ended on its clock
        return wall - a.offset_s

    def _merge(self, k: int, phase: Any, parts: list[tuple[_Agent, PhaseRecord]]) -> PhaseRecord:
        starts = [self._coordinator_time(a, r.start_wall) for a, r in parts]
        ends = [self._coordinator_time(a, r.end_wall) for a, r in parts]
        wall_s = max(ends) - min(starts)
        series = []
        for (_, r), start in zip(parts, starts):  # aligned on the coordinator's start of the phase
            shift = int((start - self.go[k]) // 1) if start > self.go[k] else 0
            series.append([{**s, "t": s["t"] + shift} for s in r.timeseries if "histogram" in s])
        return PhaseRecord(
            name=phase.name,
            mode="open" if phase.rate else "closed",
            rate=phase.rate,
            workers=self.workload.workers,
            workers_reported=sum(r.workers if r.workers_reported is None else r.workers_reported for _, r in parts),
            wall_s=wall_s,
            client_cpu_s=sum(r.client_cpu_s for _, r in parts),
            interrupted=any(r.interrupted for _, r in parts),
            stopped_on_errors=next((r.stopped_on_errors for _, r in parts if r.stopped_on_errors), None),
            missed=sum(r.missed for _, r in parts),
            error_samples=[s for _, r in parts for s in r.error_samples][:5],
            ops=merge_ops([r.ops for _, r in parts], wall_s),
            timeseries=merge_timeseries(series) if series else [],
            agents=[self._agent_row(a, r) for a, r in parts],
            agents_reported=len(parts),
            agents_missing=[a.name for a in self.agents if a.role == "load" and k not in a.records],
            engine=_engines([r.engine for _, r in parts if r.engine]),
            measuring_agent=self._measuring(k),
        )

    def _measuring(self, k: int) -> dict[str, Any] | None:
        """The measuring agent's share of phase ``k`` (its latencies apart from the load), if it sent one."""
        measuring = [(a, a.records[k]) for a in self.agents if a.role == "measure" and k in a.records]
        if not measuring:
            return None
        a, r = measuring[0]
        ops = merge_ops([r.ops], r.wall_s)
        return {"agent": a.index, "rate": self.spec.measure_rate, "wall_s": r.wall_s,
                "ops": {name: op.to_json() for name, op in ops.items()}, "row": self._agent_row(a, r)}

    def _agent_row(self, a: _Agent, r: PhaseRecord) -> dict[str, Any]:
        count = r.total_ops
        wall = r.wall_s or 0.0
        return {
            "agent": a.index, "role": a.role, "host": a.host, "hostname": a.hostname, "worker": a.worker,
            "workers": [a.first, a.count], "ops": count, "ops_per_s": count / wall if wall else 0.0,
            "wall_s": wall, "client_cpu_s": r.client_cpu_s,
            "cpu_cores": r.client_cpu_s / wall if wall else None,
            "hits": sum(op.hits or 0 for op in r.ops.values()),
            "misses": sum(op.misses or 0 for op in r.ops.values()),
            "missed": r.missed, "start_lag_ms": _ms(r.start_lag_s),
            "schedule_lag_us": schedule_lag_us(r.ops),
            # the agent's own counters and encoded histograms: the merge above is their exact sum
            "op_results": {name: replace(op, summary=None, summary_uncorrected=None).to_json()
                           for name, op in r.ops.items()},
        }

    def _dask_record(self) -> dict[str, Any]:
        distributed = _import_distributed()
        agents = []
        for a in self.agents:
            agents.append({
                "agent": a.index, "role": a.role, "worker": a.worker, "host": a.host, "hostname": a.hostname,
                "cpus": a.cpus, "pid": a.pid, "workers": [a.first, a.count], "state": a.state,
                "status": a.status, "reason": a.reason or None, "cpu_s": a.cpu_s,
                "clock_offset_ms": a.offset_s * 1000, "clock_rtt_ms": a.rtt_s * 1000,
                "clock_uncertainty_ms": a.rtt_s / 2 * 1000,
                "clock_skew_flagged": skewed(a.offset_s, a.rtt_s),
                "start_lag_ms": {self.phases[k].name: v * 1000 for k, v in sorted(a.lags.items())},
            })
        return {
            "address": self.spec.address, "kind": self.spec.kind, "dask": distributed.__version__,
            "agents": agents, "hosts": sorted({f"{a.hostname} ({a.host})" for a in self.agents}),
            "measure_rate": self.spec.measure_rate, "prefill": "coordinator",
            "split": "global worker indices" if not self.engine else "engine connections, rate and ops in proportion",
            "skewed": [a.index for a in self.agents if skewed(a.offset_s, a.rtt_s)],
            "lost": [a.name for a in self.agents if a.state in ("died", "never joined")],
        }


def skewed(offset_s: float, rtt_s: float) -> bool:
    """A clock offset known to exceed 1 ms: beyond the estimate's own uncertainty (half the
    round trip: the path there and the path back need not take equal times)."""
    return abs(offset_s) - rtt_s / 2 > SKEW_FLAG_S


def _engines(engines: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The agents' engines as one: the first one's settings, their connections and wire bytes added."""
    if not engines:
        return None
    return {**engines[0], "connections": sum(e.get("connections") or 0 for e in engines),
            "wire_bytes_out": sum(e.get("wire_bytes_out") or 0 for e in engines),
            "wire_bytes_in": sum(e.get("wire_bytes_in") or 0 for e in engines)}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def schedule_lag_us(ops: dict[str, OpRecord]) -> float | None:
    """Open loop: the mean time an op waited behind its schedule — the corrected latency's mean
    (from the intended start) less the uncorrected one's (from the actual send)."""
    corrected, uncorrected = Histogram(), Histogram()
    for op in ops.values():
        if not op.histograms_uncorrected:
            return None
        for encoded in op.histograms.values():
            corrected.add(Histogram.decode(encoded))
        for encoded in op.histograms_uncorrected.values():
            uncorrected.add(Histogram.decode(encoded))
    if not corrected.total:
        return None
    return (corrected.mean - uncorrected.mean) / 1000
