"""Experiments: targets × workload (a list of phases), from flags, TOML files or presets.

A :class:`Workload` is what every worker replays; a :class:`Phase` is one timed part of
it (reference 000 times "set 1000 keys" and "get them" as two phases). Fields left
unset on a phase inherit the workload's. Validation errors name the field and the
allowed values, and surface as one line (:class:`~cachemark.errors.SpecError`).
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .backends.base import OPS
from .errors import SpecError
from .limits import MAX_RATE, MIN_RATE
from .textfile import MAX_DEPTH, check_tree, location, one_line, read_text
from .workload.keys import KeyDist, parse_key_size
from .workload.origin import parse_origin
from .workload.values import ValueSizes

DEFAULT_TARGETS = ["memory://", "file://", "diskcache://", "sqlite://", "spawn:redis", "spawn:memcached"]
Arrival = Literal["fixed", "poisson", "etc"]  # etc: Facebook ETC's gap shape (workload/etc.py)
OnError = Literal["stop", "continue"]
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|us)?\s*$")


def parse_duration(value: object, field: str = "duration") -> float:
    """Seconds from 5, 2.5, "5s", "500ms", "2m"."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise SpecError(f"{field} {value!r}: expected seconds or a duration like 5s, 500ms, 2m")
        number, unit = float(match.group(1)), match.group(2) or "s"
        seconds = number * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
    if not math.isfinite(seconds):  # TOML and JSON have inf and nan; a phase must end
        raise SpecError(f"{field} must be a finite number of seconds")
    if seconds < 0:
        raise SpecError(f"{field} must not be negative")
    return seconds


