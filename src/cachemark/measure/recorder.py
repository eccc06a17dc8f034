"""Per-worker recording: raw latencies in lists during a phase, histograms after.

The timed loop only appends (a nanosecond latency and an outcome code) — about 60 ns.
Every few thousand ops :meth:`Recorder.flush` turns the lists into HDR counts with one
numpy pass. Outcome codes are ``entry * 4 + outcome`` so one ``bincount`` sorts a
batch into every (op, outcome) histogram at once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from .histogram import COUNTS_LEN, Histogram, bucket_indexes
from .summary import OpRecord

OK, HIT, MISS, ERROR = 0, 1, 2, 3
OUTCOMES = ("ok", "hit", "miss", "error")
FLUSH_AT = 1 << 16
MAX_ERROR_SAMPLES = 5


class Recorder:
    """Histograms and counters for the mix entries of one phase in one worker."""

    def __init__(self, entries: list[str], open_loop: bool = False, pseudo: int = 0) -> None:
        self.entries = entries
        self.open_loop = open_loop
        # the last ``pseudo`` entries are parts of other ops (the origin of `fetch`): recorded and
        # reported like ops, but left out of the per-second series, which counts the load's ops
        self.real_codes = (len(entries) - pseudo) * 4
        self.pseudo_records = 0  # appended so far to the pseudo entries (the worker's progress leaves them out)
        self.latencies: list[int] = []
        self.uncorrected: list[int] = []
        self.codes: list[int] = []
        size = len(entries) * 4
        self.counts = np.zeros((size, COUNTS_LEN), dtype=np.int64)
        self.counts_uncorrected = np.zeros((size, COUNTS_LEN), dtype=np.int64) if open_loop else None
        self.bytes_out = [0] * len(entries)
        self.bytes_in = [0] * len(entries)
        self.errors: list[Counter[str]] = [Counter() for _ in entries]
        self.error_samples: list[str] = []
        # the per-second series: successes of every op together, errors counted apart
        self.second_counts = np.zeros(COUNTS_LEN, dtype=np.int64)
        self.second_ops = 0
        self.second_errors = 0
        self.timeseries: list[dict[str, Any]] = []

    def error(self, entry: int, kind: str, message: str = "") -> None:
        self.errors[entry][kind] += 1
        if message and len(self.error_samples) < MAX_ERROR_SAMPLES:
            self.error_samples.append(f"{self.entries[entry]}: {kind}: {message}"[:300])

    def flush(self) -> None:
        if not self.codes:
            return
        codes = np.asarray(self.codes, dtype=np.int64)
        buckets = self._add(self.counts, codes, self.latencies)
        real = codes < self.real_codes
        failed = ((codes & 3) == ERROR) & real
        self.second_counts += np.bincount(buckets[real & ~failed], minlength=COUNTS_LEN)
        self.second_ops += int(real.sum())
        self.second_errors += int(failed.sum())
        if self.counts_uncorrected is not None:
            self._add(self.counts_uncorrected, codes, self.uncorrected)
            self.uncorrected.clear()
        self.latencies.clear()
        self.codes.clear()

    def end_second(self, t: int) -> None:
        """Close second ``t`` of the phase: its op count, errors and latency histogram."""
        self.flush()
        self.timeseries.append({
            "t": t, "ops": self.second_ops, "errors": self.second_errors,
            "histogram": Histogram(self.second_counts).encode(),
        })
        self.second_counts = np.zeros(COUNTS_LEN, dtype=np.int64)
        self.second_ops = self.second_errors = 0

    @staticmethod
    def _add(counts: np.ndarray, codes: np.ndarray, latencies: list[int]) -> np.ndarray:
        buckets = bucket_indexes(np.asarray(latencies, dtype=np.int64))
        counts += np.bincount(codes * COUNTS_LEN + buckets, minlength=counts.size).reshape(counts.shape)
        return buckets

    def result(self) -> dict[str, OpRecord]:
        """Per entry: counts, encoded histograms, bytes and errors (docs/contracts.md)."""
        self.flush()
        out: dict[str, OpRecord] = {}
        for i, name in enumerate(self.entries):
            rows = self.counts[i * 4 : i * 4 + 4]
            per_outcome = rows.sum(axis=1)
            uncorrected = None
            if self.counts_uncorrected is not None:
                rows_u = self.counts_uncorrected[i * 4 : i * 4 + 4]
                uncorrected = {OUTCOMES[o]: Histogram(rows_u[o].copy()).encode() for o in range(4) if per_outcome[o]}
            out[name] = OpRecord(
                count=int(per_outcome.sum()),
                hits=int(per_outcome[HIT]),
                misses=int(per_outcome[MISS]),
                errors=dict(self.errors[i]),
                bytes_out=self.bytes_out[i],
                bytes_in=self.bytes_in[i],
                histograms={OUTCOMES[o]: Histogram(rows[o].copy()).encode() for o in range(4) if per_outcome[o]},
                histograms_uncorrected=uncorrected,
            )
        return out

    def series(self) -> list[dict[str, Any]]:
        return self.timeseries
