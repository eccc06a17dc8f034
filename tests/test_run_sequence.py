"""One run sequence, two places for the load: a single-host run and a distributed one (a local
Dask cluster of two agents) of the same workload against real servers end alike, except where
the phases ran.

What must be the same both ways: the write probe's finding (``dropped_writes``), the cleanup's
outcome (``cleanup_removed``, or, when the server is gone by cleanup time, one
``cleanup_error`` line of the same shape: ``cleanup failed: redis at …; … may remain``), and
the server the phase monitor samples (a Sentinel target's primary, not the Sentinels' URL).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest

from cachemark.lab import LocalServer
from cachemark.run.load_path import PREFILL
from cachemark.run.runner import RunOutcome, run_target
from cachemark.spec import Workload

distributed_mod = pytest.importorskip("distributed")

from cachemark.run import distributed as dist  # noqa: E402

# Not serial: nothing here is timed. The kill comes from the progress callback once ops are counted (no
# race), both runs meet the same refused port, and the shared Sentinel lab cannot fail over under a busy host.


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[dist.Cluster]:
    cluster = dist.connect("local:2")
    yield cluster
    dist.close(cluster)


@pytest.fixture(scope="module")
def sentinel_lab(spawn_for_file) -> LocalServer:
    return spawn_for_file("redis-sentinel", down_after_ms=30_000)  # a stall of a busy host is no primary down


def _workload(**fields: object) -> Workload:
    base = {"keys": 300, "duration": 1.5, "warmup": 0, "workers": 2, "value_size": "100"}
    return Workload.model_validate({**base, **fields})


def _both_ways(cluster: dist.Cluster, url: Callable[[], str], workload: Workload,
               progress: Callable[[str], Callable[..., None]] | None = None) -> tuple[RunOutcome, RunOutcome]:
    """The same run on this host, then from the cluster's agents (``url()`` per run: each may
    need a server of its own)."""
    here = run_target(url(), workload, progress=progress("here") if progress else None)
    there = dist.run_distributed(cluster, url(), workload, progress=progress("there") if progress else None)
    return here, there


def _cleanup_shape(outcome: RunOutcome) -> str:
    """The cleanup line with what differs between two runs (namespace, port, counts) taken out."""
    backend = outcome.backend
    assert backend.cleanup_removed is None, backend
    error = backend.cleanup_error
    assert error is not None and "\n" not in error
    error = error.replace(backend.namespace, "<namespace>")
    return re.sub(r"\d+", "<n>", error)


def test_cleanup_failure_and_probe_read_alike(local_cluster: dist.Cluster, spawn) -> None:
    """The server dies during the timed phase (killed from the progress callback, once ops are
    counted), so the cleanup that follows fails: both runs record the backend's own line."""
    servers: dict[str, LocalServer] = {}

    def server_url() -> str:
        server = spawn("redis")
        servers["here" if "here" not in servers else "there"] = server
        return server.url() + "?socket_timeout=1&socket_connect_timeout=1"

    def kill_once_ops_run(where: str) -> Callable[..., None]:
        def progress(phase: str, done: int, ops: int | None, elapsed: float, duration: float | None) -> None:
            # the timed phase's ops, not the prefill's keys (counted through the same callback): a kill
            # during the prefill fails the run before it starts
            if phase != PREFILL and done > 0:
                servers[where].kill()  # once is enough; a second kill does nothing

        return progress

    here, there = _both_ways(local_cluster, server_url, _workload(duration=3.0), kill_once_ops_run)
    assert here.dropped_writes is None and there.dropped_writes is None  # probed before the kill
    shape = _cleanup_shape(here)
    assert shape.startswith("cleanup failed: redis at <n>.<n>.<n>.<n>:<n>: "), shape
    assert shape.endswith("keys of namespace <namespace> (<n> removed before) may remain"), shape
    assert _cleanup_shape(there) == shape


def test_sentinel_primary_is_sampled_both_ways(local_cluster: dist.Cluster, sentinel_lab: LocalServer) -> None:
    """A Sentinel target's server figures come from its primary (the Sentinels' URL has no
    INFO to give), and the cleanup of a run that ends well says how many keys it removed."""
    here, there = _both_ways(local_cluster, sentinel_lab.url, _workload())
    for outcome in (here, there):
        assert outcome.status == "ok", outcome.reason
        assert outcome.dropped_writes is None
        assert isinstance(outcome.backend.cleanup_removed, int), outcome.backend
        assert outcome.backend.cleanup_error is None
        (phase,) = outcome.to_json()["phases"]
        server = phase["server"]
        assert server is not None and server["source"] == "redis", (type(outcome).__name__, server)
        assert server["server_commands"], server  # the run's commands, counted where they ran
