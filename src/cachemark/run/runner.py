"""Running one workload against one target: provide it, start workers, merge, clean up.

The runner owns the process choreography: a preflight connection (so a wrong URL or a
bad password fails before anything starts), N worker processes that meet on a barrier
before each timed phase, progress polling, and — whatever happens — cleanup of the
run's own namespace and of any server or temp directory it created.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..backends import backend_class, create_backend
from ..backends.base import CleanupFailed
from ..errors import BackendMissing, PrefillFailed, UnsupportedOp, UserError
from ..measure.outage import merge_outages
from ..measure.summary import merge_ops, merge_timeseries, summarize_ops
from ..plan import default_label
from ..schemes import scheme
from ..spec import Workload
from ..target import Target, parse_target, scrub
from ..workload.keys import key_lengths, key_name
from ..workload.ops import mix_entries
from ..workload.origin import remove_pool
from .messages import PhaseReport
from .monitor import PhaseMonitor
from .provide import provide
from .supervise import Tick, supervise
from .worker import WorkerTask
from .write_probe import check_writes_kept, probe_key

ProgressFn = Callable[[str, int, int | None, float, float | None], None]


@dataclass
class RunOutcome:
    """What one target's run produced (a RunResult in the results file)."""

    label: str
    target: str  # redacted
    status: str = "ok"  # ok | skipped | failed | interrupted
    reason: str = ""
    backend: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] | None = None
    network: dict[str, Any] | None = None
    phases: list[dict[str, Any]] = field(default_factory=list)
    dropped_writes: str | None = None  # the write-then-read probe's finding (run/write_probe.py)

    def to_json(self) -> dict[str, Any]:
        # scrub: client exceptions in reason/error_samples may echo a DSN or a password
        return scrub({
            "label": self.label, "target": self.target, "status": self.status, "reason": self.reason,
            "backend": self.backend, "server": self.server, "network": self.network, "phases": self.phases,
            "dropped_writes": self.dropped_writes,
        })


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


@contextlib.contextmanager
def _provide_origin(workload: Workload) -> Iterator[Workload]:
    """A ``spawn:postgresql?query=…`` origin gets its private server for the run (stopped after it);
    the workers then see a plain ``postgresql://…?query=…`` origin."""
    if not (workload.origin or "").startswith("spawn:"):
        yield workload
        return
    from ..lab import server_class
    from ..workload.origin import spawned_origin

    kind = workload.origin.split(":", 1)[1].split("?", 1)[0]
    server = server_class(kind)().start()
    try:
        yield workload.model_copy(update={"origin": spawned_origin(workload.origin, server.url())})
    finally:
        server.stop()


def run_target(target: Target | str, workload: Workload, label: str | None = None,
               progress: ProgressFn | None = None, network: Any = None, sample_server: bool = True) -> RunOutcome:
    """Run ``workload`` against ``target`` (parsed by the plan; a URL string is parsed here,
    for callers outside one); a missing server binary yields a skipped outcome."""
    target = parse_target(target) if isinstance(target, str) else target
    label = label or default_label(target)
    outcome = RunOutcome(label=label, target=target.redacted_whole)  # whole, not cut as in messages
    try:
        with provide(target) as (reachable, servers), _provide_origin(workload) as workload:
            outcome.server = servers[0].describe() if len(servers) == 1 else None
            if len(servers) > 1:
                outcome.server = {"servers": [s.describe() for s in servers]}
            outcome.backend["capabilities"] = check_ops(_preflight_target(reachable), workload)
            pid = servers[0].pid() if len(servers) == 1 else None
            # samples the server itself, not the proxy; a Sentinel target's primary as named at the start
            monitor = PhaseMonitor(_sampled_url(reachable) if sample_server else reachable.url, pid, sample_server)
            with contextlib.ExitStack() as network_stack:
                proxies: list[Any] = []
                if network is not None:
                    from .network import through_network

                    reachable, proxies = through_network(network_stack, reachable, network)
                try:
                    _run_workers(reachable, workload, outcome, progress, monitor)
                finally:
                    if network is not None:
                        from .network import network_record

                        outcome.network = network_record(network, proxies)
    except BackendMissing as exc:
        outcome.status, outcome.reason = "skipped", str(exc)
    return outcome


def _sampled_url(target: Target) -> str:
    """The URL whose server the monitor samples: a Sentinel target's primary (asked now), else the target's."""
    if scheme(target.scheme).failover_grace is None:
        return target.url
    from ..engine import sentinel_primary

    try:
        return sentinel_primary(target).url
    except UserError:
        return target.url  # no primary named: the preflight says so in one line; nothing to sample


def _uses_engine(target: Target) -> bool:
    return target.param("client") == "engine"


def _preflight_target(target: Target) -> Target:
    """The engine path still checks and cleans up through the Python client."""
    if not _uses_engine(target):
        return target
    params = {k: v for k, v in target.params.items() if k not in ("client", "threads", "connections", "pipeline",
                                                                   "protocol")}
    base = target.url.split("?", 1)[0]
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return parse_target(base + (f"?{query}" if query else ""))