def parse_mix(value: object) -> dict[str, float]:
    """``get=90,set=9,delete=1`` or a dict; an entry may be a sequence ``exists+get``."""
    if isinstance(value, str):
        mix: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, sep, weight = part.partition("=")
            if not sep:
                raise SpecError(f"mix entry {part!r}: expected op=weight, e.g. get=90,set=10")
            try:
                mix[name.strip()] = float(weight)
            except ValueError:
                raise SpecError(f"mix entry {part!r}: weight {weight!r} is not a number") from None
    elif isinstance(value, dict):
        mix = {}
        for name, weight in value.items():
            try:
                mix[str(name)] = float(weight)
            except (TypeError, ValueError):
                raise SpecError(f"mix entry {name!r}: weight {weight!r} is not a number") from None
    else:
        raise SpecError(f"mix {value!r}: expected op=weight pairs, e.g. get=90,set=9,delete=1")
    for name, weight in mix.items():
        for op in name.split("+"):
            if op not in OPS:
                raise SpecError(f"mix op {op!r} is unknown; allowed: {', '.join(OPS)} (sequences as exists+get)")
        if weight < 0:
            raise SpecError(f"mix weight for {name!r} must not be negative")
        if not math.isfinite(weight):  # nan passes every comparison; inf makes every share nan
            raise SpecError(f"mix weight for {name!r} must be a finite number")
    if mix and not math.isfinite(sum(mix.values())):
        raise SpecError("mix weights are too large: their sum must be a finite number")
    if not mix or sum(mix.values()) <= 0:
        raise SpecError("mix weights sum to 0: give at least one op a positive weight, e.g. get=90,set=10")
    return {name: weight for name, weight in mix.items() if weight > 0}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TagSpec(_Model):
    """Each key carries 0..max tags (uniform count) drawn from a pool of ``pool`` tags."""

    pool: int = Field(2000, ge=1)
    min_per_key: int = Field(0, ge=0)
    max_per_key: int = Field(15, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> TagSpec:
        if self.min_per_key > self.max_per_key:
            raise ValueError("min_per_key must not exceed max_per_key")
        return self


class TraceSpec(_Model):
    """A recorded trace replayed as the workload (workload/replay.py, docs/traces.md)."""

    path: str
    format: str | None = None  # detected from the name or first bytes when unset
    speed: float = Field(1.0, ge=0, le=1_000_000, allow_inf_nan=False)  # × the recorded rate; 0: closed loop
    amplify: int = Field(1, ge=1, le=1000)  # copies of the key space replayed at the same times
    limit: int | None = Field(None, ge=1)  # only the first N requests
    prepared: str | None = None  # set by cachemark: the directory with each worker's share


STEP_OPS = "ops"  # a step's times: as many as the phase's ops (so --ops scales it)


class Step(_Model):
    """One step of a phase's ``sequence``: ``op`` run ``times`` times back to back ("ops": the phase's ops)."""

    op: str
    times: int | str = 1  # a count, or "ops"

    @field_validator("op")
    @classmethod
    def _op(cls, value: str) -> str:
        parse_mix({value: 1})  # SpecError for an unknown op, as in a mix
        return value

    @field_validator("times")
    @classmethod
    def _times(cls, value: int | str) -> int | str:
        if isinstance(value, str) and value != STEP_OPS or isinstance(value, int) and value < 1:
            raise ValueError(f"a step's times must be a count of at least 1 or {STEP_OPS!r}, not {value!r}")
        return value

    def count(self, ops: int) -> int:
        """How many times the step runs in a phase of ``ops`` ops."""
        return self.times if isinstance(self.times, int) else ops


class Phase(_Model):
    """One timed part of a workload; unset fields inherit the workload's.

    ``sequence`` runs its steps in order, each worker the whole sequence with no pause between
    steps, instead of drawing ops from ``mix``: a block timed as one, as reference 004 times
    write, N × exist?+fetch, delete (a pause between phases would slow the first op after it).
    """

    name: str = "main"
    sequence: list[Step] | None = None
    mix: dict[str, float] | None = None
    key_dist: str | None = None
    ops: int | None = Field(None, ge=1)
    duration: float | None = None
    warmup: float | None = None
    warmup_ops: int | None = Field(None, ge=0)
    rate: float | None = Field(None, ge=MIN_RATE, le=MAX_RATE, allow_inf_nan=False)
    arrival: Arrival | None = None

    @field_validator("mix", mode="before")
    @classmethod
    def _mix(cls, value: object) -> object:
        return None if value is None else parse_mix(value)

    @field_validator("duration", "warmup", mode="before")
    @classmethod
    def _duration(cls, value: object, info: Any) -> object:
        return None if value is None else parse_duration(value, info.field_name)

    @field_validator("key_dist")
    @classmethod
    def _key_dist(cls, value: str | None) -> str | None:
        return None if value is None else str(KeyDist.parse(value))

    @model_validator(mode="after")
    def _sequence_alone(self) -> Phase:
        if self.sequence is not None:
            if not self.sequence:
                raise ValueError(f"phase {self.name!r}: an empty sequence")
            if self.duration or self.rate:
                raise ValueError(f"phase {self.name!r}: a sequence runs its steps once each, by count: "
                                 "no duration or rate")
        return self

    def steps(self) -> list[tuple[str, int]]:
        """The sequence's steps with their counts (an effective phase's: "ops" resolved), in order."""
        return [(step.op, step.count(self.ops or 1)) for step in self.sequence or ()]


class Workload(_Model):
    """What every worker does against every target."""

    keys: int = Field(10_000, ge=1, le=1_000_000_000)
    key_dist: str = "zipf:0.99"
    value_size: str = "100-1000"
    key_size: str | None = None  # None: prefix + id; N bytes, or etc (ETC's key sizes): workload/keys.py
    mix: dict[str, float] = Field(default_factory=lambda: {"get": 90.0, "set": 9.0, "delete": 1.0})
    ttl: float = Field(0.0, ge=0, allow_inf_nan=False)
    prefill: bool = True
    warmup: float = 1.0
    warmup_ops: int | None = Field(None, ge=0)
    duration: float | None = 4.0
    ops: int | None = Field(None, ge=1)
    rate: float | None = Field(None, ge=MIN_RATE, le=MAX_RATE, allow_inf_nan=False)
    arrival: Arrival = "fixed"  # open loop: fixed intervals, or a Poisson process (exponential gaps)
    on_error: OnError = "stop"  # stop a phase after `error_grace` seconds of nothing but errors
    error_grace: float = Field(2.0, gt=0, le=3600)
    workers: int = Field(2, ge=1, le=512)
    seed: int = 1
    get_many_count: int = Field(10, ge=1, le=10_000)
    verify_reads: float = Field(1 / 16, ge=0, le=1)
    verify_writes: float = Field(1 / 256, ge=0, le=1)
    tags: TagSpec | None = None
    # what the `fetch` op calls on a miss (cache-aside): fixed:10ms, lognormal:10ms,0.5, hist:FILE,
    # postgresql://…?query=…, each with an optional ?pool=N (workload/origin.py)
    origin: str | None = None
    trace: TraceSpec | None = None  # replay a recorded trace instead of drawing ops (plan.with_trace)
    phases: list[Phase] = Field(default_factory=list)

    @field_validator("mix", mode="before")
    @classmethod
    def _mix(cls, value: object) -> object:
        return parse_mix(value)

    @field_validator("key_dist", mode="before")
    @classmethod
    def _key_dist(cls, value: object) -> str:
        return str(KeyDist.parse(str(value)))

    @field_validator("key_size", mode="before")
    @classmethod
    def _key_size(cls, value: object) -> str | None:
        return parse_key_size(value)

    @field_validator("value_size", mode="before")
    @classmethod
    def _value_size(cls, value: object) -> str:
        return str(ValueSizes.parse(value))

    @field_validator("duration", "warmup", "error_grace", mode="before")
    @classmethod
    def _duration(cls, value: object, info: Any) -> object:
        return None if value is None else parse_duration(value, info.field_name)

    @field_validator("origin", mode="before")
    @classmethod
    def _origin(cls, value: object) -> object:
        if value is None:
            return None
        parse_origin(value)  # SpecError: one line, before anything runs
        return str(value).strip()

    @model_validator(mode="after")
    def _bounded(self) -> Workload:
        if self.ops is not None and "duration" not in self.model_fields_set:
            self.duration = None  # `ops = 400` alone ends by count, as `--ops 400` alone does
        for phase in self.effective_phases():
            if phase.ops is None and not phase.duration:
                raise ValueError(f"phase {phase.name!r} needs ops or a duration (else it would never end)")
            if self.origin is None and any("fetch" in name.split("+") for name in phase.mix or {}):
                raise ValueError('the fetch op needs an origin: set origin = "fixed:10ms" (or --origin fixed:10ms)')
        return self

    @property
    def sizes(self) -> ValueSizes:
        return ValueSizes.parse(self.value_size)

    def effective_phases(self) -> list[Phase]:
        """The phases with every unset field filled from the workload (:func:`phase_over_workload`)."""
        phases = self.phases or [Phase()]
        inherited = self.model_dump(include=INHERITED)
        out = []
        for phase in phases:
            data = phase_over_workload(phase.model_dump(), inherited)
            if phase.sequence is not None:  # each worker runs the whole sequence: "ops" is the phase's ops
                n = phase.ops if phase.ops is not None else self.ops or 1
                steps = [(step.op, step.count(n)) for step in phase.sequence]
                data["sequence"] = [{"op": op, "times": times} for op, times in steps]
                data["mix"] = {op: float(sum(t for o, t in steps if o == op)) for op, _ in steps}
                data.update(ops=sum(t for _, t in steps) * self.workers, duration=None, warmup=0, warmup_ops=0)
            out.append(Phase.model_validate(data))
        return out


INHERITED = {"mix", "key_dist", "ops", "duration", "warmup", "warmup_ops", "rate", "arrival"}  # a phase's unset ones


def phase_over_workload(phase: Mapping[str, Any], workload: Mapping[str, Any]) -> dict[str, Any]:
    """A phase's fields over its workload's, as a run runs it: each field the phase leaves unset (None)
    is the workload's, except that a phase with a duration of its own and no op budget has no op
    budget, and one with only an op budget has no duration. On plain fields, so that a report reads
    a saved file's phase by this same rule (report/planned.py), whatever version wrote the file."""
    merged = {**workload, **{k: v for k, v in phase.items() if v is not None}}
    if phase.get("duration") and phase.get("ops") is None:
        merged["ops"] = None
    if phase.get("ops") is not None and not phase.get("duration"):
        merged["duration"] = None
    return merged


class Reference(_Model):
    """The write-up a preset reproduces, as far as the verdict reads it."""

    name: str = Field(min_length=1)  # how the verdict names it: "reference 003"
    # label → the client library the reference measured that backend through: the verdict flags a label
    # measured through another (`{ memcached = "pylibmc" }`)
    clients: dict[str, str] = Field(default_factory=dict)


class Experiment(_Model):
    """Targets × workload, plus where the network is and where results go."""

    name: str = "default"
    description: str = ""
    targets: list[str] = Field(default_factory=lambda: list(DEFAULT_TARGETS))
    labels: list[str] = Field(default_factory=list)
    workload: Workload = Field(default_factory=Workload)
    network: str | None = None
    sweep: dict[str, list[str]] = Field(default_factory=dict)
    repeat: int = Field(1, ge=1, le=100)
    # the reference's own figure printed first (cachemark.report.headline); None: the generic table only
    headline: Literal["timeit", "bandwidth", "tag-clean", "percentiles", "baseline"] | None = None
    # the configuration every other one is shown against (a label, or "label@profile"); None: the first
    baseline: str | None = None
    # the reference write-up a preset reproduces, and the clients it used (the verdict flags each substitution)
    reference: Reference | None = None
    # the flags that run the reference at its own scale, where a preset's defaults are cut to finish in
    # minutes (`--ops 800000`): the headline names the command; "" says the defaults are that scale
    full_scale: str | None = None
    # what the application needs (cachemark.analysis.advise): the report then says which target meets it
    needs: dict[str, Any] | None = None
    # a stampede experiment (`cachemark stampede`'s fields: strategy, rate, recompute, ttl, duration, …):
    # `cachemark run` then measures a hot key expiring under load instead of the workload
    stampede: dict[str, Any] | None = None

    @field_validator("needs")
    @classmethod
    def _needs(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            from .needs import parse_needs

            parse_needs(value, "[needs]", stated=True)
        return value

    @field_validator("sweep", mode="before")
    @classmethod
    def _sweep(cls, value: object) -> object:
        from .sweep import parse_sweep

        if isinstance(value, dict):
            items = []
            for name, values in value.items():
                values = values if isinstance(values, list) else [values]
                joiner = ";" if name == "mix" else ","
                items.append(f"{name}=" + joiner.join(str(v) for v in values))
            return parse_sweep(items)
        return value

    @field_validator("targets", mode="before")
    @classmethod
    def _targets(cls, value: object) -> object:
        if isinstance(value, str | dict):
            value = [value]
        if not isinstance(value, list):
            raise ValueError("expected a target URL or a list of them")
        if not value:
            raise ValueError("at least one target is needed")
        targets = []
        for item in value:
            if isinstance(item, dict):  # a Django CACHES entry, as in settings.py
                if "BACKEND" not in item:
                    raise ValueError("a target given as a table must be a Django CACHES entry with BACKEND")
                from .backends.django import django_url

                item = django_url(item)
            targets.append(item)
        return targets


def _format_validation(exc: ValidationError, source: str) -> str:
    err = exc.errors()[0]
    where = one_line(".".join(str(p) for p in err["loc"]), 120) or "experiment"  # keys may hold newlines
    message = one_line(err["msg"].removeprefix("Value error, "), 300)
    if err["type"] == "extra_forbidden":
        message = "unknown field"
    return f"{source}: {where}: {message}"


def build_experiment(data: dict[str, Any], source: str = "experiment") -> Experiment:
    check_tree(data, source, SpecError)  # e.g. an argument that was not UTF-8 (a lone surrogate from argv)
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_validation(exc, source)) from None


MAX_TOML_BYTES = 4 << 20  # the largest preset is 2 KB; a bigger "experiment" is some other file
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"\n]*"|'[^'\n]*')"""
# where a key can start: a line, a [table] header, an inline { table }
_LONG_DOTTED_KEY = re.compile(rf"(?m)(?:^|[\[{{,])[ \t]*(?:{_KEY_PART}[ \t]*\.[ \t]*){{{MAX_DEPTH}}}")


