"""Flattening a results document into rows every report reads the same way.

Owns :func:`op_rows` (one :class:`OpRow` per run × phase × op: the run, phase, op and summary
records themselves) and :func:`phase_rows` (one :class:`PhaseRow` per run × phase: total ops/s,
payload bandwidth, the worst p99, beside the phase's server figures). Export, compare,
thresholds and the HTML report all start here, so a figure means the same thing in every
output. Summaries missing from an older file are recomputed from the histograms.

Every function reads the typed document (:mod:`cachemark.results.schema`), as ``results.read``
returns it: never the file's dict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..backends.base import PSEUDO_OPS
from ..errors import UserError
from ..results import OpResult, OpSummary, Phase, ResultsDocument, Run
from ..results.names import run_name, sweep_key  # noqa: F401 (re-exported: reports name runs through here)
from ..results.schema import ClusterFigures, ServerFigures
from ..textfile import one_line
from .figures import fmt_percent

SUMMARY_FIELDS = ("ops_per_s", "hit_ratio", "error_count", "p50_us", "p90_us", "p99_us", "p999_us",
                  "max_us", "mean_us", "ops_per_latency_s")
SERVER_FIELDS = ("cpu_us_per_op", "bytes_in_per_op", "bytes_out_per_op", "net_mbps_p90", "net_mbps_p70",
                 "net_in_mbps_p90", "net_out_mbps_p90", "net_out_mbps_p70", "cpu_pct_p90", "cpu_pct_p50",
                 "used_memory_bytes", "evictions")
# the mark on a per-second server figure that rests on fewer than two full intervals, and its footnote
LOW_SAMPLES_MARK = "†"
LOW_SAMPLES_NOTE = ("from fewer than two full 1-s intervals (a short phase): the rate over what there was, "
                    "not a percentile of seconds.")


_NO_SERVER = ServerFigures()
# A run's sweep point, field → value. Any: the value as the file gave it (text; an older file's: a number).
SweepPoint = dict[str, Any]


@dataclass(frozen=True, eq=False)  # a row is itself: compared by identity (the baseline's own row)
class OpRow:
    """One op of one phase of one run, as every table reads it: the document's own records side by
    side (no figure copied out of them), with the summary saved or recomputed over the phase's wall time."""

    index: int  # the run's place in the document: its colour, where a table starts a new group
    run: Run
    phase: Phase
    name: str  # the run as every output names it (run.name, worked out once per run)
    sweep: str  # its sweep point (run.sweep_key)
    op_name: str
    op: OpResult
    summary: OpSummary

    @property
    def label(self) -> str:
        return self.run.label

    @property
    def count(self) -> int:
        return self.op.count

    @property
    def wall_s(self) -> float:
        return self.phase.wall_s or 0.0

    @property
    def server(self) -> ServerFigures:
        return self.phase.server or _NO_SERVER

    def figure(self, field: str) -> float | None:
        """One of :data:`SUMMARY_FIELDS` by name, for the tables that loop over them."""
        return getattr(self.summary, field)


@dataclass(frozen=True, eq=False)
class PhaseRow:
    """One phase of one run with its totals over the ops (ops/s, payload bandwidth, worst p99) beside
    the document's own records."""

    index: int
    run: Run
    phase: Phase
    name: str
    sweep: str
    count: int  # ops of the phase, pseudo-ops (a sequence's steps) left out
    ops_per_s: float
    payload_mbps: float
    p99_us_max: float | None  # the slowest op's p99

    @property
    def label(self) -> str:
        return self.run.label

    @property
    def wall_s(self) -> float:
        return self.phase.wall_s or 0.0

    @property
    def network(self) -> str:
        return self.run.profile or ""

    @property
    def sweep_values(self) -> SweepPoint:
        return dict(self.run.sweep or {})

    @property
    def server(self) -> ServerFigures:
        return self.phase.server or _NO_SERVER

    @property
    def server_kind(self) -> str | None:
        return (self.run.server.kind if self.run.server is not None else None) or self.run.scheme

    @property
    def has_server(self) -> bool:
        return bool(self.server.samples)

    @property
    def low_samples(self) -> bool:
        """Per-second figures (Mbps, CPU %) from fewer than two full intervals: marked in tables."""
        return self.server.low_samples


