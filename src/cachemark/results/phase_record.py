"""One timed phase's record, as every load path makes it: the one place a phase is built and changed.

Python workers (run/load_workers.py), the native engine (run/engine_runner.py), a driver in another
stack (run/driver.py) and a distributed run's coordinator (run/distributed.py) each make a
:class:`PhaseRecord` from what they measured; the on-error policy, the server monitor and an
agent's gate then hand back a changed copy (:meth:`~PhaseRecord.stopped`,
:meth:`~PhaseRecord.with_server`, …), never a dict changed in place. :meth:`~PhaseRecord.to_json`
is the phase as the results file keeps it (schema.Phase, with the keys a path has, in one order
for all: files earlier versions wrote in each path's own order read the same);
:meth:`~PhaseRecord.to_wire` adds what an agent ships to its coordinator.
Its ops are typed (measure's :class:`~cachemark.measure.summary.OpRecord`) until then: those two and
:meth:`~PhaseRecord.from_wire` are where they become JSON and are read back.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..measure.summary import OpRecord
from .schema import Phase

# The order a results file keeps a phase's keys in, whichever path ran it (report -f json prints them so).
SAVED_ORDER = ("name", "mode", "rate", "workers", "workers_reported", "wall_s", "client_cpu_s", "interrupted",
               "stopped_on_errors", "missed", "error_samples", "ops", "timeseries", "write_outages", "agents",
               "agents_reported", "agents_missing", "engine", "measuring_agent", "server", "cluster")

# Saved beside schema.Phase's fields (a phase keeps fields it does not name): no report reads them.
SAVED_EXTRAS = frozenset({"workers_reported", "agents_reported"})
# Saved only where the path has them: absent, not null, when there are none.
OPTIONAL = frozenset({"workers_reported", "write_outages", "cluster", "engine", "agents", "agents_reported",
                      "agents_missing", "measuring_agent"})
# What an agent ships to its coordinator beside the record, for the exact merge; never saved.
IN_FLIGHT = ("start_wall", "end_wall", "start_lag_s")


@dataclass(frozen=True)
class PhaseRecord:
    """One timed phase: schema.Phase's fields, what some paths save beside them, and (in flight
    only) where an agent's phase ran on its wall clock. Ops are typed (histograms encoded); series
    and server figures are the file's own JSON: they go to the file as they came."""

    name: str
    mode: str  # closed | open
    rate: float | None
    workers: int
    wall_s: float
    client_cpu_s: float
    interrupted: bool = False
    stopped_on_errors: str | None = None  # the on-error policy ended the phase: why
    missed: int = 0
    error_samples: list[str] = field(default_factory=list)
    ops: dict[str, OpRecord] = field(default_factory=dict)
    timeseries: list[dict[str, Any]] = field(default_factory=list)
    server: dict[str, Any] | None = None
    workers_reported: int | None = None
    write_outages: list[dict[str, Any]] | None = None
    cluster: dict[str, Any] | None = None  # Redis Cluster's figures
    engine: dict[str, Any] | None = None  # the engine's protocol, threads, connections and wire bytes
    agents: list[dict[str, Any]] | None = None
    agents_reported: int | None = None
    agents_missing: list[str] | None = None
    measuring_agent: dict[str, Any] | None = None
    start_wall: float | None = None
    end_wall: float | None = None
    start_lag_s: float | None = None

    @property
    def total_ops(self) -> int:
        return sum(op.count for op in self.ops.values())

    def error_kinds(self) -> Counter[str]:
        """Failed ops by kind, over every op: what the on-error policy names as the cause."""
        kinds: Counter[str] = Counter()
        for op in self.ops.values():
            kinds.update(op.errors)
        return kinds

    def stopped(self, reason: str) -> PhaseRecord:
        """The on-error policy ended this phase, for ``reason``."""
        return replace(self, stopped_on_errors=reason)

    def with_server(self, figures: dict[str, Any] | None, series: list[dict[str, Any]]) -> PhaseRecord:
        """The server's figures for the phase (None: not sampled) and its per-second series, joined to the
        client's seconds (``t`` the second it covers); a Redis Cluster's redirects from its nodes when the
        client counted none (redis-py follows them unseen)."""
        if figures is None:
            return replace(self, server=None)
        by_second = {entry["t"]: dict(entry) for entry in self.timeseries}
        for row in series:
            shown = {k: v for k, v in row.items() if k != "t" and v is not None}
            by_second[row["t"]] = {**by_second.get(row["t"], {"t": row["t"]}), **shown}
        cluster = self.cluster if self.cluster is not None else figures.get("cluster") or None
        return replace(self, server=figures, cluster=cluster,
                       timeseries=[by_second[t] for t in sorted(by_second)])

    def on_agent_clock(self, start_wall: float, end_wall: float,
                       seconds: list[dict[str, Any]] | None = None) -> PhaseRecord:
        """Where the phase ran on an agent's wall clock (the coordinator aligns agents by it) and, from
        Python workers, its seconds with their histograms (the coordinator merges those exactly)."""
        return replace(self, start_wall=start_wall, end_wall=end_wall,
                       timeseries=self.timeseries if seconds is None else seconds)

    def with_start_lag(self, lag_s: float | None) -> PhaseRecord:
        """How late the phase started on an agent after the coordinator's start time (None: unknown)."""
        return replace(self, start_lag_s=lag_s)

    def to_json(self) -> dict[str, Any]:
        """The phase as the results file keeps it."""
        return {name: self._saved(name) for name in SAVED_ORDER
                if name not in OPTIONAL or getattr(self, name) is not None}

    def _saved(self, name: str) -> Any:
        """One field as the file keeps it: the ops become JSON here, the rest already is."""
        if name == "ops":
            return {op_name: op.to_json() for op_name, op in self.ops.items()}
        return getattr(self, name)

    def to_wire(self) -> dict[str, Any]:
        """The record an agent ships to its coordinator: as saved, and where it ran on the agent's clock."""
        return self.to_json() | {name: getattr(self, name) for name in IN_FLIGHT}

    @classmethod
    def from_wire(cls, shipped: dict[str, Any]) -> PhaseRecord:
        """An agent's record (:meth:`to_wire`) as its coordinator reads it: each op with every counter
        (0 where the engine left one out), so agents' ops add up."""
        known = {f.name for f in fields(cls)}
        values = {name: value for name, value in shipped.items() if name in known}
        values["ops"] = {name: OpRecord.from_json(op).with_every_counter()
                         for name, op in (shipped.get("ops") or {}).items()}
        return cls(**values)


def _check_saved_order() -> None:
    """Every key saved is one schema.Phase names or one of the extras it keeps, and every field that is
    not in flight is saved."""
    unknown = set(SAVED_ORDER) - (set(Phase.model_fields) | SAVED_EXTRAS)
    unsaved = {f.name for f in fields(PhaseRecord)} - set(SAVED_ORDER) - set(IN_FLIGHT)
    if unknown or unsaved:
        raise TypeError(f"phase keys schema.Phase does not know: {sorted(unknown)}; not saved: {sorted(unsaved)}")


_check_saved_order()
