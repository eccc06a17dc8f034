"""What a trace looks like, in one streaming pass: the figures libCacheSim's analyzer gives.

Owns :class:`StatsBuilder` (fed batches of records, any number) and :class:`TraceStats` (its
answer): objects, requests, op mix, compulsory miss ratio (distinct objects ÷ requests),
one-hit wonders (objects requested once ÷ objects), the Zipf slope (least squares of log
frequency on log rank over the popular part, on log-spaced ranks so each decade weighs the
same), the working set, value-size percentiles by requests and by objects, key sizes, TTLs of
writes, and the request rate over time.

Memory: everything is a fixed-size histogram or counter except the **per-object table**
(hash, request count, largest value size: 20 bytes per distinct object, plus a batch of
pending entries at most as large as the table). For traces with more objects than memory
allows, ``sample_rate`` R keeps in the table only the objects whose mixed key hash falls below
R·2⁶⁴ (spatial sampling, as SHARDS does): every request of a kept object is counted, so the
per-object ratios (one-hit wonders, the Zipf slope, sizes by object) are estimated without bias
and the per-object counts (objects, working set) are scaled by 1/R. Everything per request
(requests, op mix, sizes by request, TTLs, rate) is always exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .record import OPS, SET, mix64

EXACT = 1024  # values below it are counted exactly; above, 128 buckets per power of two (< 0.8 % error)
SUB = 128
RATE_BUCKETS = 1024  # the rate series never has more buckets: their width doubles instead
PERCENTILES = (50, 90, 99, 99.9)
MIN_FIT_COUNT = 10  # the popular part: objects requested at least this often (rank order is noise below)


class LogHistogram:
    """Counts of non-negative integers below 2³²: exact under 1024, then within 0.8 %; constant size."""

    SIZE = EXACT + (33 - 11) * SUB

    def __init__(self) -> None:
        self.counts = np.zeros(self.SIZE, dtype=np.int64)
        self.total = 0
        self.sum = 0
        self.max = 0

    @staticmethod
    def index(values: np.ndarray) -> np.ndarray:
        values = values.astype(np.int64)
        out = values.copy()
        big = values >= EXACT
        if big.any():
            mantissa, exponent = np.frexp(values[big].astype(np.float64))
            out[big] = EXACT + (exponent - 11) * SUB + ((mantissa * 2 - 1) * SUB).astype(np.int64)
        return out

    @staticmethod
    def lower(index: int) -> int:
        if index < EXACT:
            return index
        exponent, frac = divmod(index - EXACT, SUB)
        return int((1 + frac / SUB) * 2 ** (exponent + 10))

    def add(self, values: np.ndarray) -> None:
        if len(values):
            self.counts += np.bincount(self.index(values), minlength=self.SIZE)
            self.total += len(values)
            self.sum += int(values.sum(dtype=np.int64))
            self.max = max(self.max, int(values.max()))

    def percentile(self, q: float) -> int:
        if not self.total:
            return 0
        cumulative = np.cumsum(self.counts)
        index = int(np.searchsorted(cumulative, math.ceil(q / 100 * self.total)))
        return min(self.lower(index), self.max)

    @property
    def mean(self) -> float:
        return self.sum / self.total if self.total else 0.0


def fit_zipf(counts: np.ndarray, min_count: int = MIN_FIT_COUNT) -> tuple[float | None, int]:
    """``(slope α, objects fitted)`` of ``log count = c − α log rank`` over the popular part,
    or ``(None, n)`` when fewer than 10 objects are popular enough to rank."""
    ranked = np.sort(counts)[::-1]
    popular = int(np.count_nonzero(ranked >= min_count))
    if popular < 10:
        return None, popular
    ranks = np.unique(np.geomspace(1, popular, num=min(popular, 200)).astype(np.int64))
    slope, _ = np.polyfit(np.log(ranks), np.log(ranked[ranks - 1].astype(np.float64)), 1)
    return float(-slope), popular


@dataclass
class TraceStats:
    """The figures of one trace; the per-object ones (objects, one-hit wonders, Zipf slope, sizes by
    object, working set) are estimates, counts scaled by 1/R, when ``sample_rate`` < 1."""

    requests: int
    objects: int
    op_counts: dict[str, int]
    one_hit_wonders: float  # fraction of objects requested exactly once
    zipf_alpha: float | None
    zipf_objects: int  # objects in the fit
    working_set_bytes: int  # sum over objects of their largest value size
    value_size_requests: dict[str, float]  # p50… by requests with a value size
    value_size_objects: dict[str, float]  # p50… over objects (their largest size)
    key_size: dict[str, float]
    ttl: dict[str, float]  # over writes with a TTL
    writes_without_ttl: float  # fraction of writes with no TTL
    start_us: int
    duration_s: float
    rate_width_s: float
    rate_series: list[int] = field(default_factory=list)  # requests per bucket of rate_width_s
    sample_rate: float = 1.0

    @property
    def compulsory_miss_ratio(self) -> float:
        return self.objects / self.requests if self.requests else 0.0

    @property
    def mean_rate(self) -> float:
        """Requests per second over the buckets the trace spans (a trace of whole seconds 0…2 lasts 3 s)."""
        span = len(self.rate_series) * self.rate_width_s
        return self.requests / span if span > 0 else 0.0

    @property
    def peak_rate(self) -> float:
        full = self.rate_series[:-1] if len(self.rate_series) > 1 else self.rate_series
        return max(full, default=0) / self.rate_width_s if self.rate_width_s else 0.0

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()}
        out["compulsory_miss_ratio"] = self.compulsory_miss_ratio
        out["mean_rate"], out["peak_rate"] = self.mean_rate, self.peak_rate
        return out

    def sections(self) -> list[dict[str, Any]]:
        """The figures as neutral blocks (title, lines, columns, rows, notes): the CLI turns them
        into report ``Block``s, so the terminal, Markdown and HTML show the same strings."""
        est = "≈ " if self.sample_rate < 1 else ""
        overview = [
            ["requests", f"{self.requests:,}"],
            ["objects", f"{est}{self.objects:,}"],
            ["compulsory miss ratio", f"{self.compulsory_miss_ratio:.4f}"],
            ["one-hit wonders", f"{self.one_hit_wonders:.1%} of objects"],
            ["Zipf slope α", f"{self.zipf_alpha:.3f} (top {self.zipf_objects:,} objects)"
             if self.zipf_alpha is not None else "n/a (too few popular objects)"],
            ["working set", f"{est}{_bytes(self.working_set_bytes)}"],
        ]
        if self.duration_s > 0:
            overview += [["duration", _duration(self.duration_s)],
                         ["mean rate", f"{self.mean_rate:,.1f} req/s"],
                         [f"peak rate ({_duration(self.rate_width_s)} buckets)", f"{self.peak_rate:,.1f} req/s"]]
        notes = [f"Objects sampled at rate {self.sample_rate:g} (spatial hash sampling): per-object figures "
                 "are estimates, counts scaled by 1/rate; per-request figures are exact."] \
            if self.sample_rate < 1 else []
        out = [dict(title="Trace", columns=["figure", "value"], rows=overview, notes=notes)]
        mix = [[op, f"{n:,}", f"{n / self.requests:.1%}" if self.requests else "-"]
               for op, n in self.op_counts.items() if n]
        out.append(dict(title="Op mix", columns=["op", "requests", "share"], rows=mix))
        sizes = []
        for name, table in (("value size, by requests", self.value_size_requests),
                            ("value size, by objects", self.value_size_objects),
                            ("key size", self.key_size), ("TTL of writes (s)", self.ttl)):
            if table:
                sizes.append([name, *(_num(table[k]) for k in _DIST_KEYS)])
        if sizes:
            notes = [f"{self.writes_without_ttl:.1%} of writes have no TTL."] if self.op_counts.get("set") else []
            out.append(dict(title="Distributions", columns=["", *_DIST_KEYS], rows=sizes, notes=notes))
        if self.duration_s > 0 and self.rate_series:
            out.append(dict(title="Request rate over time", columns=["from", "to", "req/s"],
                            rows=_rate_rows(self), left=2))
        return out


_DIST_KEYS = ["mean", "p50", "p90", "p99", "p99.9", "max"]


def _num(value: float) -> str:
    return f"{value:,.1f}" if value != int(value) else f"{int(value):,}"


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TiB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:,.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:,.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 86400:,.1f} d"


def _rate_rows(stats: TraceStats, rows: int = 12) -> list[list[str]]:
    series = np.array(stats.rate_series, dtype=np.float64)
    per = max(1, math.ceil(len(series) / rows))
    out = []
    for start in range(0, len(series), per):
        part = series[start:start + per]
        t0 = start * stats.rate_width_s
        t1 = (start + len(part)) * stats.rate_width_s
        span = t1 - t0
        out.append([_duration(t0) if t0 else "0 s", _duration(t1),
                    f"{part.sum() / span:,.1f}"])
    return out


def _dist(hist: LogHistogram, scale: float = 1.0) -> dict[str, float]:
    if not hist.total:
        return {}
    out = {"mean": round(hist.mean, 1)}
    for q in PERCENTILES:
        out[f"p{q:g}"] = hist.percentile(q)
    out["max"] = hist.max
    return out


class StatsBuilder:
    """``b = StatsBuilder(); for batch in reader.batches(): b.add(batch.records); b.finish()``."""

    def __init__(self, sample_rate: float = 1.0) -> None:
        if not 0 < sample_rate <= 1:
            raise ValueError("sample_rate must be in (0, 1]")
        self.sample_rate = sample_rate
        self._threshold = np.uint64(min(int(sample_rate * 2.0**64), 2**64 - 1))
        self.requests = 0
        self.ops = np.zeros(len(OPS), dtype=np.int64)
        self.values = LogHistogram()
        self.keys = LogHistogram()
        self.ttls = LogHistogram()
        self.writes = 0
        self.t_min: int | None = None
        self.t_max: int | None = None
        self.t0: int | None = None
        self.width_us = 1_000_000
        self.rate = np.zeros(RATE_BUCKETS, dtype=np.int64)
        # the per-object table, sorted by hash, and pending per-batch summaries
        self.table = (np.empty(0, np.uint64), np.empty(0, np.int64), np.empty(0, np.uint32))
        self.pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.pending_n = 0

    def add(self, records: np.ndarray) -> None:
        n = len(records)
        if not n:
            return
        self.requests += n
        self.ops += np.bincount(records["op"], minlength=len(OPS))[: len(OPS)]
        vs = records["value_size"]
        self.values.add(vs[vs > 0])
        ks = records["key_size"]
        self.keys.add(ks[ks > 0])
        writes = records["op"] == SET
        self.writes += int(writes.sum())
        ttl = records["ttl_s"][writes]
        self.ttls.add(ttl[ttl > 0])
        self._times(records["t_us"])
        hashes = records["key_hash"]
        if self.sample_rate < 1:  # only the object table is sampled: every other figure is exact
            kept = mix64(hashes) < self._threshold
            hashes, vs = hashes[kept], vs[kept]
        self._objects(hashes, vs)

    def _times(self, t: np.ndarray) -> None:
        lo, hi = int(t.min()), int(t.max())
        self.t_min = lo if self.t_min is None else min(self.t_min, lo)
        self.t_max = hi if self.t_max is None else max(self.t_max, hi)
        if self.t0 is None:
            self.t0 = lo
        offset = np.maximum(t - self.t0, 0)
        while (hi - self.t0) // self.width_us >= RATE_BUCKETS:
            self.rate = np.concatenate([self.rate.reshape(-1, 2).sum(axis=1), np.zeros(RATE_BUCKETS // 2, np.int64)])
            self.width_us *= 2
        self.rate += np.bincount(offset // self.width_us, minlength=RATE_BUCKETS)[:RATE_BUCKETS]

    def _objects(self, hashes: np.ndarray, sizes: np.ndarray) -> None:
        self.pending.append(_summarise(hashes, None, sizes))
        self.pending_n += len(self.pending[-1][0])
        if self.pending_n > max(len(self.table[0]), 1 << 20):
            self._compact()

    def _compact(self) -> None:
        if not self.pending:
            return
        parts = [self.table, *self.pending]
        self.table = _summarise(*(np.concatenate([p[i] for p in parts]) for i in range(3)))
        self.pending, self.pending_n = [], 0

    def finish(self) -> TraceStats:
        self._compact()
        _, counts, sizes = self.table
        scale = 1 / self.sample_rate
        objects = len(counts)
        alpha, fitted = fit_zipf(counts)
        by_object = LogHistogram()
        by_object.add(sizes[sizes > 0])
        duration = ((self.t_max - self.t_min) / 1e6) if self.t_min is not None else 0.0
        used = int((self.t_max - self.t0) // self.width_us) + 1 if self.t0 is not None else 0
        return TraceStats(
            requests=self.requests,
            objects=round(objects * scale),
            op_counts={op: int(n) for op, n in zip(OPS, self.ops)},
            one_hit_wonders=float(np.count_nonzero(counts == 1) / objects) if objects else 0.0,
            zipf_alpha=alpha,
            zipf_objects=round(fitted * scale),
            working_set_bytes=round(int(sizes.sum(dtype=np.int64)) * scale),
            value_size_requests=_dist(self.values),
            value_size_objects=_dist(by_object),
            key_size=_dist(self.keys),
            ttl=_dist(self.ttls),
            writes_without_ttl=1 - self.ttls.total / self.writes if self.writes else 0.0,
            start_us=self.t_min or 0,
            duration_s=duration,
            rate_width_s=self.width_us / 1e6,
            rate_series=[int(x) for x in self.rate[:used]] if duration > 0 else [],
            sample_rate=self.sample_rate,
        )


def _summarise(hashes: np.ndarray, counts: np.ndarray | None, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
    """Entries with equal hashes merged: counts summed (None: one each), the largest size kept; sorted
    by hash. (Quicksort's argsort: twice as fast as a stable one, and merging needs no stability.)"""
    order = np.argsort(hashes)
    h = hashes[order]
    if not len(h):
        return h.astype(np.uint64), np.zeros(0, np.int64), sizes[order].astype(np.uint32)
    starts = np.flatnonzero(np.concatenate([[True], h[1:] != h[:-1]]))
    merged = np.diff(np.append(starts, len(h))) if counts is None else np.add.reduceat(counts[order], starts)
    return h[starts], merged, np.maximum.reduceat(sizes[order].astype(np.uint32), starts)


def trace_stats(reader: Any, sample_rate: float = 1.0, progress: Any = None) -> TraceStats:
    """Statistics of everything ``reader`` (a :class:`~.reader.TraceReader`) yields.
    ``progress(bytes_read)`` is called after each batch when given."""
    builder = StatsBuilder(sample_rate)
    for batch in reader.batches():
        builder.add(batch.records)
        if progress is not None:
            progress(reader.position())
    return builder.finish()
