"""Traces in: streaming readers of real cache traces, cachemark's own trace format, and statistics.

Owns the public names of the package: :func:`open_trace` (a :class:`TraceReader` over a plain or
zstd-compressed file in one of :data:`FORMATS`, yielding batches of :data:`RECORD_DTYPE` or
:class:`Record` objects in constant memory), :class:`TraceWriter` (the ``#cachemark-trace/1``
format, keys hashed unless asked otherwise) and :func:`trace_stats` (objects, requests, op mix,
one-hit wonders, Zipf slope, size/TTL distributions, request rate). docs/traces.md has the
formats and the own format's specification.
"""

from .formats import FORMATS, detect_format, oracle_bytes
from .reader import TraceReader, open_trace
from .record import OPS, RECORD_DTYPE, Batch, Problems, Record, key_hash, key_hashes
from .stats import StatsBuilder, TraceStats, fit_zipf, trace_stats
from .writer import TraceWriter

__all__ = [
    "FORMATS", "OPS", "RECORD_DTYPE", "Batch", "Problems", "Record", "StatsBuilder", "TraceReader", "TraceStats",
    "TraceWriter", "detect_format", "fit_zipf", "key_hash", "key_hashes", "open_trace", "oracle_bytes", "trace_stats",
]
