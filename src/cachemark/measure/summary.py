"""Merging per-worker op results and summarising them (ops/s, hit ratio, percentiles).

Workers, drivers and agents each report an op's counters and encoded histograms; a
:class:`MergedOp` adds them up exactly (histograms merged, never percentiles) and
:func:`summarize` computes the op's :class:`OpFigures` from it — the one place a summary is
computed, whether a run just ended or a report recomputes one for a file that lacks it.
``OpFigures`` are the results file's ``summary``: results/schema.py's ``OpSummary`` reads
the same fields back (a test keeps the two in step). They live here, not there, because
measure is the lower layer: it computes figures, results owns how a file is checked.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from .histogram import Histogram

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
_LATENCY_OUTCOMES = ("hit", "miss", "ok")


@dataclass(frozen=True)
class OpFigures:
    """One op's summary: figures over its successful outcomes (errors counted apart), in µs and per s."""

    ops_per_s: float
    hit_ratio: float | None  # None: the op read nothing (a set)
    error_count: int
    p50_us: float
    p90_us: float
    p99_us: float
    p999_us: float
    max_us: float
    mean_us: float
    # count ÷ Σ latency (Mollenhour's cache-benchmark "ops/s"): what one client doing nothing else gets
    ops_per_latency_s: float

    def as_json(self) -> dict[str, Any]:
        """As the results file keeps it (an op's ``summary``), fields in this order."""
        return asdict(self)


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
    def from_saved(cls, op: dict[str, Any]) -> MergedOp:
        """One op result as saved (histograms encoded), e.g. read back from a results file."""
        merged = cls()
        merged.add(op)
        return merged

    def add(self, op: dict[str, Any]) -> None:
        """Add one worker's op result (histograms encoded) to this one."""
        self.count += op["count"]
        self.hits += op.get("hits", 0)
        self.misses += op.get("misses", 0)
        self.bytes_out += op.get("bytes_out", 0)
        self.bytes_in += op.get("bytes_in", 0)
        self.errors.update(op.get("errors") or {})
        _add_encoded(self.histograms, op.get("histograms") or {})
        _add_encoded(self.histograms_uncorrected, op.get("histograms_uncorrected") or {})

    def saved(self, wall_s: float | None = None) -> dict[str, Any]:
        """The op result as the results file keeps it; over ``wall_s``, with its summaries too."""
        result: dict[str, Any] = {
            "count": self.count, "hits": self.hits, "misses": self.misses, "errors": dict(self.errors),
            "bytes_out": self.bytes_out, "bytes_in": self.bytes_in, "histograms": _encoded(self.histograms),
        }
        if self.histograms_uncorrected:
            result["histograms_uncorrected"] = _encoded(self.histograms_uncorrected)
        if wall_s is not None:
            result.update(summaries(self, wall_s))
        return result


def _add_encoded(into: dict[str, Histogram], encoded: dict[str, str]) -> None:
    for outcome, text in encoded.items():
        hist = Histogram.decode(text)
        if outcome in into:
            into[outcome].add(hist)
        else:
            into[outcome] = hist


def _encoded(histograms: dict[str, Histogram]) -> dict[str, str]:
    return {outcome: hist.encode() for outcome, hist in sorted(histograms.items())}


def merge_ops(parts: list[dict[str, Any]], wall_s: float | None = None) -> dict[str, dict[str, Any]]:
    """The ``ops`` of several workers (same phase) merged into one phase's op results, as saved;
    over the phase's ``wall_s``, each with its summaries (``summary``, ``summary_uncorrected``)."""
    merged: dict[str, MergedOp] = {}
    for part in parts:
        for name, op in part.items():
            merged.setdefault(name, MergedOp()).add(op)
    return {name: op.saved(wall_s) for name, op in merged.items()}


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


def summarize(op: MergedOp, wall_s: float, uncorrected: bool = False) -> OpFigures:
    """``op``'s figures over ``wall_s``: latency from the intended start (open loop's corrected
    figure), or from the actual send when ``uncorrected``."""
    hist = latency_histogram(op.histograms_uncorrected if uncorrected else op.histograms)
    p50, p90, p99, p999 = hist.percentiles(PERCENTILES)
    reads = op.hits + op.misses
    return OpFigures(
        ops_per_s=op.count / wall_s if wall_s > 0 else 0.0,
        hit_ratio=op.hits / reads if reads else None,
        error_count=sum(op.errors.values()),
        p50_us=p50 / 1000, p90_us=p90 / 1000, p99_us=p99 / 1000, p999_us=p999 / 1000,
        max_us=hist.max / 1000, mean_us=hist.mean / 1000,
        ops_per_latency_s=1e9 / hist.mean if hist.mean else 0.0,
    )


def summaries(op: MergedOp, wall_s: float) -> dict[str, dict[str, Any]]:
    """An op result's ``summary``, and ``summary_uncorrected`` where it has those histograms (open loop)."""
    out = {"summary": summarize(op, wall_s).as_json()}
    if op.histograms_uncorrected:
        out["summary_uncorrected"] = summarize(op, wall_s, uncorrected=True).as_json()
    return out


def summary_from_result(op: dict[str, Any], wall_s: float, corrected: bool = True) -> dict[str, Any]:
    """Recompute a summary from a saved op result (e.g. after loading a results file)."""
    return summarize(MergedOp.from_saved(op), wall_s, uncorrected=not corrected).as_json()


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
