"""The fork server the Python workers come from, and starting it as early as a run knows it needs it.

The fork server imports the worker module once (through `preload`, ~0.4 s: numpy, pydantic,
the backends) and the adapters of the run's targets, then forks every worker of every run.
:func:`context` starts it, deaf to the terminal's signals, on first use; :func:`start_early` does
so as soon as ``cachemark run`` has an experiment with a target on Python workers, so those
imports overlap the parent's own preparation (its imports, calibration, spawning servers, the
preflight) instead of following it. Targets on the engine or a driver need no fork server and
start none, nor does a target the plan will refuse.

Only the adapters a run uses are imported: redis-py's, the heaviest (~0.1 s of CPU, asyncio
with it), is not imported for a run on memory://, files or memcached. A fork server started
without the targets known (by the first worker of a stampede, a capacity search) imports it,
as the most used.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
from collections.abc import Iterable

from ..driver_registry import DRIVERS
from ..errors import UserError
from ..schemes import adapter_modules
from ..target import Target, check_params, parse_target

MOST_USED = adapter_modules("redis", "")  # what the fork server imports when it does not know the targets


def context(targets: Iterable[Target] | None = None) -> mp.context.BaseContext:
    """Worker processes come from a fork server that has imported the worker module once (through
    `preload`, which first makes it deaf to the terminal's Ctrl-C), and the adapters of ``targets``
    (unknown: redis-py's). Once it runs, a later call's targets change nothing."""
    adapters = MOST_USED if targets is None else [m for t in targets for m in adapter_modules(t.scheme, t.path)]
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["cachemark.run.preload", *dict.fromkeys(adapters)])
    _start_helpers_deaf()
    return ctx


def on_python_workers(target: Target) -> bool:
    """Whether a target runs on Python worker processes: its ``client=`` names neither the
    engine nor a driver in another stack."""
    client = target.param("client") or ""
    return client != "engine" and client not in DRIVERS


def start_early(urls: Iterable[str]) -> None:
    """Start the fork server now if a target of ``urls`` will run on Python workers; nothing
    starts when one is refused (the plan says why, and no run starts at all)."""
    try:
        targets = [parse_target(url) for url in urls]
        for target in targets:
            check_params(target)
        on_workers = [target for target in targets if on_python_workers(target)]
        if on_workers:
            context(on_workers)
    except UserError:
        return


def _start_helpers_deaf() -> None:
    """Start multiprocessing's fork server and resource tracker with the terminal's signals
    blocked: a Ctrl-C (or SIGHUP) sent to the process group while they start would kill
    them (the tracker ignores SIGINT and SIGTERM, not SIGHUP; the fork server is deaf only
    after its imports), and the run then waited for workers that never came. A blocked
    signal stays blocked in the children; ours, pending meanwhile, arrives when we unblock."""
    from multiprocessing import forkserver, resource_tracker

    terminal = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, terminal)
    try:
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, terminal)  # the tracker's start unblocks SIGINT and SIGTERM
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
