"""The plan of an experiment: the runs it expands into (targets × network profiles × sweep
points × repeats), each with its URL, label and workload, all checked before any starts.

Every run gets a label here: the user's, or one from the target's kind (``redis``,
``memcached(pylibmc)``, ``twolevel(memcached+file)``); two targets that would share a
label are told apart by where they point (``redis@10.0.0.5:6379``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .errors import UserError
from .results.names import run_name
from .schemes import find_scheme
from .spec import Experiment, Phase, Workload, build_experiment
from .sweep import sweep_points
from .target import Target, check_params, names_a_target, parse_target, redact, with_params
from .textfile import one_line

TARGET_PARAMS = ("connections", "pipeline")  # swept on the target URL, not the workload


@dataclass
class RunSpec:
    target: Target  # parsed once, here; everything after takes it as it is
    label: str
    workload: Workload
    sweep: dict[str, Any]
    network: Any  # a lab.network profile, or None
    repeat: int


def default_label(target: Target) -> str:
    """``redis``, ``redis(engine)``, ``memcached(pylibmc)``, ``twolevel(memcached+file)``: kind and client."""
    row = find_scheme(target.scheme)
    # the parameters the row names the run by: nested targets by their own labels, a class by its last part
    parts = [target.param(name) or "" for name in row.label_from] if row is not None else []
    if parts and all(parts):
        inner = [default_label(parse_target(v)) if names_a_target(v) else v.rsplit(".", 1)[-1]
                 for v in parts]
        return f"{target.scheme}({'+'.join(inner)})"
    kind = target.path if row is not None and row.spawner else target.scheme
    details = [v for v in (target.param("client"), target.param("tags") and f"tags={target.param('tags')}") if v]
    return f"{kind}({', '.join(details)})" if details else kind


def price_labels(label: str, target: str | Target | None) -> list[str]:
    """The names a run's price (or any per-label setting) may be given under: its label, then — where the
    label is the one its target names itself by — the label its target has with no ``client`` parameter.
    So ``redis(engine)`` is priced by ``redis = "…"`` as ``redis`` is: a label keeps its price whatever
    client measures it."""
    names = [label]
    try:
        parsed = parse_target(target) if isinstance(target, str) else target
    except (UserError, ValueError):  # a saved target this version cannot read: the label alone
        parsed = None
    if parsed is None or not parsed.param("client"):
        return names
    own = default_label(parsed)
    if label.startswith(own):  # a label of the user's own choosing is kept as given
        bare = with_params(parsed, {k: v for k, v in parsed.params.items() if k != "client"})
        names.append(default_label(bare) + label[len(own):])
    return names


def labels_for(urls: list[str], given: list[str] | None) -> list[str]:
    """The user's labels, or kind labels made unique by where each target points."""
    if given:
        if len(given) != len(urls):
            raise UserError(f"{len(given)} labels for {len(urls)} targets: give one label per target")
        return list(given)
    targets = [parse_target(url) for url in urls]
    kinds = [default_label(t) for t in targets]
    labels = list(kinds)
    for i, (kind, target) in enumerate(zip(kinds, targets, strict=True)):
        if kinds.count(kind) > 1 and target.hosts:
            host, port = target.hosts[0]
            labels[i] = f"{kind}@{host}" + (f":{port}" if port else "")
    seen: dict[str, int] = {}
    numbered = list(labels)
    for i, label in enumerate(labels):  # still equal (the same URL twice): number them
        seen[label] = seen.get(label, 0) + 1
        if labels.count(label) > 1:
            numbered[i] = f"{label}#{seen[label]}"
    return numbered


def experiment_record(experiment: Experiment) -> dict[str, Any]:
    """The spec as saved: complete enough to re-run, with credentials redacted."""
    data = experiment.model_dump(mode="json")
    data["targets"] = [redact(t) for t in experiment.targets]
    return data


def _with_target_params(target: Target, params: dict[str, Any]) -> Target:
    return with_params(target, {**target.params, **{k: str(v) for k, v in params.items()}}) if params else target


def plan_runs(experiment: Experiment) -> list[RunSpec]:
    labels = labels_for(list(experiment.targets), experiment.labels)
    profiles: list[Any] = [None]
    if experiment.network:
        from .lab.network import parse_network

        profiles = parse_network(experiment.network)
    runs = []
    base = experiment.workload.model_dump()
    for url, label in zip(experiment.targets, labels, strict=True):
        for profile in profiles:
            for point in sweep_points(experiment.sweep):
                workload_fields = {k: v for k, v in point.items() if k not in TARGET_PARAMS}
                target_fields = {k: v for k, v in point.items() if k in TARGET_PARAMS}
                workload = build_experiment({"workload": {**base, **workload_fields}}, "sweep").workload
                target = _with_target_params(parse_target(url), target_fields)
                check_params(target)  # every run's URL, before the first one starts
                for repeat in range(experiment.repeat):
                    runs.append(RunSpec(target, label, workload, point, profile, repeat))
    return runs


