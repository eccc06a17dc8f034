"""The run sequence, written once: provide → preflight → write probe → prefill → phases → cleanup.

Every run of every command goes through it, whatever runs its load (run/load_path.py): the
target is provided (a spawned server, a temp dir, a private origin server) and stopped after,
its ops are checked and its URL tried before any load starts (a wrong URL or password fails in
one line), a cache that drops writes is caught by one write and read, the load path prefills
and runs the phases while the monitor samples the server (a Sentinel target's primary), and —
however the run ends — the run's own namespace is removed and a cleanup that fails says what
may remain, without hiding the results.

This is the one module that changes a run's outcome (run/outcome.py): the load path returns
its phases and how they ended (a LoadResult), and the steps here record it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

from ..backends import create_backend
from ..backends.base import CleanupFailed
from ..errors import BackendMissing
from ..plan import default_label
from ..schemes import scheme
from ..spec import Workload
from ..target import Target, parse_target
from .load_path import LoadPath, ProgressFn, Run
from .monitor import PhaseMonitor, sampled_url
from .outcome import LoadResult, RunOutcome, stopped_on_errors
from .preflight import check_ops, preflight_target, written_keys
from .provide import provide
from .write_probe import probe_writes


def run_sequence(target: Target | str, workload: Workload, load: LoadPath, label: str | None = None,
                 progress: ProgressFn | None = None, network: Any = None, sample_server: bool = True) -> RunOutcome:
    """Run ``workload`` against ``target`` with ``load`` running its phases; a missing server
    binary yields a skipped outcome."""
    target = parse_target(target) if isinstance(target, str) else target
    outcome = load.outcome_class(label=label or default_label(target), target=target.redacted_whole)
    try:
        with provide(target) as (reachable, servers), _provide_origin(workload) as workload:
            outcome.server = _describe(servers)
            outcome.backend.capabilities = check_ops(preflight_target(reachable), workload)
            load.check(target, workload, outcome.backend.capabilities, network)
            pid = servers[0].pid() if len(servers) == 1 else None
            # samples the server itself, not the proxy; a Sentinel target's primary as named at the start
            monitor = PhaseMonitor(sampled_url(reachable) if sample_server else reachable.url, pid, sample_server)
            with contextlib.ExitStack() as network_stack:
                proxies: list[Any] = []
                if network is not None:
                    from .network import through_network

                    reachable, proxies = through_network(network_stack, reachable, network)
                try:
                    _probe_and_load(Run(reachable, workload, f"cm:{uuid.uuid4().hex[:8]}:", outcome, monitor,
                                        progress), load)
                finally:
                    if network is not None:
                        from .network import network_record

                        outcome.network = network_record(network, proxies)
    except BackendMissing as exc:
        outcome.status, outcome.reason = "skipped", str(exc)
    return outcome


def _describe(servers: list[Any]) -> dict[str, Any] | None:
    if len(servers) == 1:
        return servers[0].describe()
    return {"servers": [s.describe() for s in servers]} if servers else None


def _probe_and_load(run: Run, load: LoadPath) -> None:
    """Preflight connection, write probe, prefill, phases; then, however they end, the cleanup."""
    preflight = create_backend(preflight_target(run.target), run.namespace)
    preflight.open()  # BackendUnavailable propagates: the user's input is wrong
    try:
        backend = run.outcome.backend
        backend.scheme, backend.info, backend.namespace = run.target.scheme, preflight.info(), run.namespace
        if scheme(run.target.scheme).stores:  # null:// keeps nothing by design: nothing to probe
            run.outcome.dropped_writes = probe_writes(preflight, run.namespace, run.workload)
        load.prefill(run)
        _record(run.outcome, load.run_phases(run))
    finally:
        run.monitor.stop_all()
        clean_up(preflight, run)
        preflight.close()


def _record(outcome: RunOutcome, got: LoadResult) -> None:
    """The load's phases, end and client into the outcome; a phase the on-error policy stopped fails the run."""
    outcome.phases = list(got.phases)
    outcome.status, outcome.reason = got.status, got.reason
    if got.client_info is not None:
        outcome.backend.info = got.client_info
    for name, value in got.extra.items():  # fields only the load path's outcome_class has (dask, stampedes)
        if not hasattr(outcome, name):
            raise TypeError(f"{type(outcome).__name__} has no field {name!r}")
        setattr(outcome, name, value)
    stopped = stopped_on_errors(outcome.phases)
    if stopped:
        outcome.status, outcome.reason = "failed", stopped


def clean_up(preflight: Any, run: Run) -> None:
    """Remove the run's namespace; a failure is recorded (``cleanup_error``), never raised over the results."""
    try:
        removed = preflight.clear_namespace(written_keys(run.namespace, run.workload, run.target))
        run.outcome.backend.cleanup_removed = removed
    except Exception as exc:  # noqa: BLE001 — cleanup failure must not hide results
        # CleanupFailed already reads "cleanup failed: …; what may remain".
        run.outcome.backend.cleanup_error = str(exc) if isinstance(exc, CleanupFailed) else (
            f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def _provide_origin(workload: Workload) -> Iterator[Workload]:
    """A ``spawn:postgresql?query=…`` origin gets its private server for the run (stopped after it);
    the load then sees a plain ``postgresql://…?query=…`` origin."""
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
