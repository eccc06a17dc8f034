"""Sizing a real server for the hit ratio the application sees — and checking it on that server.

How to call it::

    from cachemark.analysis import requests as rq
    from cachemark.analysis.server_size import load, size_server, verify

    reqs = load("app.trace.zst")                    # any trace format (format="twitter", …); or
                                                    # rq.from_workload(keys, "zipf:0.99", "100-1000", n), rq.generate()
    sized = size_server(reqs, "redis", target=0.9)  # "memcached", "memory"; or settings=[...] instead of target
    sized.setting, sized.spawn_url                  # e.g. 9712345, "spawn:redis?maxmemory=9712345&…"
    sized.predicted                                 # the simulated get hit ratio at that setting
    sized.curves                                    # per policy, by bytes and objects (OpsCurve)
    check = verify(sized, reqs)                     # spawn, replay, measure
    check.measured, check.predicted, check.within   # get hit ratios; |difference| ≤ 0.02?

What is counted, everywhere here: **get hits ÷ gets**, under the trace's own ops — a get that
misses fills the cache (cache-aside), a set writes, a delete removes, a TTL expires on the
trace's clock; sets and deletes are never counted as hits or misses. Each capacity is simulated
request by request (``engine/sim/src/ops.rs``), so the figures are exact for the policy
simulated, not interpolated from a stack-distance curve.

Curves: ``lru``, ``fifo``, ``sieve`` by bytes (an object costs its key + value bytes, as
libCacheSim's object size) and by objects (1 each); with ``sample_rate`` < 1 these are SHARDS
estimates (a spatial sample of the objects at a capacity scaled alike). The servers' own curves
are by their setting: Redis ``maxmemory`` (its sampled LRU against ``used_memory``, base memory
and per-key overhead measured), memcached ``-m`` (slab classes, one LRU per class), ``memory://``
``max_entries`` (an LRU of entries, expired ones dropped only when read) — :mod:`.server_model`
says how each is modelled. A server's size for a target is found by regula falsi on its setting
with the simulation itself (Redis: within 1 %; memcached: the exact MiB; memory://: the entry).
``verify`` replays on the real server (:mod:`.server_replay`: TTLs and the clock divided by the
replay's speed) and compares with the simulation on the clock the replay kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._engine import OpsSim
from ..errors import UserError
from .requests import Requests, from_trace
from .server_model import (
    ENTRIES,
    MAXMEMORY,
    MEMCACHED_MIN_MB,
    MEMORY_MB,
    ServerModel,
    measure_redis,
    memcached_model,
    memory_model,
    replay_key_size,
)

SERVERS = ("redis", "memcached", "memory")
POLICIES = ("lru", "fifo", "sieve")
TOLERANCE = 0.02
MAX_REPLAY_RATE = 40_000.0  # requests a second the replay (one pipelined client) keeps up with; 80,000 quiet
CHUNK = 1 << 20


@dataclass
class OpsCurve:
    """Get hit ratio at each size of one policy. ``unit``: "bytes" (cache capacity), "objects",
    or the server's parameter ("maxmemory" bytes, "memory_mb"); ``bytes``: each point's memory
    in bytes (for a server: the memory its setting stands for)."""

    policy: str
    unit: str
    sizes: list[float]
    bytes: list[float]
    hit_ratios: list[float]
    gets: int
    sample_rate: float = 1.0

    @property
    def miss_ratios(self) -> list[float]:
        return [1.0 - h for h in self.hit_ratios]

    def size_for(self, hit_ratio: float) -> float | None:
        """The smallest size whose hit ratio reaches ``hit_ratio`` (interpolated in log size)."""
        xs, ys = self.sizes, self.hit_ratios
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            if y >= hit_ratio - 1e-12:
                if i == 0 or ys[i - 1] == y:
                    return x
                f = (hit_ratio - ys[i - 1]) / (y - ys[i - 1])
                return math.exp(math.log(xs[i - 1]) + f * (math.log(x) - math.log(xs[i - 1])))
        return None

    def points(self) -> list[dict[str, float]]:
        return [{"size": s, "bytes": b, "hit_ratio": h, "miss_ratio": 1.0 - h}
                for s, b, h in zip(self.sizes, self.bytes, self.hit_ratios, strict=True)]


def load(source: str | Path | Requests, format: str | None = None, limit: int | None = None) -> Requests:
    """The requests of a trace file (any format ``open_trace`` reads), or ``source`` itself."""
    if isinstance(source, Requests):
        return source
    return from_trace(source, format, limit)


def _feed(sim: OpsSim, r: Requests, sizes: np.ndarray, time_us: np.ndarray | None = None,
          ttl_us: np.ndarray | None = None) -> None:
    t = r.t_us if time_us is None else time_us
    ttl = (r.ttl_s.astype(np.int64) * 1_000_000) if ttl_us is None else ttl_us
    for a in range(0, len(r), CHUNK):
        b = a + CHUNK
        sim.feed(np.ascontiguousarray(t[a:b], dtype="<i8").tobytes(), r.op[a:b].tobytes(),
                 np.ascontiguousarray(r.ids[a:b], dtype="<u8").tobytes(),
                 np.ascontiguousarray(sizes[a:b], dtype="<u4").tobytes(),
                 np.ascontiguousarray(ttl[a:b], dtype="<i8").tobytes())


def simulate(r: Requests, policy: str, capacities: Sequence[float], sizes: np.ndarray | None = None,
             model: ServerModel | None = None, warmup: int = 0, seed: int = 0, time_us: np.ndarray | None = None,
             ttl_us: np.ndarray | None = None) -> list[float]:
    """The get hit ratio at each capacity (in the unit of ``sizes``: bytes charged per request;
    None: key + value bytes) of ``policy`` (lru, fifo, sieve, redis, memcached)."""
    if sizes is None:
        sizes = _object_bytes(r)
    chunks = model.chunks if model is not None and model.param == MEMORY_MB else None
    samples = model.samples if model is not None else 5
    lazy = model is not None and model.lazy_expiry
    sim = OpsSim(policy, [max(1, int(c)) for c in capacities], samples, chunks, warmup, seed, lazy)
    _feed(sim, r, sizes, time_us, ttl_us)
    return [hits / gets if gets else 0.0 for gets, hits, *_ in sim.counts()]


def _object_bytes(r: Requests) -> np.ndarray:
    return np.clip(r.key_size.astype(np.int64) + r.value_size, 1, 2**32 - 1).astype(np.uint32)


def _footprint(r: Requests, sizes: np.ndarray) -> float:
    """Bytes of every distinct object at its largest size: a cache this big misses only cold."""
    _, index = np.unique(r.ids, return_inverse=True)
    largest = np.zeros(index.max() + 1 if len(index) else 0, dtype=np.int64)
    np.maximum.at(largest, index, sizes.astype(np.int64))
    return float(largest.sum())


def byte_grid(largest: float, points: int = 16, extra: Sequence[float] = ()) -> list[float]:
    low = max(1.0, largest / 1000)
    grid = np.geomspace(low, max(largest, low * 2), points)
    return sorted({float(round(x)) for x in grid} | {float(x) for x in extra})


def curves(r: Requests, policies: Sequence[str] = POLICIES, points: int = 16, sizes: Sequence[float] = (),
           objects: bool = True, sample_rate: float = 1.0, seed: int = 0, warmup: int = 0) -> list[OpsCurve]:
    """Per policy, the get hit ratio by bytes (and by objects): ``points`` sizes up to the whole
    footprint, plus the named ``sizes`` (bytes). ``sample_rate`` < 1: SHARDS estimates."""
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise UserError(f"policy {unknown[0]!r}: choose from {', '.join(POLICIES)}")
    sample = r.sampled(sample_rate, seed)
    if not sample.gets:
        raise UserError("no gets in the requests: the hit ratio the application sees is of gets")
    out = []
    nbytes = _object_bytes(sample)
    full_bytes = _footprint(sample, nbytes) / sample.sample_rate
    full_objects = sample.objects / sample.sample_rate
    units = [("bytes", byte_grid(full_bytes, points, sizes), nbytes)]
    if objects:
        units.append(("objects", byte_grid(full_objects, points), np.ones(len(sample), dtype=np.uint32)))
    mean_bytes = full_bytes / max(full_objects, 1)
    for policy in policies:
        for unit, grid, charged in units:
            scaled = [max(1.0, c * sample.sample_rate) for c in grid]
            hits = simulate(sample, policy, scaled, charged, seed=seed, warmup=int(warmup * sample.sample_rate))
            as_bytes = list(grid) if unit == "bytes" else [g * mean_bytes for g in grid]
            out.append(OpsCurve(policy, unit, list(grid), as_bytes, hits, sample.gets, sample.sample_rate))
    return out


def model_for(server: str, r: Requests, samples: int = 5, eviction: str = "allkeys-lru") -> ServerModel:
    """The server's model, measured where it must be (Redis: on a spawned server, evicting by its
    ``maxmemory-policy`` ``eviction``)."""
    models = {"redis": lambda: measure_redis(r, samples=samples, eviction=eviction), "memcached": memcached_model,
              "memory": lambda: memory_model(r)}
    if server not in models:
        raise UserError(f"server {server!r}: choose from {', '.join(SERVERS)}")
    return models[server]()


def server_curve(r: Requests, model: ServerModel, settings: Sequence[int] = (), points: int = 16,
                 seed: int = 0, warmup: int = 0) -> OpsCurve:
    """Get hit ratio at each setting of the server (default: ``points`` up to the footprint)."""
    charged = model.charge(r.key_size, r.value_size, r.ttl_s)
    if not settings:
        footprint = _footprint(r, model.chunk_of(charged) if model.param == MEMORY_MB else charged)
        settings = model.settings_grid(footprint * (1.0 if model.param == ENTRIES else 1.1), points)
    settings = sorted({int(s) for s in settings})
    hits = simulate(r, model.policy, [model.capacity(s) for s in settings], charged, model, warmup, seed)
    return OpsCurve(model.server, model.param, [float(s) for s in settings],
                    [float(model.setting_bytes(s)) for s in settings], hits, r.gets)


@dataclass
class ServerSize:
    """A server's setting for a target (or asked-for settings), with what it predicts."""

    server: str
    param: str  # the spawn URL's parameter: maxmemory | memory_mb
    setting: int | None  # None: no setting up to the footprint reaches the target
    bytes: int | None  # the memory the setting stands for
    predicted: float | None  # simulated get hit ratio at the setting
    target: float | None
    spawn_params: dict[str, object]
    spawn_url: str | None
    model: ServerModel
    curve: OpsCurve  # the server's own, by its setting
    curves: list[OpsCurve] = field(default_factory=list)  # lru/fifo/sieve by bytes and objects
    naive_bytes: float | None = None  # objects × mean bytes per item, for comparison
    naive_predicted: float | None = None  # what the server would give at that naive size (simulated)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"server": self.server, "param": self.param, "setting": self.setting, "bytes": self.bytes,
                "predicted_hit_ratio": self.predicted, "target_hit_ratio": self.target,
                "spawn_params": self.spawn_params, "spawn_url": self.spawn_url,
                "naive_bytes": self.naive_bytes, "naive_predicted_hit_ratio": self.naive_predicted,
                "counted": "get hits / gets; a get miss fills (cache-aside), sets write, deletes remove, "
                           "TTLs expire on the trace's clock",
                "curve": {"policy": self.curve.policy, "unit": self.curve.unit, "points": self.curve.points()},
                "curves": [{"policy": c.policy, "unit": c.unit, "sample_rate": c.sample_rate, "points": c.points()}
                           for c in self.curves],
                "notes": self.notes}