def _run_workers(target: Target, workload: Workload, outcome: RunOutcome, progress: ProgressFn | None,
                 monitor: PhaseMonitor) -> None:
    namespace = f"cm:{uuid.uuid4().hex[:8]}:"
    preflight = create_backend(_preflight_target(target), namespace)
    preflight.open()  # BackendUnavailable propagates: the user's input is wrong
    try:
        outcome.backend.update({"scheme": target.scheme, "info": preflight.info(), "namespace": namespace})
        if scheme(target.scheme).stores:
            outcome.dropped_writes = _probe_writes(preflight, namespace, workload)
        if _uses_engine(target):
            from .engine_runner import run_engine_phases

            outcome.backend["info"]["client"] = "cachemark-engine"
            try:
                outcome.phases = run_engine_phases(target, workload, namespace, monitor)
            except PrefillFailed as exc:  # named by the user's URL, as the workers' refusals are
                raise PrefillFailed(f"{outcome.target}: {exc}") from None
            if any(p["interrupted"] for p in outcome.phases):
                outcome.status, outcome.reason = "interrupted", "stopped by Ctrl-C; results cover what ran"
            _fail_on_errors(outcome)
            return
        from .driver import driver_for, run_driver_phases

        if driver_for(target) is not None:  # a program in another stack runs the load (docs/drivers.md)
            run_driver_phases(target, workload, namespace, outcome, monitor)
            _fail_on_errors(outcome)
            return
        shared = outcome.backend["capabilities"].get("shared", True)
        tasks = [WorkerTask(target, namespace, workload.model_dump(), w, workload.workers, shared)
                 for w in range(workload.workers)]
        outcome.phases = _supervise(tasks, workload, outcome, progress, monitor)
        _fail_on_errors(outcome)
    finally:
        monitor.stop_all()
        try:
            removed = preflight.clear_namespace(written_keys(namespace, workload, target))
            outcome.backend["cleanup_removed"] = removed
        except Exception as exc:  # noqa: BLE001 — cleanup failure must not hide results
            # CleanupFailed already reads "cleanup failed: …; what may remain".
            outcome.backend["cleanup_error"] = str(exc) if isinstance(exc, CleanupFailed) else (
                f"{type(exc).__name__}: {exc}")
        preflight.close()


def _probe_writes(backend: Any, namespace: str, workload: Workload) -> str | None:
    """The write-then-read probe; a probe that errors says nothing (the load will count the errors)."""
    try:
        return check_writes_kept(backend, namespace, workload)
    except Exception:  # noqa: BLE001 — the timed phases measure and report the same failure
        return None


def _fail_on_errors(outcome: RunOutcome) -> None:
    """A phase the on-error policy stopped fails the run (exit 1), with its reason."""
    stopped = [p["stopped_on_errors"] for p in outcome.phases if p.get("stopped_on_errors")]
    if stopped:
        outcome.status, outcome.reason = "failed", stopped[0]


def _supervise(tasks: list[WorkerTask], workload: Workload, outcome: RunOutcome,
               progress: ProgressFn | None, monitor: PhaseMonitor) -> list[dict[str, Any]]:
    try:
        got = supervise(tasks, workload, monitor, len(tasks), _progress_tick(progress, workload))
    finally:
        monitor.stop_all()
        remove_pool(tasks[0].namespace)  # the origin pool's names, a killed worker's too
    outcome.status, outcome.reason = got.status(f"{outcome.target}: ", "stopped by Ctrl-C; results cover what ran")
    return got.records(workload, monitor, _merge_phase)


def _progress_tick(progress: ProgressFn | None, workload: Workload) -> Tick | None:
    """The progress callback, fed the current phase and its ops done; its clock starts at the
    phase's first op (not while its workers prefill)."""
    if progress is None:
        return None
    phases = workload.effective_phases()
    seen = {"phase": -1, "started": None}

    def tick(current: int, done: int) -> None:
        if current != seen["phase"]:
            seen["phase"], seen["started"] = current, None
        if seen["started"] is None and done:
            seen["started"] = time.monotonic()
        phase = phases[min(current, len(phases) - 1)]
        elapsed = time.monotonic() - seen["started"] if seen["started"] else 0.0
        progress(phase.name, done, phase.ops, elapsed, phase.duration)

    return tick


def _merge_phase(phase, parts: list[PhaseReport], workload: Workload) -> dict[str, Any]:
    start = min(p.start_ns for p in parts)
    end = max(p.end_ns for p in parts)
    wall_s = (end - start) / 1e9
    ops = summarize_ops(merge_ops([p.ops for p in parts]), wall_s)
    outages = merge_outages([p.write_outages for p in parts], start)
    return {
        "name": phase.name,
        "mode": "open" if phase.rate else "closed",
        "rate": phase.rate,
        "workers": workload.workers,
        "workers_reported": len(parts),
        "wall_s": wall_s,
        "client_cpu_s": sum(p.cpu_s for p in parts),
        "interrupted": any(p.interrupted for p in parts),
        "missed": sum(p.missed for p in parts),
        "error_samples": [s for p in parts for s in p.error_samples][:5],
        "ops": ops,
        "timeseries": merge_timeseries([p.timeseries for p in parts]),
        **({"write_outages": outages} if outages else {}),
    }
