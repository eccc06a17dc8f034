"""The results schema ``cachemark.results/1`` as typed models: what every report may rely on.

One model per part of the document — :class:`ResultsDocument` ⊃ :class:`Environment`,
:class:`ExperimentRecord` and :class:`Run` ⊃ :class:`Phase` ⊃ :class:`OpResult` (with its
:class:`OpSummary` and encoded histograms), :class:`TimeseriesEntry` and
:class:`ServerFigures` — documented field by field in docs/results.md.

The models are lenient where files differ by age: fields added over time are optional,
and fields we do not know are kept (a newer cachemark may add some; a report ignores
them). They are strict on every type a report reads: no ``"5"`` for 5, no ``null``
where a count is needed, numbers finite and within ±1e15 (so sums, ratios and chart
axes stay finite), counts whole and ≥ 0, histograms that decode. :func:`validate`
raises one line naming the path to the first bad field:
``results.json: runs[0].phases[1].ops.get.count: expected an integer, not a string``.
Validation does not change the document.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ..errors import UserError
from ..measure.histogram import Histogram
from ..textfile import location, one_line

SCHEMA = "cachemark.results/1"
SCHEMA_FAMILY = "cachemark.results/"
FIGURE_MAX = 1e15  # no figure cachemark measures comes near; sums and ratios of these stay finite


@functools.lru_cache(maxsize=4096)
def _decodes(text: str) -> None:
    """Raise ValueError unless ``text`` decodes; remembered for valid ones (compare loads files twice)."""
    Histogram.decode(text)


def _histogram(text: str) -> str:
    try:
        _decodes(text)
    except ValueError as exc:
        raise ValueError(f"not a cachemark histogram: {exc}") from None
    return text


Count = Annotated[int, Field(ge=0, le=2**63 - 1)]
Figure = Annotated[float, Field(ge=-FIGURE_MAX, le=FIGURE_MAX, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, le=FIGURE_MAX, allow_inf_nan=False)]
HistogramText = Annotated[str, AfterValidator(_histogram)]

# Lists and tables stop at their first bad item: pydantic otherwise collects every error, with its
# location and input — a 1.8 MB file of 600,000 empty runs took 1.2 GB and 10 s to refuse.
_T = TypeVar("_T")
Many = Annotated[list[_T], Field(fail_fast=True)]
Table = Annotated[dict[str, _T], Field(fail_fast=True)]


class _Record(BaseModel):
    # strict: the reports format and add these values as they are; extra: newer fields pass
    model_config = ConfigDict(strict=True, extra="allow")


class OpSummary(_Record):
    """Figures over one op's successful outcomes (errors counted apart); null when not measured."""

    ops_per_s: Figure | None = None
    hit_ratio: Figure | None = None
    error_count: Count | None = None
    p50_us: Figure | None = None
    p90_us: Figure | None = None
    p99_us: Figure | None = None
    p999_us: Figure | None = None
    max_us: Figure | None = None
    mean_us: Figure | None = None
    ops_per_latency_s: Figure | None = None


class OpResult(_Record):
    """One op of one phase (docs/contracts.md, ``OpResult``); summaries are recomputed when absent."""

    count: Count
    hits: Count = 0
    misses: Count = 0
    errors: Table[Count] = Field(default_factory=dict)
    bytes_out: Count = 0
    bytes_in: Count = 0
    histograms: Table[HistogramText] = Field(default_factory=dict)
    histograms_uncorrected: Table[HistogramText] | None = None
    summary: OpSummary | None = None
    summary_uncorrected: OpSummary | None = None


class TimeseriesEntry(_Record):
    """One second of a timed phase: the client's figures, and the server's when sampled."""

    t: Figure
    ops: Count | None = None
    errors: Count | None = None
    p50_us: Figure | None = None
    p99_us: Figure | None = None
    max_us: Figure | None = None  # the second's slowest successful op (files before it lack it)
    server_ops_per_s: Figure | None = None
    server_cpu_pct: Figure | None = None
    server_rss_bytes: Figure | None = None
    net_in_mbps: Figure | None = None
    net_out_mbps: Figure | None = None


