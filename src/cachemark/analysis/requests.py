"""A stream of cache requests held as columns: what server sizing simulates and replays.

Owns :class:`Requests` (per request: time, op, object id, key and value sizes, TTL — the trace's
own ops, kept, because the hit ratio an application sees depends on them: a get miss fills the
cache under cache-aside, a set writes, a delete removes, a TTL expires on the trace's clock),
its loaders (:func:`from_trace`, :func:`from_workload`), :func:`generate` (a trace with variable
object sizes correlated with popularity, TTLs and deletes, for tests and demonstrations) and
:func:`write_trace` (cachemark's own trace format).

Held in memory: about 30 bytes a request (10⁶ requests: 30 MB); ``sample_rate`` keeps a spatial
sample of the objects (SHARDS: every request of the objects whose hash falls under the rate),
which the sizing then scales back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..workload.traces.record import DELETE, GET, OP_CODE, OPS, SET, mix64

FETCH = OP_CODE["fetch"]
SAMPLE_BITS = 24


@dataclass
class Requests:
    """Columns of equal length; ``ttl_s`` 0: no TTL; ``t_us`` from the trace's clock."""

    t_us: np.ndarray  # i8
    op: np.ndarray  # u1: cachemark's op codes (traces.record.OPS)
    ids: np.ndarray  # u8
    key_size: np.ndarray  # u4
    value_size: np.ndarray  # u4
    ttl_s: np.ndarray  # u4
    description: str = ""
    sample_rate: float = 1.0

    def __len__(self) -> int:
        return len(self.op)

    @property
    def gets(self) -> int:
        return int(np.count_nonzero((self.op == GET) | (self.op == FETCH)))

    def op_counts(self) -> dict[str, int]:
        codes, counts = np.unique(self.op, return_counts=True)
        return {OPS[c]: int(n) for c, n in zip(codes.tolist(), counts.tolist(), strict=True)}

    @property
    def objects(self) -> int:
        return int(len(np.unique(self.ids)))

    @property
    def span_s(self) -> float:
        return float(self.t_us[-1] - self.t_us[0]) / 1e6 if len(self) else 0.0

    def sampled(self, rate: float, seed: int = 0) -> Requests:
        """The requests of a spatial sample of the objects (SHARDS): ``rate`` of them, by hash."""
        if not 0 < rate <= 1:
            raise UserError(f"sample rate {rate!r}: must be in (0, 1]")
        if rate == 1:
            return self
        keep = (mix64(self.ids ^ np.uint64(seed)) >> np.uint64(64 - SAMPLE_BITS)) < int(rate * (1 << SAMPLE_BITS))
        return Requests(self.t_us[keep], self.op[keep], self.ids[keep], self.key_size[keep], self.value_size[keep],
                        self.ttl_s[keep], self.description, self.sample_rate * rate)


def _columns(t_us, op, ids, key_size, value_size, ttl_s, description: str) -> Requests:  # noqa: ANN001
    r = Requests(np.ascontiguousarray(t_us, dtype=np.int64), np.ascontiguousarray(op, dtype=np.uint8),
                 np.ascontiguousarray(ids, dtype=np.uint64), np.ascontiguousarray(key_size, dtype=np.uint32),
                 np.ascontiguousarray(value_size, dtype=np.uint32), np.ascontiguousarray(ttl_s, dtype=np.uint32),
                 description)
    _fill_in(r)
    return r


def _fill_in(r: Requests) -> None:
    """A request that does not say its object's size or TTL (a get in many formats) takes the
    object's own from its other requests: what a cache-aside fill writes is the object as the
    application stores it. An object never sized counts 1 byte."""
    if not len(r):
        return
    objects, index = np.unique(r.ids, return_inverse=True)
    for column in (r.value_size, r.key_size, r.ttl_s):
        known = np.zeros(len(objects), dtype=np.uint32)
        given = (column > 0) & (r.op != DELETE)
        np.maximum.at(known, index[given], column[given])
        missing = (column == 0) & (r.op != DELETE)
        column[missing] = known[index[missing]]
    np.maximum(r.value_size, (r.op != DELETE).astype(np.uint32), out=r.value_size)