def with_trace(experiment: Experiment, directory: str) -> Experiment:
    """A trace replay's experiment: the trace read once, each worker's share written to ``directory``,
    and the workload the report shows — the trace's own op mix, key count, size range and rate —
    in one phase, ``replay``, ended when the trace ends (or by ``--duration``)."""
    wl = experiment.workload
    trace = wl.trace
    if trace is None or trace.prepared:
        return experiment
    if "workers" in experiment.sweep:
        raise UserError("a trace replay takes one worker count (its requests are split over the workers "
                        "by key hash before the runs): give --workers, not a sweep of it")
    if wl.phases:
        raise UserError("a trace replay is its own phase: drop the workload's phases (or the trace)")
    from .workload.replay import prepare

    got = prepare(trace.path, wl.workers, format=trace.format, speed=trace.speed, amplify=trace.amplify,
                  limit=trace.limit, directory=directory)
    recorded_rate = got.records / got.span_s * trace.speed if trace.speed and got.span_s > 0 else None
    duration = wl.duration if "duration" in wl.model_fields_set else None
    phase = Phase(name="replay", mix=got.ops, ops=got.records, duration=duration, warmup=0, rate=recorded_rate)
    sizes = str(got.min_size) if got.min_size == got.max_size else f"{got.min_size}-{got.max_size}"
    fields: dict[str, Any] = {
        "trace": trace.model_copy(update={"prepared": got.directory}), "keys": got.keys, "key_dist": "uniform",
        "value_size": sizes, "mix": got.ops, "ops": got.records, "duration": None, "warmup": 0, "rate": None,
        "phases": [phase], "prefill": wl.prefill if "prefill" in wl.model_fields_set else False,
    }
    if got.skipped:
        print("cachemark: not replayed (not an op on one key): "
              + ", ".join(f"{op} {n:,}" for op, n in got.skipped.items()))
    return experiment.model_copy(update={"workload": Workload.model_validate({**wl.model_dump(), **fields,
                                                                            "trace": fields["trace"].model_dump(),
                                                                            "phases": [phase.model_dump()]})})


# what with_trace sets from the trace itself: a re-run reads the trace again and sets them anew
_FROM_THE_TRACE = ("keys", "key_dist", "value_size", "mix", "ops", "duration", "warmup", "rate", "phases")


def as_given(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved experiment as the user gave it, to run again: a trace replay's workload without what
    :func:`with_trace` derived from the trace (its key count, mix, phase) and without the directory
    its shares were prepared in (gone with the run); any other experiment as it is."""
    workload = saved.get("workload")
    trace = workload.get("trace") if isinstance(workload, dict) else None
    if not isinstance(trace, dict) or not trace.get("prepared"):
        return saved
    try:
        replay = Workload.model_validate(workload)  # the replay's workload, as with_trace made it
    except ValidationError:
        return saved  # not one of ours: shown as saved
    given = {k: v for k, v in workload.items() if k not in _FROM_THE_TRACE}
    given["trace"] = {k: v for k, v in trace.items() if k != "prepared"}
    if replay.phases and replay.phases[0].duration is not None:  # --duration cut the replay
        given["duration"] = replay.phases[0].duration
    if not given.get("prefill"):
        given.pop("prefill", None)  # a replay's own default
    return {**saved, "workload": given}


def describe(spec: RunSpec, repeats: int = 1) -> str:
    """The run's name before it has results (progress line): the same as :func:`run_name`'s, cut and
    escaped as in an error line (a label is the user's text, a URL parameter may be 100 KB long)."""
    return one_line(run_name({"label": spec.label, "network": {"profile": spec.network.name} if spec.network
                              else None, "sweep": spec.sweep or None,
                              "repeat": spec.repeat if repeats > 1 else None}))


def named(experiment: Experiment, specs: list[RunSpec]) -> Experiment:
    """An experiment without a name of its own named after its targets (``memory vs redis``): its
    title would otherwise be ``default``, the default comparison's, which it is not."""
    if "name" in experiment.model_fields_set or "targets" not in experiment.model_fields_set:
        return experiment
    labels = dict.fromkeys(spec.label for spec in specs)
    return experiment.model_copy(update={"name": one_line(" vs ".join(labels))})