def load_toml(path: str | Path) -> dict[str, Any]:
    """An experiment file's fields; any problem with the file is one line naming it (SpecError)."""
    name = one_line(path)
    return parse_toml(read_text(path, "experiment file", SpecError, max_bytes=MAX_TOML_BYTES), name)


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """TOML text → experiment fields: not empty, bounded nesting, only the experiment's top-level fields.

    An empty file is refused rather than read as "all defaults": running the whole default
    comparison because a file came out empty is never what was meant.
    """
    dotted = _LONG_DOTTED_KEY.search(text)
    if dotted:  # tomllib takes time quadratic in a key's parts: 8,000 take a second, a 4 MB file hours
        line = text.count("\n", 0, dotted.start()) + 1
        raise SpecError(f"{source}: line {line}: a dotted key of more than {MAX_DEPTH} parts (nested too deeply)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: malformed TOML: {one_line(exc, 200)}") from None
    except RecursionError:
        raise SpecError(f"{source}: malformed TOML: nested too deeply to read") from None
    if not data:
        raise SpecError(f"{source}: empty experiment file: give at least one field, "
                        'e.g. targets = ["spawn:redis"] (with no file, cachemark runs the default comparison)')
    check_tree(data, source, SpecError)
    unknown = [key for key in data if key not in Experiment.model_fields]
    if unknown:
        raise SpecError(f"{source}: {location([unknown[0]])}: unknown field at the top level of an experiment; "
                        f"known: {', '.join(Experiment.model_fields)}")
    return data