def _bisect(r: Requests, model: ServerModel, charged: np.ndarray, target: float, low: int, high: int,
            seed: int, warmup: int, h_low: float, h_high: float) -> tuple[int, float]:
    """The smallest setting in (low, high] reaching ``target`` (Redis: within 1 %), by regula falsi
    in log setting: each step one simulation, placed where the bracket's line meets the target."""
    def done() -> bool:
        return high - low <= (max(1, high * 0.01) if model.param == MAXMEMORY else 1)

    for _ in range(12):
        if done():
            break
        lo, hi = math.log(max(low, 1)), math.log(high)
        f = (target - h_low) / (h_high - h_low) if h_high > h_low else 0.5
        mid = int(math.exp(lo + min(0.9, max(0.1, f)) * (hi - lo)))  # never at an end: the bracket shrinks
        mid = min(high - 1, max(low + 1, mid))
        h = simulate(r, model.policy, [model.capacity(mid)], charged, model, warmup, seed)[0]
        if h >= target:
            high, h_high = mid, h
        else:
            low, h_low = mid, h
    return high, h_high


def size_server(r: Requests, server: str, target: float | None = None, settings: Sequence[int] = (),
                points: int = 16, policies: Sequence[str] = POLICIES, sample_rate: float = 1.0,
                samples: int = 5, model: ServerModel | None = None, seed: int = 0, warmup: int = 0,
                curve: OpsCurve | None = None, eviction: str = "allkeys-lru") -> ServerSize:
    """The ``server``'s setting for a ``target`` get hit ratio (or its curve at ``settings``).

    ``r``: :class:`~.requests.Requests`; ``server``: redis | memcached; ``samples``: Redis's
    ``maxmemory-samples``; ``model``: a measured :class:`ServerModel` to reuse (Redis's is
    measured on a spawned server otherwise); ``policies``/``sample_rate``: the generic curves
    for the report (``()``: none); ``warmup``: requests that fill the caches uncounted (a drawn
    synthetic stream's first half: the steady state); ``curve``: the server's curve from an earlier
    call with the same requests and model (several targets: simulated once)."""
    if target is not None and not 0 < target < 1:
        raise UserError(f"target hit ratio {target!r}: between 0 and 1")
    model = model or model_for(server, r, samples, eviction)
    curve = curve or server_curve(r, model, settings, points, seed, warmup)
    charged = model.charge(r.key_size, r.value_size, r.ttl_s)
    setting = predicted = None
    notes = list(model.notes)
    if target is not None:
        above = [i for i, h in enumerate(curve.hit_ratios) if h >= target]
        if above:
            i = above[0]
            low = int(curve.sizes[i - 1]) if i else {"redis": model.base_bytes, "memcached": MEMCACHED_MIN_MB - 1
                                                     }.get(server, 0)
            h_low = curve.hit_ratios[i - 1] if i else 0.0
            setting, predicted = _bisect(r, model, charged, target, low, int(curve.sizes[i]), seed, warmup, h_low,
                                         curve.hit_ratios[i])
        else:
            notes.append(f"no setting up to {curve.sizes[-1]:,.0f} ({model.param}) reaches {target:.0%}: the best "
                         f"is {max(curve.hit_ratios):.3f} (first requests of each object, deletes and expiries "
                         "miss at any size)")
    elif settings:
        setting, predicted = int(curve.sizes[-1]), curve.hit_ratios[-1]
    naive_bytes = naive_predicted = None
    if setting is not None and predicted is not None:
        naive_bytes, naive_predicted = _naive(r, model, charged, predicted, seed, warmup)
    generic = curves(r, policies, points, sample_rate=sample_rate, seed=seed, warmup=warmup) if policies else []
    spawn_params = model.spawn_params(setting) if setting is not None else {}
    return ServerSize(server, model.param, setting, model.setting_bytes(setting) if setting is not None else None,
                      predicted, target, spawn_params, model.spawn_url(setting) if setting is not None else None,
                      model, curve, generic, naive_bytes, naive_predicted, notes)


