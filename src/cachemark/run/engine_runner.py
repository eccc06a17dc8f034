"""Runs for ``?client=engine`` targets: the same workload, driven by the Rust engine.

Translates a :class:`~cachemark.spec.Workload` phase into the engine's config
(docs/engine.md), runs it, and shapes the answer exactly like the Python workers'
phases, so tables, reports and comparisons never need to know which side measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import BackendUnavailable, PrefillFailed, UnsupportedOp
from ..measure.outage import merge_outages
from ..measure.summary import OpRecord
from ..results.phase_record import PhaseRecord
from ..schemes import find_scheme
from ..spec import Phase, Workload
from ..target import Target
from ..workload.keys import KeyDist, key_lengths
from .error_policy import error_grace
from .load_path import PREFILL, ProgressFn

ENGINE_OPS = {"get": "get", "set": "set", "delete": "delete", "exists": "exists", "incr": "incr",
              "get_many": "mget"}


def engine_mix(phase: Phase, workload: Workload) -> list[dict[str, Any]]:
    if phase.sequence:  # the engine draws its ops in Rust, by weight
        raise UnsupportedOp(f"phase {phase.name!r}: the native engine does not run a sequence of steps in order; "
                            "the Python workers and the drivers do")
    mix = []
    for name, weight in (phase.mix or workload.mix).items():
        if name not in ENGINE_OPS:
            raise UnsupportedOp(f"the native engine does not run {name!r}; it runs {', '.join(ENGINE_OPS)}")
        entry: dict[str, Any] = {"op": ENGINE_OPS[name], "weight": weight}
        if name == "get_many":
            entry["count"] = workload.get_many_count
        mix.append(entry)
    return mix


def engine_keys(phase: Phase, workload: Workload, namespace: str) -> dict[str, Any]:
    dist = KeyDist.parse(phase.key_dist or workload.key_dist)
    keys = {"count": workload.keys, "prefix": namespace, "dist": dist.kind, "zipf_s": dist.s,
            "hot_fraction": dist.hot_fraction, "hot_prob": dist.hot_probability}
    lengths = key_lengths(workload.key_size)
    if lengths:
        keys["lengths"] = list(lengths)  # key i's padded length: the table the Python workers use
    return keys


def engine_values(workload: Workload) -> dict[str, Any]:
    sizes = workload.sizes
    if sizes.kind == "range":
        return {"min": sizes.sizes[0], "max": sizes.sizes[1]}
    weights = sizes.weights or (1.0,) * len(sizes.sizes)
    return {"sizes": [[s, w] for s, w in zip(sizes.sizes, weights, strict=True)]}


def phase_config(target: Target, workload: Workload, phase: Phase, namespace: str, first: bool) -> dict[str, Any]:
    from ..engine import target_config

    config = target_config(target)
    config.update({
        "mode": "open" if phase.rate else "closed",
        "rate": phase.rate,
        "arrival": phase.arrival or workload.arrival,
        "duration_s": phase.duration or 3600.0,
        "ops": phase.ops,
        "warmup_s": phase.warmup or 0.0,
        "prefill": workload.prefill and first,
        "keys": engine_keys(phase, workload, namespace),
        "values": engine_values(workload),
        "mix": engine_mix(phase, workload),
        "ttl_s": int(workload.ttl),
        "verify_fraction": workload.verify_reads,
        "seed": workload.seed,
        "on_error": workload.on_error,
        # a target that fails over (Sentinel) is given its scheme's grace, as on the Python path
        "error_grace_s": error_grace(workload, target) or workload.error_grace,
    })
    config.setdefault("connections", workload.workers)
    if workload.trace is not None and workload.trace.prepared:  # a recorded trace, each key on one connection
        from ..workload.replay import engine_stream

        config["replay"] = {"dir": engine_stream(workload.trace.prepared, workload.workers)}
    return config


def run_engine_phases(target: Target, workload: Workload, namespace: str, monitor: Any = None,
                      progress: ProgressFn | None = None) -> list[PhaseRecord]:
    """Every phase of ``workload`` on the engine, as phase records of the results schema.

    Prefill and warm-up run as separate, discarded engine calls, so the server sampler
    (``monitor``) sees exactly the timed part, as it does for the Python workers.
    A run ends at the first phase that Ctrl-C (SIGTERM, SIGHUP) or the on-error policy cut
    short; when that happened during its prefill or warm-up, the phase is reported with no
    ops and ``interrupted`` or ``stopped_on_errors`` set, so the runner still sees why.
    """
    from ..engine import run_load

    row = find_scheme(target.scheme)
    failover_s = row.failover_grace if row is not None else None
    phases = []
    for index, phase in enumerate(workload.effective_phases()):
        config = phase_config(target, workload, phase, namespace, index == 0)
        follow = _primary_now(target) if failover_s is not None else None
        cut = _run_untimed(config, failover_s, follow, _prefill_progress(progress, workload.keys))
        if cut is not None:  # nothing of this phase was timed
            untimed = {"wall_s": 0.0, "client_cpu_s": 0.0, "missed": 0, "wire_bytes_out": 0, "wire_bytes_in": 0}
            phases.append(_phase_record(phase, config, cut | untimed, {}))
            break
        config.update({"prefill": False, "warmup_s": 0.0})
        if follow is not None:
            follow(config)
        if monitor is not None:
            monitor.phase_coming(index)
            monitor.phase_started(index)
        result = run_load(config)
        ops = _our_ops(phase, workload, result)
        if monitor is not None:
            monitor.phase_ended(index, sum(op.count for op in ops.values()))
        summarized = {name: op.summarized(result["wall_s"]) for name, op in ops.items()}
        record = _phase_record(phase, config, result, summarized)
        phases.append(monitor.attach(index, record) if monitor is not None else record)
        if _cut_short(result):
            break
    return phases


def _cut_short(result: dict[str, Any]) -> bool:
    return bool(result.get("interrupted") or result.get("stopped_on_errors"))


def _primary_now(target: Target) -> Callable[[dict[str, Any]], None]:
    """For a target that fails over (Sentinel): puts the primary its Sentinels name now in an
    engine config, so each engine call starts there (the engine follows a failover itself
    only once it runs)."""
    from ..engine import target_config

    def follow(config: dict[str, Any]) -> None:
        config["servers"] = target_config(target)["servers"]

    return follow


def _prefill_progress(progress: ProgressFn | None, keys: int) -> Callable[[int], None] | None:
    """The engine's prefill told as the workers' is (its requests answered, as keys written)."""
    if progress is None:
        return None
    started = time.monotonic()

    def told(done: int) -> None:
        progress(PREFILL, min(done, keys), keys, time.monotonic() - started, None)

    return told


def _run_untimed(config: dict[str, Any], failover_s: float | None = None,
                 follow: Callable[[dict[str, Any]], None] | None = None,
                 progress: Callable[[int], None] | None = None) -> dict[str, Any] | None:
    """The phase's prefill and warm-up, each its own discarded engine call; the result of
    the one that was cut short (a Ctrl-C the engine swallowed would otherwise be lost), else None.

    A target that fails over (``failover_s``: Sentinel) has a prefill that lost writes run again
    until one loses none, for that long, each time on the primary its Sentinels name then
    (``follow``): the prefill is untimed and its SETs write the same values, so a failover during
    it is waited out, as the Python workers wait it out batch by batch."""
    from ..engine import run_load

    calls = []
    if config["prefill"]:
        calls.append({**config, "prefill": True, "ops": 1, "duration_s": 60.0, "warmup_s": 0.0, "mode": "closed",
                      "rate": None, "mix": [{"op": "get", "weight": 1}]})
    if config["warmup_s"]:
        calls.append({**config, "prefill": False, "ops": None, "duration_s": config["warmup_s"], "warmup_s": 0.0})
    for call in calls:
        deadline = time.monotonic() + (failover_s or 0.0)
        while True:
            try:
                if follow is not None:
                    follow(call)
                result = run_load(call, progress if call["prefill"] else None)
            except BackendUnavailable:
                if not (call["prefill"] and time.monotonic() < deadline):
                    raise
                time.sleep(0.5)  # the Sentinels still name the primary that is gone
                continue
            if _cut_short(result):
                return result
            if not (call["prefill"] and result.get("prefill_errors")):
                break
            if time.monotonic() >= deadline:
                raise PrefillFailed(_refusal(call, result))
            time.sleep(0.5)  # the Sentinels are promoting a replica; then every key is written again
    return None


def _refusal(config: dict[str, Any], result: dict[str, Any]) -> str:
    """The engine's prefill refusals as one line, like the Python workers' (worker.Worker._refusal)."""
    values = config["values"]
    sizes = [s for s, _ in values["sizes"]] if "sizes" in values else [values["min"], values["max"]]
    shown = f"{sizes[0]:,}-byte values" if len(set(sizes)) == 1 else f"values of {min(sizes):,}–{max(sizes):,} bytes"
    server = "redis" if config["protocol"].startswith("resp") else "memcached"
    sample = next(iter(result.get("errors_sample") or []), "")
    refused, keys = result["prefill_errors"], config["keys"]["count"]
    return f"{server} refused {shown} during prefill ({refused:,} of {keys:,} writes refused): {sample}"


def _our_ops(phase: Phase, workload: Workload, result: dict[str, Any]) -> dict[str, OpRecord]:
    """The result's ops, read once, under the Python workers' names and order (the engine says mget
    for get_many); each keeps the engine's own keys, in its order, and its encoded histograms."""
    ours = {engine: name for name, engine in ENGINE_OPS.items()}
    order = list(phase.mix or workload.mix)
    renamed = {ours.get(name, name): op for name, op in result["ops"].items()}
    ordered = sorted(renamed.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)
    return {name: OpRecord.from_json(op) for name, op in ordered}


def _phase_record(phase: Phase, config: dict[str, Any], result: dict[str, Any],
                  ops: dict[str, OpRecord]) -> PhaseRecord:
    # the engine's threads' windows are on perf_counter_ns's clock, as the Python workers' are
    outages = merge_outages([result.get("write_outages") or []], result.get("start_ns", 0))
    return PhaseRecord(
        name=phase.name,
        mode=config["mode"],
        rate=phase.rate,
        workers=config.get("threads", 1),
        wall_s=result["wall_s"],
        client_cpu_s=result["client_cpu_s"],
        interrupted=result.get("interrupted", False),
        stopped_on_errors=result.get("stopped_on_errors"),
        missed=result.get("missed", 0),
        error_samples=result.get("errors_sample", [])[:5],
        ops=ops,
        timeseries=result.get("timeseries", []),
        cluster=result.get("cluster") or None,
        write_outages=outages or None,
        engine={k: config.get(k) for k in ("protocol", "threads", "connections", "pipeline")}
        | {"wire_bytes_out": result.get("wire_bytes_out"), "wire_bytes_in": result.get("wire_bytes_in")},
    )
