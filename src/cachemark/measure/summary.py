"""One op's result (:class:`OpRecord`), merging per-worker op results and summarising them
(ops/s, hit ratio, percentiles).

Workers, drivers, the engine and agents each hand on an op's counters and encoded histograms as
an :class:`OpRecord`; a :class:`MergedOp` adds them up exactly (histograms merged, never
percentiles) and :func:`summarize` computes the op's ``OpSummary`` from it — the one place
a summary is computed, whether a run just ended or a report recomputes one for a file that lacks
it. That summary is one type, :class:`~cachemark.measure.figures.OpSummary`, from here to the
report that reads it back (results/schema.py validates the same class; measure/figures.py says
why it is defined below results/).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .figures import OpSummary
from .histogram import Histogram

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
_LATENCY_OUTCOMES = ("hit", "miss", "ok")


@dataclass(frozen=True)
class OpRecord:
    """One op's result as every producer hands it on (the Python workers' recorder, a driver's,
    the engine's, an agent's): counters, errors by kind, histograms by outcome (encoded) and,
    over a phase's wall time, its summaries. Its dict form exists only in a file and on the wire
    (:meth:`to_json`, :meth:`from_json`)."""

    count: int
    hits: int | None = 0  # None: not counted (the engine counts hits and misses only for reads)
    misses: int | None = 0
    errors: dict[str, int] = field(default_factory=dict)
    bytes_out: int = 0
    bytes_in: int = 0
    histograms: dict[str, str] = field(default_factory=dict)
    histograms_uncorrected: dict[str, str] | None = None  # open loop: from the actual send
    summary: OpSummary | None = None
    summary_uncorrected: OpSummary | None = None

    @classmethod
    def from_json(cls, op: dict[str, Any]) -> OpRecord:
        """An op result as JSON (the engine's answer, an agent's wire record); a key it does not know is ignored."""
        return cls(
            count=op.get("count", 0), hits=op.get("hits"), misses=op.get("misses"),
            errors=dict(op.get("errors") or {}), bytes_out=op.get("bytes_out", 0), bytes_in=op.get("bytes_in", 0),
            histograms=dict(op.get("histograms") or {}), histograms_uncorrected=op.get("histograms_uncorrected"),
            summary=_figures(op.get("summary")), summary_uncorrected=_figures(op.get("summary_uncorrected")),
        )

    def to_json(self) -> dict[str, Any]:
        """The op as the results file keeps it: what it has (a None is left out), in field order whichever
        path produced it (files that earlier versions wrote in the engine's order read the same)."""
        return {name: _as_json(getattr(self, name)) for name in _SAVED if getattr(self, name) is not None}

    def with_every_counter(self) -> OpRecord:
        """Hits and misses as 0 where the engine did not count them (a set's), so agents' ops add up."""
        return replace(self, hits=self.hits or 0, misses=self.misses or 0)

    def summarized(self, wall_s: float) -> OpRecord:
        """With its summaries over ``wall_s`` (the engine's ops come without)."""
        summary, uncorrected = _summaries(MergedOp.of(self), wall_s)
        return replace(self, summary=summary, summary_uncorrected=uncorrected)


_SAVED = tuple(f.name for f in fields(OpRecord))


def _figures(saved: dict[str, Any] | None) -> OpSummary | None:
    return OpSummary.computed(**saved) if saved else None


def _as_json(value: Any) -> Any:
    if isinstance(value, OpSummary):
        return value.as_json()
    return dict(value) if isinstance(value, dict) else value


@dataclass
class MergedOp:
    """One op's results added up over the workers that ran it: its counters, and its histograms
    decoded (by outcome: hit, miss, ok, error), so it is summarised without decoding them again."""

    count: int = 0
    hits: int = 0
    misses: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    bytes_out: int = 0
    bytes_in: int = 0
    histograms: dict[str, Histogram] = field(default_factory=dict)
    histograms_uncorrected: dict[str, Histogram] = field(default_factory=dict)  # open loop: from the actual send

    @classmethod
    def of(cls, op: OpRecord) -> MergedOp:
        """One op result on its own, e.g. to summarise it."""
        merged = cls()
        merged.add(op)
        return merged

    def add(self, op: OpRecord) -> None:
        """Add one worker's op result to this one."""
        self.count += op.count
        self.hits += op.hits or 0
        self.misses += op.misses or 0
        self.bytes_out += op.bytes_out
        self.bytes_in += op.bytes_in
        self.errors.update(op.errors)
        _add_encoded(self.histograms, op.histograms)
        _add_encoded(self.histograms_uncorrected, op.histograms_uncorrected or {})

    def record(self, wall_s: float | None = None) -> OpRecord:
        """The op result added up; over ``wall_s``, with its summaries too."""
        summary, uncorrected = _summaries(self, wall_s) if wall_s is not None else (None, None)
        return OpRecord(
            count=self.count, hits=self.hits, misses=self.misses, errors=dict(self.errors),
            bytes_out=self.bytes_out, bytes_in=self.bytes_in, histograms=_encoded(self.histograms),
            histograms_uncorrected=_encoded(self.histograms_uncorrected) if self.histograms_uncorrected else None,
            summary=summary, summary_uncorrected=uncorrected,
        )


def _add_encoded(into: dict[str, Histogram], encoded: dict[str, str]) -> None:
    for outcome, text in encoded.items():
        hist = Histogram.decode(text)
        if outcome in into:
            into[outcome].add(hist)
        else:
            into[outcome] = hist


def _encoded(histograms: dict[str, Histogram]) -> dict[str, str]:
    return {outcome: hist.encode() for outcome, hist in sorted(histograms.items())}


def merge_ops(parts: list[dict[str, OpRecord]], wall_s: float | None = None) -> dict[str, OpRecord]:
    """The ``ops`` of several workers (same phase) merged into one phase's op results; over the
    phase's ``wall_s``, each with its summaries (``summary``, ``summary_uncorrected``)."""
    merged: dict[str, MergedOp] = {}
    for part in parts:
        for name, op in part.items():
            merged.setdefault(name, MergedOp()).add(op)
    return {name: op.record(wall_s) for name, op in merged.items()}


def latency_histogram(histograms: dict[str, Histogram]) -> Histogram:
    """Successful outcomes together (errors are reported apart); errors only if nothing else."""
    total = Histogram()
    found = False
    for outcome in _LATENCY_OUTCOMES:
        if outcome in histograms:
            total.add(histograms[outcome])
            found = True
    if not found and "error" in histograms:
        total.add(histograms["error"])
    return total


def summarize(op: MergedOp, wall_s: float, uncorrected: bool = False) -> OpSummary:
    """``op``'s figures over ``wall_s``: latency from the intended start (open loop's corrected
    figure), or from the actual send when ``uncorrected``."""
    hist = latency_histogram(op.histograms_uncorrected if uncorrected else op.histograms)
    p50, p90, p99, p999 = hist.percentiles(PERCENTILES)
    reads = op.hits + op.misses
    return OpSummary.computed(
        ops_per_s=op.count / wall_s if wall_s > 0 else 0.0,
        hit_ratio=op.hits / reads if reads else None,
        error_count=sum(op.errors.values()),
        p50_us=p50 / 1000, p90_us=p90 / 1000, p99_us=p99 / 1000, p999_us=p999 / 1000,
        max_us=hist.max / 1000, mean_us=hist.mean / 1000,
        ops_per_latency_s=1e9 / hist.mean if hist.mean else 0.0,
    )


def _summaries(op: MergedOp, wall_s: float) -> tuple[OpSummary, OpSummary | None]:
    """An op result's ``summary``, and ``summary_uncorrected`` where it has those histograms (open loop)."""
    uncorrected = summarize(op, wall_s, uncorrected=True) if op.histograms_uncorrected else None
    return summarize(op, wall_s), uncorrected


def summary_from_result(op: OpRecord, wall_s: float, corrected: bool = True) -> OpSummary:
    """Recompute a summary for an op read back from a results file that lacks one."""
    return summarize(MergedOp.of(op), wall_s, uncorrected=not corrected)


def merge_timeseries(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Merge per-worker per-second entries by second: ops and errors add, histograms merge. Each
    second keeps its slowest op (``max_us``): where in the phase a stall happened (report/verdict.py)."""
    out = []
    for entry, hist in _by_second(parts):
        p50, p99 = hist.percentiles((50.0, 99.0))
        out.append({**entry, "p50_us": p50 / 1000, "p99_us": p99 / 1000, "max_us": hist.max / 1000})
    return out


def merge_seconds(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per-worker per-second entries merged by second, each with its histogram still encoded: what an
    agent ships, so its coordinator merges agents' seconds exactly (never their percentiles)."""
    return [{**entry, "histogram": hist.encode()} for entry, hist in _by_second(parts)]


def _by_second(parts: list[list[dict[str, Any]]]) -> list[tuple[dict[str, Any], Histogram]]:
    """Each second's ops and errors added over ``parts`` and its latencies merged, in time order."""
    seconds: dict[int, tuple[dict[str, Any], Histogram]] = {}
    for series in parts:
        for entry in series:
            if entry["t"] not in seconds:
                seconds[entry["t"]] = ({"t": entry["t"], "ops": 0, "errors": 0}, Histogram())
            counts, hist = seconds[entry["t"]]
            counts["ops"] += entry["ops"]
            counts["errors"] += entry["errors"]
            hist.add(Histogram.decode(entry["histogram"]))
    return [seconds[t] for t in sorted(seconds)]