def _naive(r: Requests, model: ServerModel, charged: np.ndarray, hit_ratio: float, seed: int, warmup: int,
           ) -> tuple[float, float]:
    """The old way: an LRU of objects counting every request but deletes as an access, the object
    count for ``hit_ratio`` × the mean bytes per item of the server (base memory left out) — and
    what the server would really give at that many bytes."""
    from .mrc import lru_curves

    keep = r.op != 2
    cached = getattr(r, "_naive_curve", None)
    if cached is None or cached[0] != warmup:
        curve, _ = lru_curves([(r.ids[keep], None)], warmup=int(np.count_nonzero(keep[:warmup])))
        cached = (warmup, curve)
        r._naive_curve = cached  # several targets, several servers: one pass
    by_objects = cached[1]
    objects = by_objects.size_for(hit_ratio) or by_objects.sizes[-1]
    _, first = np.unique(r.ids, return_index=True)
    if model.param == ENTRIES:  # entries: the object count itself is the setting
        setting = max(1, round(objects))
        got = simulate(r, model.policy, [model.capacity(setting)], charged, model, warmup, seed)[0]
        return float(model.setting_bytes(setting)), got
    per_item = float((charged if model.param == MAXMEMORY else model.chunk_of(charged))[first].mean())
    naive = objects * per_item
    setting = int(naive) if model.param == MAXMEMORY else max(1, round(naive / (1 << 20)))
    got = simulate(r, model.policy, [model.capacity(setting)], charged, model, warmup, seed)[0]
    return naive, got


