"""Runs for ``?client=engine`` targets: the same workload, driven by the Rust engine.

Translates a :class:`~cachemark.spec.Workload` phase into the engine's config
(docs/engine.md), runs it, and shapes the answer exactly like the Python workers'
phases, so tables, reports and comparisons never need to know which side measured.
"""

from __future__ import annotations

from typing import Any

from ..errors import UnsupportedOp
from ..measure.summary import summary_from_result
from ..spec import Phase, Workload
from ..target import Target
from ..workload.keys import KeyDist

ENGINE_OPS = {"get": "get", "set": "set", "delete": "delete", "exists": "exists", "incr": "incr",
              "get_many": "mget"}


def engine_mix(phase: Phase, workload: Workload) -> list[dict[str, Any]]:
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
    return {"count": workload.keys, "prefix": namespace, "dist": dist.kind, "zipf_s": dist.s,
            "hot_fraction": dist.hot_fraction, "hot_prob": dist.hot_probability}


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
    })
    config.setdefault("connections", workload.workers)
    return config


def run_engine_phases(target: Target, workload: Workload, namespace: str, monitor: Any = None) -> list[dict[str, Any]]:
    """Every phase of ``workload`` on the engine, as phase dicts of the results schema.

    Prefill and warm-up run as separate, discarded engine calls, so the server sampler
    (``monitor``) sees exactly the timed part, as it does for the Python workers.
    """
    from ..engine import run_load

    phases = []
    for index, phase in enumerate(workload.effective_phases()):
        config = phase_config(target, workload, phase, namespace, index == 0)
        if config["prefill"]:
            fill = {**config, "prefill": True, "ops": 1, "duration_s": 60.0, "warmup_s": 0.0, "mode": "closed",
                    "rate": None, "mix": [{"op": "get", "weight": 1}]}
            run_load(fill)
        if config["warmup_s"]:
            run_load({**config, "prefill": False, "ops": None, "duration_s": config["warmup_s"], "warmup_s": 0.0})
        config.update({"prefill": False, "warmup_s": 0.0})
        if monitor is not None:
            monitor.phase_coming(index)
            monitor.phase_started(index)
        result = run_load(config)
        total = sum(op["count"] for op in result["ops"].values())
        if monitor is not None:
            monitor.phase_ended(index, total)
        wall_s = result["wall_s"]
        # the same op names and order as the Python workers report (the engine says mget for get_many)
        ours = {engine: name for name, engine in ENGINE_OPS.items()}
        order = list(phase.mix or workload.mix)
        renamed = {ours.get(name, name): op for name, op in result["ops"].items()}
        result["ops"] = dict(sorted(renamed.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99))
        for op in result["ops"].values():
            op["summary"] = summary_from_result(op, wall_s)
            if op.get("histograms_uncorrected"):
                op["summary_uncorrected"] = summary_from_result(op, wall_s, corrected=False)
        phases.append({
            "name": phase.name,
            "mode": config["mode"],
            "rate": phase.rate,
            "workers": config.get("threads", 1),
            "wall_s": wall_s,
            "client_cpu_s": result["client_cpu_s"],
            "interrupted": result.get("interrupted", False),
            "error_samples": result.get("errors_sample", [])[:5],
            "ops": result["ops"],
            "timeseries": result.get("timeseries", []),
            "engine": {k: config.get(k) for k in ("protocol", "threads", "connections", "pipeline")}
            | {"wire_bytes_out": result.get("wire_bytes_out"), "wire_bytes_in": result.get("wire_bytes_in")},
        })
        if monitor is not None:
            monitor.attach(index, phases[-1])
        if result.get("interrupted"):
            break
    return phases