def merge_overrides(data: dict[str, Any], targets: list[str] | None, workload: dict[str, Any]) -> dict[str, Any]:
    """Command-line flags win over the file: targets replace, workload fields override."""
    data = dict(data)
    if targets:
        data["targets"] = targets
        data.pop("labels", None)
    if workload:
        base = data.get("workload", {})
        # a workload that is not a table is left as it is, for validation to refuse in one line
        data["workload"] = {**base, **workload} if isinstance(base, dict) else base
    return data


# --- TOML out: the saved spec as an experiment file (the HTML report shows it) ---------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        items = (f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None)
        return "{" + ", ".join(items) + "}"
    return json.dumps(str(value), ensure_ascii=False)  # JSON string escapes are valid TOML basic strings


def _toml_key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
    return key if bare else json.dumps(key)


def to_toml(data: dict[str, Any], prefix: str = "") -> str:
    """A small TOML writer for the saved spec (nulls are omitted: TOML has none)."""
    scalars, tables, arrays = [], [], []
    for key, value in data.items():
        if value is None:
            continue
        if isinstance(value, dict):
            tables.append((key, value))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            arrays.append((key, value))
        else:
            scalars.append(f"{_toml_key(key)} = {_toml_value(value)}")
    out = "\n".join(scalars) + ("\n" if scalars else "")
    for key, value in tables:
        name = f"{prefix}{_toml_key(key)}"
        out += f"\n[{name}]\n" + to_toml(value, name + ".")
    for key, items in arrays:
        name = f"{prefix}{_toml_key(key)}"
        for item in items:
            out += f"\n[[{name}]]\n" + to_toml(item, name + ".")
    return out