@dataclass
class Verification:
    """A size checked on the real server."""

    server: str
    setting: int
    measured: float  # get hits / gets from the server's own counters
    replay_counted: float  # the same, as the replay counted it
    predicted: float  # simulated on the replay's own clock (what this replay should give)
    predicted_at_trace_clock: float  # simulated on the trace's clock (the deployment's figure)
    speed: float
    seconds: float
    behind_s: float
    evictions: int
    tolerance: float = TOLERANCE
    notes: list[str] = field(default_factory=list)

    @property
    def difference(self) -> float:
        return self.measured - self.predicted

    @property
    def within(self) -> bool:
        return abs(self.difference) <= self.tolerance

    def summary(self) -> str:
        verdict = (f"within {self.tolerance}" if self.within
                   else f"off by {self.difference:+.3f} (more than {self.tolerance})")
        return (f"{self.server} at {self.setting:,}: measured {self.measured:.3f} get hit ratio, predicted "
                f"{self.predicted:.3f} — {verdict}")

    def as_dict(self) -> dict[str, object]:
        return {"server": self.server, "setting": self.setting, "measured_hit_ratio": self.measured,
                "replay_counted_hit_ratio": self.replay_counted, "predicted_hit_ratio": self.predicted,
                "predicted_at_trace_clock": self.predicted_at_trace_clock, "difference": self.difference,
                "within": self.within, "tolerance": self.tolerance, "speed": self.speed, "seconds": self.seconds,
                "behind_s": self.behind_s, "evictions": self.evictions, "notes": self.notes}