class ServerSample(_Record):
    """One raw reading of the server's counters; rates are per interval since the previous one."""

    t: Figure
    ops_per_s: Figure | None = None
    cpu_pct: Figure | None = None
    rss_bytes: Figure | None = None
    net_in_mbps: Figure | None = None
    net_out_mbps: Figure | None = None


class ServerFigures(_Record):
    """What the server said about one phase (measure/server_stats.py), where it can tell."""

    source: str | None = None
    cpu_us_per_op: Figure | None = None
    bytes_in_per_op: Figure | None = None
    bytes_out_per_op: Figure | None = None
    net_mbps_p90: Figure | None = None
    net_mbps_p70: Figure | None = None
    net_in_mbps_p90: Figure | None = None
    net_out_mbps_p90: Figure | None = None
    net_out_mbps_p70: Figure | None = None
    cpu_pct_p90: Figure | None = None
    cpu_pct_p50: Figure | None = None
    used_memory_bytes: Figure | None = None
    evictions: Figure | None = None
    samples: Many[ServerSample] = Field(default_factory=list)


class WriteOutage(_Record):
    """Writes failing from ``start_s`` to ``end_s`` (the first and last failed write, seconds into the
    phase; overlapping workers' windows joined), e.g. through a failover (measure/outage.py)."""

    start_s: Figure
    end_s: Figure
    duration_s: Seconds
    failed_writes: Count = 0
    errors: Count = 0  # failed ops of every kind inside the window
    recovered: bool = False  # every worker in it wrote successfully again before the phase ended
    recovered_s: Figure | None = None  # when the last of them did
    server: str | None = None  # where the writes that succeeded went (a Sentinel target's new primary)


class ClusterFigures(_Record):
    """A Redis Cluster run: the map read at the start, the redirects its nodes answered, nodes that joined."""

    primaries: Count = 0
    moved: Count = 0
    ask: Count = 0
    replicas: Count | None = None  # the engine with read_from_replicas=1: the replicas read from
    joined: Many[str] | None = None  # the engine: nodes that joined the cluster during the run (addresses)


class Phase(_Record):
    """One timed phase of a run."""

    name: str = "main"
    mode: str = "closed"  # closed | open
    rate: Figure | None = None
    workers: Count | None = None
    wall_s: Seconds = 0.0
    client_cpu_s: Figure | None = None
    interrupted: bool = False
    stopped_on_errors: str | None = None  # the on-error policy ended the phase: why
    missed: Count = 0  # open loop: ops due before the phase ended but never sent
    error_samples: Many[str] = Field(default_factory=list)
    ops: Table[OpResult] = Field(default_factory=dict)
    timeseries: Many[TimeseriesEntry] | None = None
    server: ServerFigures | None = None
    write_outages: Many[WriteOutage] | None = None  # absent when no write failed
    cluster: ClusterFigures | None = None


class ServerRecord(_Record):
    """The server a run measured: a spawned one, the user's, or several (``servers``)."""

    kind: str | None = None
    spawned: bool | None = None
    emulator: bool | None = None
    servers: Many[dict[str, Any]] | None = None


class BackendRecord(_Record):
    scheme: str | None = None
    namespace: str | None = None
    info: Table[Any] | None = None
    capabilities: Table[Any] | None = None


class NetworkRecord(_Record):
    profile: str | None = None


class Run(_Record):
    """One target × network profile × sweep point × repeat."""

    label: str
    target: str = ""
    status: str  # ok | skipped | failed | interrupted
    reason: str = ""
    display: str | None = None
    backend: BackendRecord | None = None
    server: ServerRecord | None = None
    network: NetworkRecord | None = None
    sweep: Table[Any] | None = None
    repeat: Count | None = None
    phases: Many[Phase] = Field(default_factory=list)
    dropped_writes: str | None = None  # the write-then-read probe's finding (run/write_probe.py)