def op_rows(document: ResultsDocument, include_failed: bool = False) -> list[OpRow]:
    """One row per (run, phase, op); runs without phases are left out."""
    rows: list[OpRow] = []
    for index, run in enumerate(document.runs):
        if not run.measured and not include_failed:
            continue
        shown, sweep = run.name, run.sweep_key
        for phase in run.phases:
            wall = phase.wall_s or 0.0
            rows += [OpRow(index, run, phase, shown, sweep, name, op, op.summary_for(wall))
                     for name, op in phase.ops.items()]
    return rows


def phase_rows(document: ResultsDocument) -> list[PhaseRow]:
    """One row per (run, phase): totals over its ops, beside its server figures."""
    rows: list[PhaseRow] = []
    for index, run in enumerate(document.runs):
        if not run.measured:
            continue
        shown, sweep = run.name, run.sweep_key
        for phase in run.phases:
            wall = phase.wall_s or 0.0
            ops = phase.ops
            count = sum(op.count for name, op in ops.items() if name not in PSEUDO_OPS)
            payload = sum(op.bytes_in + op.bytes_out for op in ops.values())
            p99 = [op.summary_for(wall).p99_us or 0.0 for op in ops.values()]
            rows.append(PhaseRow(index, run, phase, shown, sweep, count,
                                 ops_per_s=count / wall if wall > 0 else 0.0,
                                 payload_mbps=payload * 8 / wall / 1e6 if wall > 0 else 0.0,
                                 p99_us_max=max(p99) if p99 else None))
    return rows


def fmt_value(value: Any, digits: int = 4) -> str:
    """Plain numbers for machine-facing outputs: ints as ints, floats to ``digits`` significant."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e15 else f"{value:.0f}"
    return str(value)


def load_notes(document: ResultsDocument) -> list[str]:
    """What the load itself could not do, per run and phase: ops of an open-loop schedule
    that fell due but were never sent (the client fell behind its rate), which the latency
    figures cannot show, since they cover only the ops that were sent. And, for a Redis
    Cluster on the engine, the redirects its nodes answered (a slot map that changed under
    the load costs those ops a second round trip)."""
    notes = []
    for run in document.runs:
        for phase in run.phases:
            if phase.cluster is not None and not phase.cluster.is_empty:
                notes.append(f"{run.name}: {phase.name}: {cluster_note(phase.cluster)}")
            missed, share = missed_ops(phase)
            if missed > 0:
                were = "op due was" if missed == 1 else "ops due were"
                notes.append(f"{run.name}: {phase.name}: the load fell behind its rate: "
                             f"{missed:,} {were} never sent ({fmt_percent(share * 100)} of the schedule); the "
                             "latencies cover the ops that were sent")
    return notes


MISSED_WARNING = 0.01  # a share of the schedule never sent from which the verdict warns: below, a busy moment


def missed_ops(phase: Phase) -> tuple[int, float]:
    """An open-loop phase's ops that fell due but were never sent, and their share of its schedule."""
    missed = phase.missed or 0
    sent = sum(op.count for name, op in phase.ops.items() if name not in PSEUDO_OPS)
    return missed, missed / max(missed + sent, 1)