def replay_speed(r: Requests, max_rate: float = MAX_REPLAY_RATE) -> float:
    """How much faster than recorded (below 1: slower) a replay runs so that it sends ``max_rate`` requests a
    second: what the replay keeps up with, whatever the trace's own rate (an hour's trace is not replayed in
    an hour; TTLs are scaled alike)."""
    span = max(r.span_s, 1e-6)
    return max_rate / (len(r) / span)


def verify(sized: ServerSize, r: Requests, setting: int | None = None, speed: float | None = None,
           seed: int = 0) -> Verification:
    """Spawn ``sized.server`` at its setting (or ``setting``), replay ``r`` under cache-aside,
    and compare the server's measured get hit ratio with the simulation's on the replay's clock."""
    setting = setting if setting is not None else sized.setting
    if setting is None:
        raise UserError(f"{sized.server}: no setting to verify (the target was not reached)")
    model = sized.model
    speed = speed or replay_speed(r)
    done = _replayed(model, setting, r, speed)
    charged = model.charge(r.key_size, r.value_size, r.ttl_s)
    ttl_us = (r.ttl_s.astype(np.float64) * 1e6 / speed)
    if model.param == ENTRIES:  # in process: a monotonic clock, no rounding
        ttl_us = np.where(r.ttl_s > 0, ttl_us, 0)
    elif model.param == MEMORY_MB:  # whole seconds (≥ 1) on a clock that ticks once a second: ~½ s sooner
        ttl_us = np.where(r.ttl_s > 0, np.maximum(1, np.round(r.ttl_s / speed)) * 1e6 - 5e5, 0)
    predicted = simulate(r, model.policy, [model.capacity(setting)], charged, model, seed=seed,
                         time_us=done.sent_us, ttl_us=ttl_us.astype(np.int64))[0]
    at_trace = simulate(r, model.policy, [model.capacity(setting)], charged, model, seed=seed)[0]
    notes = []
    if done.gets != done.server_gets or done.hits != done.server_hits:
        notes.append(f"the replay counted {done.hits:,}/{done.gets:,} hits, the server {done.server_hits:,}/"
                     f"{done.server_gets:,}")
    if abs(speed - 1) > 0.05:
        pace = f"{speed:.1f}× faster than recorded" if speed > 1 else f"{1 / speed:.1f}× slower than recorded"
        notes.append(f"replayed {pace}, TTLs scaled alike; the prediction it is compared with is simulated on the "
                     f"replay's clock ({at_trace:.3f} on the trace's own)")
    if done.behind_s > 1:
        notes.append(f"the replay fell up to {done.behind_s:.1f} s behind its schedule (the prediction follows "
                     "the times it kept)")
    check = Verification(model.server, setting, done.hit_ratio, done.hits / done.gets if done.gets else 0.0,
                         predicted, at_trace, speed, done.seconds, done.behind_s, done.evictions, notes=notes)
    if not check.within:
        check.notes.append(_why(check, model))
    return check