class RttFigures(_Record):
    p50_us: Figure | None = None
    p99_us: Figure | None = None


class LoopbackRtt(_Record):
    busy: RttFigures | None = None
    idle: RttFigures | None = None
    idle_gap_ms: Figure | None = None


class Calibration(_Record):
    timer_resolution_ns: Figure | None = None
    loopback_rtt: LoopbackRtt | None = None


class ProxyOverhead(_Record):
    """What the network proxy itself adds with no delay configured, measured once per experiment
    (lab/proxy.py ``measure_overhead``): round trips direct vs through the proxy, µs."""

    added_p50: Figure | None = None
    added_p99: Figure | None = None
    direct_p50: Figure | None = None
    proxied_p50: Figure | None = None
    samples: Count | None = None


class Environment(_Record):
    """The machine and software a run was measured on (measure/fingerprint.py)."""

    cachemark: str | None = None
    python: str | None = None
    os: str | None = None
    cpu: str | None = None
    cpus: Count | None = None
    packages: Table[Any] | None = None
    calibration: Calibration | None = None
    proxy_overhead: ProxyOverhead | None = None  # only when a run went through the network proxy


class ExperimentRecord(_Record):
    """The spec as run (spec.Experiment, targets redacted); kept loose: it is re-run, not reported."""

    name: str = "cachemark"
    description: str | None = None


class SaturationPoint(_Record):
    value: Any = None  # the swept parameter's value (a number, or the text the sweep gave)
    ops_per_s: Figure
    p99_us: Figure


class Saturation(_Record):
    """One target's load sweep (measure/saturation.py): where throughput stopped rising as p99 climbed."""

    label: str
    param: str
    saturation: Any = None  # the swept value before the flat-and-slower step; null: throughput kept rising
    points: Many[SaturationPoint] = Field(default_factory=list)


class ResultsDocument(_Record):
    schema_: str = Field(alias="schema")
    created: str | None = None
    environment: Environment = Field(default_factory=Environment)
    experiment: ExperimentRecord = Field(default_factory=ExperimentRecord)
    runs: Many[Run] = Field(default_factory=list)
    saturation: Many[Saturation] | None = None  # a sweep of a load parameter with three or more points


_EXPECTED = {
    "int_type": "expected an integer",
    "float_type": "expected a number",
    "finite_number": "expected a finite number",
    "string_type": "expected a string",
    "bool_type": "expected true or false",
    "list_type": "expected a list",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "model_attributes_type": "expected an object",
    "missing": "missing",
}
_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "an integer",
               float: "a number", type(None): "null"}


def _message(error: Any) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in ("greater_than_equal", "greater_than"):
        text = "must not be negative" if ctx.get("ge") == 0 else f"must be at least {ctx.get('ge', ctx.get('gt'))}"
    elif kind in ("less_than_equal", "less_than"):
        text = f"too large (at most {ctx.get('le', ctx.get('lt')):g})"
    elif kind == "value_error":
        text = str(error["msg"]).removeprefix("Value error, ")
    else:
        text = _EXPECTED.get(kind, str(error["msg"]))
    if kind.endswith("_type") or kind == "finite_number":
        got = _JSON_TYPES.get(type(error.get("input")))
        if got and not text.endswith(got):
            text += f", not {got}"
    return one_line(text, 200)


def validate(document: dict[str, Any], source: str) -> None:
    """Raise :class:`UserError` (one line, the path to the first bad field) unless ``document`` fits."""
    schema = document.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_FAMILY):
        raise UserError(f"{source}: not a cachemark results file (no {SCHEMA_FAMILY} schema)")
    if schema != SCHEMA:
        raise UserError(f"{source}: schema {one_line(schema, 40)} is not one this cachemark reads ({SCHEMA})")
    try:
        ResultsDocument.model_validate(document)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise UserError(f"{source}: {location(error['loc'])}: {_message(error)}") from None