def proxy_overhead_note(document: ResultsDocument) -> str | None:
    """The network proxy's own zero-delay overhead as one line beside every proxied figure,
    or ``None`` when no run went through the proxy.

    The emulated network's figures include what the user-space proxy itself costs (two extra
    loopback hops, and on an idle machine the vCPU wake-ups they need). cachemark measures it
    once per experiment (``environment.proxy_overhead``) so the reader can subtract it: per
    round trip, so an op making several round trips pays it several times.
    """
    if not any(run.network is not None and run.network.proxied for run in document.runs):
        return None
    overhead = document.environment.proxy_overhead
    p50, p99 = (overhead.added_p50, overhead.added_p99) if overhead is not None else (None, None)
    if p50 is None:
        return ("network proxy: its own overhead was not measured with these results; every proxied figure "
                "includes it (30–200 µs per round trip on the machines we measured, see docs/network.md).")
    tail = f", {max(p99, 0):.0f} µs p99" if p99 is not None else ""
    return (f"network proxy: adds {max(p50, 0):.0f} µs p50{tail} per round trip on its own (measured in this "
            f"experiment with no delay configured); every proxied figure includes it — subtract it per round "
            f"trip to compare with a real network.")


def cluster_note(cluster: ClusterFigures) -> str:
    """``cluster: 3 primaries, 12 MOVED, 4 ASK, 1 node joined (…) (slots moved during the run — …)``."""
    moved, ask = cluster.moved, cluster.ask
    # replicas: the engine read from them too (read_from_replicas=1)
    replicas = f" (+{cluster.replicas} replicas read from)" if "replicas" in cluster.model_fields_set else ""
    text = f"cluster: {cluster.primaries} primaries{replicas}, {moved:,} MOVED, {ask:,} ASK"
    if joined := cluster.joined:  # the engine: nodes added to the cluster while it ran, and followed
        text += f", {len(joined)} node{'s' if len(joined) > 1 else ''} joined ({', '.join(joined)})"
    if moved or ask:
        text += (" (slots moved during the run — resharding or a failover; each redirected op "
                 "includes its second round trip)")
    return text


def pct_of(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return fmt_percent(value / base * 100)


def baseline_rows(rows: list[OpRow], baseline: str) -> dict[tuple[str, str, str], OpRow]:
    """The baseline label's row per (sweep point, phase, op); the first repeat stands for the others."""
    chosen: dict[tuple[str, str, str], OpRow] = {}
    for row in rows:
        if row.label == baseline:
            chosen.setdefault((row.sweep, row.phase.name, row.op_name), row)
            # for rows of another sweep point (or none), the baseline's first point stands in
            chosen.setdefault(("*", row.phase.name, row.op_name), row)
    if not chosen:
        labels = sorted({r.label for r in rows})
        raise UserError(f"baseline {one_line(repr(baseline), 80)} is not a label in the results; "
                        f"labels: {one_line(', '.join(labels), 300)}")
    return chosen


def baseline_for(base: dict[tuple[str, str, str], OpRow], row: OpRow) -> OpRow | None:
    return base.get((row.sweep, row.phase.name, row.op_name)) or base.get(("*", row.phase.name, row.op_name))


# A tail percentile from a handful of ops is one sample, not a tail: marked in every table.
FEW_SAMPLES_MARK = "*"
FEW_FOR = {"p99_us": 30, "p999_us": 300}  # fewer ops than this: the percentile is marked
FEW_SAMPLES_NOTE = ("* from fewer than 30 ops (p99) or 300 ops (p99.9): the tail rests on one or two samples; "
                    "a single op has no percentile at all (-), only its own latency (max).")


def latency_cell(count: int, field: str, value: float | None, fmt: Any) -> str:
    """A latency figure as shown: '-' for a percentile of a single op, marked when the op count
    is too small for it (``FEW_FOR``), plain otherwise."""
    if count == 1 and field != "max_us":
        return "-"
    text = fmt(value)
    return text + FEW_SAMPLES_MARK if value is not None and count < FEW_FOR.get(field, 0) else text


def has_few_samples(counts: list[int]) -> bool:
    return any(0 < c < FEW_FOR["p999_us"] for c in counts)