def from_trace(path: str | Path, format: str | None = None, limit: int | None = None) -> Requests:
    """A trace file in any format ``open_trace`` reads, every op kept (gets, sets, deletes, …)."""
    from ..workload.traces import open_trace

    parts = []
    count = 0
    for batch in open_trace(path, format).batches():
        records = batch.records
        if limit is not None:
            records = records[: max(0, limit - count)]
        parts.append(records)
        count += len(records)
        if limit is not None and count >= limit:
            break
    if not count:
        raise UserError(f"{Path(path).name}: no requests in the trace")
    r = np.concatenate(parts)
    order = np.argsort(r["t_us"], kind="stable")  # a merged capture may be out of order by a tick
    r = r[order]
    return _columns(r["t_us"], r["op"], r["key_hash"], r["key_size"], r["value_size"], r["ttl_s"],
                    f"trace {Path(path).name}")


def from_workload(keys: int, key_dist: str, value_size: object, requests: int, seed: int = 0,
                  key_size: int = 16, rate: float = 10_000.0) -> Requests:
    """A synthetic workload as gets under cache-aside (what ``fetch`` does), ``rate`` a second."""
    from .mrc import workload_stream

    ids, sizes = [], []
    for chunk_ids, chunk_sizes in workload_stream(keys, key_dist, value_size, requests, seed):
        ids.append(chunk_ids)
        sizes.append(chunk_sizes)
    n = requests
    return _columns((np.arange(n) * (1e6 / rate)).astype(np.int64), np.full(n, GET), np.concatenate(ids),
                    np.full(n, key_size), np.concatenate(sizes), np.zeros(n),
                    f"{keys:,} keys ({key_dist}), values {value_size} B, {n:,} gets")


def generate(requests: int = 200_000, objects: int = 20_000, alpha: float = 0.9, rate: float = 20_000.0,
             set_share: float = 0.1, delete_share: float = 0.02, ttl_share: float = 0.5,
             ttl_s: tuple[int, int] = (2, 30), seed: int = 0) -> Requests:
    """A trace as a cache-aside application makes one: Zipf(``alpha``) popularity, object sizes
    log-normal (median ~4 KB for the most popular, ~200 B for the least, up to 40 KB): sizes
    *correlated with popularity*, so objects × mean bytes misjudges
    the memory; ``set_share`` of requests are writes, ``delete_share`` deletes; ``ttl_share`` of
    the objects carry a TTL from ``ttl_s``; ``rate`` requests a second on the trace's clock."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, objects + 1, dtype=np.float64)
    cdf = np.cumsum(ranks ** -alpha)
    drawn = np.minimum(np.searchsorted(cdf / cdf[-1], rng.random(requests)), objects - 1)
    # popularity rank r: the popular objects are the large ones (rendered pages next to rarely read
    # small keys): the median size falls from ~4 KB for the first to ~200 B for the last
    median = 4000.0 * ranks ** -0.3
    size_of = np.clip(rng.lognormal(np.log(median), 0.8), 8, 40_000).astype(np.uint32)
    key_of = rng.integers(10, 40, objects).astype(np.uint32)
    ttl_of = np.where(rng.random(objects) < ttl_share, rng.integers(ttl_s[0], ttl_s[1] + 1, objects), 0)
    ids = rng.permutation(objects).astype(np.uint64)[drawn] + np.uint64(1)
    u = rng.random(requests)
    op = np.where(u < delete_share, DELETE, np.where(u < delete_share + set_share, SET, GET)).astype(np.uint8)
    t_us = (np.arange(requests) * (1e6 / rate)).astype(np.int64)
    value = size_of[drawn]
    return _columns(t_us, op, ids, key_of[drawn], np.where(op == DELETE, 0, value),
                    np.where(op == DELETE, 0, ttl_of[drawn]),
                    f"generated: {requests:,} requests over {objects:,} objects (Zipf {alpha}, sizes by "
                    f"popularity, {set_share:.0%} sets, {delete_share:.0%} deletes, TTLs on {ttl_share:.0%})")


def write_trace(requests: Requests, path: str | Path) -> Path:
    """The requests in cachemark's own trace format (keys by their hash; sizes, TTLs kept)."""
    from ..workload.traces import RECORD_DTYPE, TraceWriter

    records = np.zeros(len(requests), dtype=RECORD_DTYPE)
    records["t_us"], records["op"], records["key_hash"] = requests.t_us, requests.op, requests.ids
    records["key_size"], records["value_size"], records["ttl_s"] = (requests.key_size, requests.value_size,
                                                                     requests.ttl_s)
    with TraceWriter(path) as writer:
        writer.write_records(records)
    return Path(path)