def _replayed(model: ServerModel, setting: int, r: Requests, speed: float) -> Any:
    """The replay on the configured server; a Redis that refuses its writes (over ``maxmemory`` with
    nothing left to evict: a setting within a few KB of its base memory) is one line, not a crash."""
    from .server_replay import RefusedWrites, replay

    try:
        return replay(model, setting, r, speed)
    except RefusedWrites:
        raise UserError(f"{model.server} at {model.param}={setting:,}: the server refused the replay's writes "
                        f"(used memory over maxmemory, nothing left to evict): {setting - model.base_bytes:,} B "
                        f"beyond its {model.base_bytes:,} B base leave no room for the client's own buffers; "
                        "verify a higher hit ratio (a larger size)") from None


def _why(check: Verification, model: ServerModel) -> str:
    if model.param == ENTRIES:
        return f"off by {check.difference:+.3f}: the replay's pacing against a lazily expiring LRU"
    if model.param == MAXMEMORY:
        return (f"off by {check.difference:+.3f}: Redis's used_memory also holds what the model does not "
                "charge — client buffers grown by the replay, hash tables sized for the most keys held, expired "
                "keys not yet swept — which weighs most in a small maxmemory (a few MB)")
    return (f"off by {check.difference:+.3f}: memcached's segmented LRU (hot/warm/cold), its LRU crawler and "
            "slab page moves are not simulated; the model is one plain LRU per slab class")


__all__ = ["POLICIES", "SERVERS", "OpsCurve", "ServerSize", "Verification", "curves", "load", "model_for",
           "replay_key_size", "replay_speed", "server_curve", "simulate", "size_server", "verify"]
