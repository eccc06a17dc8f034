"""The results schema ``cachemark.results/1`` as typed models: what every report may rely on.

One model per part of the document — :class:`ResultsDocument` ⊃ :class:`Environment`,
:class:`ExperimentRecord` and :class:`Run` ⊃ :class:`Phase` ⊃ :class:`OpResult` (with its
:class:`OpSummary`, measure's own type, and encoded histograms), :class:`TimeseriesEntry` and
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

from pydantic import AfterValidator, Field, PrivateAttr, ValidationError, model_validator

from ..errors import UserError

# the number types, the base record and the op summary are measure/figures.py's: measure computes the
# summary, results/ checks and reads back that same type (measure/figures.py says why it lives there)
from ..measure.figures import Count, Figure, OpSummary, Record, Seconds
from ..measure.histogram import Histogram
from ..textfile import location, one_line

SCHEMA = "cachemark.results/1"
SCHEMA_FAMILY = "cachemark.results/"


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


HistogramText = Annotated[str, AfterValidator(_histogram)]

# Lists and tables stop at their first bad item: pydantic otherwise collects every error, with its
# location and input — a 1.8 MB file of 600,000 empty runs took 1.2 GB and 10 s to refuse.
_T = TypeVar("_T")
Many = Annotated[list[_T], Field(fail_fast=True)]
Table = Annotated[dict[str, _T], Field(fail_fast=True)]


class OpResult(Record):
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
    _recomputed: dict[tuple[bool, float], OpSummary] = PrivateAttr(default_factory=dict)

    @property
    def error_total(self) -> int:
        """Failed ops of every kind."""
        return sum(self.errors.values())

    def summary_for(self, wall_s: float, uncorrected: bool = False) -> OpSummary:
        """The saved summary (``summary_uncorrected`` when asked and saved), else one recomputed from
        the histograms over ``wall_s`` (an older file), remembered."""
        saved = self.summary_uncorrected if uncorrected and _given(self.summary_uncorrected) else self.summary
        if _given(saved):
            return saved  # type: ignore[return-value]
        key = (not uncorrected, wall_s)
        if key not in self._recomputed:
            from ..measure.summary import OpRecord, summary_from_result

            read = OpRecord(count=self.count, hits=self.hits, misses=self.misses, errors=self.errors,
                            histograms=self.histograms, histograms_uncorrected=self.histograms_uncorrected)
            self._recomputed[key] = summary_from_result(read, wall_s, corrected=not uncorrected)
        return self._recomputed[key]


def _given(summary: OpSummary | None) -> bool:
    """A summary with anything in it (an empty ``{}`` counts as none, as it always has)."""
    return summary is not None and summary.given


class TimeseriesEntry(Record):
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


class ServerSample(Record):
    """One raw reading of the server's counters; rates are per interval since the previous one."""

    t: Figure
    ops_per_s: Figure | None = None
    cpu_pct: Figure | None = None
    rss_bytes: Figure | None = None
    net_in_mbps: Figure | None = None
    net_out_mbps: Figure | None = None


class ServerFigures(Record):
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
    cpu_pct_mean: Figure | None = None  # percent of one core over the whole phase (null: not measured)
    low_samples: bool = False  # a per-second figure (Mbps, CPU %) rests on fewer than two full intervals


class WriteOutage(Record):
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


class ClusterFigures(Record):
    """A Redis Cluster run: the map read at the start, the redirects its nodes answered, nodes that joined."""

    primaries: Count = 0
    moved: Count = 0
    ask: Count = 0
    replicas: Count | None = None  # the engine with read_from_replicas=1: the replicas read from
    joined: Many[str] | None = None  # the engine: nodes that joined the cluster during the run (addresses)


class AgentRow(Record):
    """One Dask agent's share of a phase (run/distributed.py ``_agent_row``)."""

    agent: Any = None  # its index
    role: str | None = None  # load | measure
    host: str | None = None
    hostname: str | None = None
    workers: Many[Any] | None = None  # [first global worker index, count]
    ops: Count | None = None
    ops_per_s: Figure | None = None
    client_cpu_s: Figure | None = None
    cpu_cores: Figure | None = None
    start_lag_ms: Figure | None = None


class MeasuringAgent(Record):
    """The agent measuring latency at a low open-loop rate, apart from the load."""

    agent: Any = None
    rate: Figure | None = None
    ops: Table[OpResult] = Field(default_factory=dict)
    row: AgentRow | None = None


class Phase(Record):
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
    cluster: ClusterFigures | None = None  # Redis Cluster's figures (a Dask run's record is Run.dask)
    agents: Many[AgentRow] | None = None  # a distributed run: each load agent's share of this phase
    agents_missing: Many[str] | None = None  # …and the agents that sent none
    measuring_agent: MeasuringAgent | None = None  # the open-loop agent measuring apart from the load
    engine: Table[Any] | None = None  # the native engine ran it: its protocol, threads, connections, pipeline

    @property
    def measured_wall_s(self) -> float | None:
        """``wall_s`` when the file gives it; None when it gives none (``wall_s`` then reads 0)."""
        return self.wall_s if "wall_s" in self.model_fields_set else None

    def summary_of(self, op: OpResult, uncorrected: bool = False) -> OpSummary:
        """``op``'s summary in this phase (recomputed over its wall time when the file has none)."""
        return op.summary_for(self.wall_s or 0.0, uncorrected)


class ServerRecord(Record):
    """The server a run measured: a spawned one, the user's, or several (``servers``)."""

    kind: str | None = None
    spawned: bool | None = None
    emulator: bool | None = None
    servers: Many[dict[str, Any]] | None = None
    version: str | None = None  # a spawned server's own version (lab: its --version)


class BackendRecord(Record):
    scheme: str | None = None
    namespace: str | None = None
    info: Table[Any] | None = None
    capabilities: Table[Any] | None = None


class NetworkRecord(Record):
    """The emulated network a run went through (lab/network.py's profile, as run/network.py records it)."""

    profile: str | None = None
    rtt_us: Figure | None = None  # the round trip the profile adds
    proxied: bool = False  # the run's traffic went through the network proxy (a loopback profile: not)


class DaskAgent(Record):
    """One agent of a distributed run as the coordinator saw it: its clock against the coordinator's."""

    agent: Any = None  # its index, as AgentRow.agent
    hostname: str | None = None
    clock_offset_ms: Figure | None = None
    clock_uncertainty_ms: Figure | None = None  # half the round trip the offset was measured over
    clock_skew_flagged: bool | None = None


class DaskRecord(Record):
    """A distributed run (``--cluster``, run/distributed.py): the Dask cluster, its hosts and agents.

    Files before it was named ``dask`` wrote it as the run's ``cluster`` (easily read as Redis
    Cluster's ``phase.cluster``): :class:`Run` moves a run's non-empty ``cluster`` here on load."""

    address: str | None = None
    kind: str | None = None
    dask: str | None = None  # the distributed package's version
    agents: Many[DaskAgent] = Field(default_factory=list)
    hosts: Many[str] = Field(default_factory=list)


class Run(Record):
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
    dask: DaskRecord | None = None  # a distributed run's cluster and agents

    @model_validator(mode="before")
    @classmethod
    def _dask_was_cluster(cls, data: Any) -> Any:
        """A run's ``cluster`` object is a Dask record written before it was named ``dask`` (with its
        ``agents``; an empty one, ``{}``, says no more than none and is left as it was)."""
        if isinstance(data, dict) and "dask" not in data and isinstance(data.get("cluster"), dict) \
                and data["cluster"]:
            data = dict(data)
            data["dask"] = data.pop("cluster")
        return data

    @property
    def name(self) -> str:
        """The run as every report names it (results/names.py ``run_name``)."""
        from .names import run_name

        return run_name(self)

    @property
    def measured(self) -> bool:
        """Its figures are worth reporting: it ran to the end, or was stopped with what ran kept."""
        return self.status in ("ok", "interrupted")

    @property
    def last_phase(self) -> Phase | None:
        """The run's last timed phase (the one most reports stand on), or None."""
        return self.phases[-1] if self.phases else None

    @property
    def sweep_key(self) -> str:
        """``value_size=1024`` for a sweep point; empty when not a sweep."""
        from .names import sweep_key

        return sweep_key(self)

    @property
    def scheme(self) -> str | None:
        return self.backend.scheme if self.backend is not None else None

    @property
    def profile(self) -> str | None:
        """The emulated network profile it ran behind, if any."""
        return self.network.profile if self.network is not None else None


class _KeepsSaved(Record):
    """A record shown whole as well as read (the environment, the experiment): it keeps the object the
    file gave (no copy: the loaded dict's own), for printing every field in the file's order."""

    _saved: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_saved(cls, data: Any, handler: Any) -> Any:
        record = handler(data)
        if isinstance(data, dict):
            record._saved = data
        return record

    @property
    def saved(self) -> dict[str, Any]:
        """The record as the file gave it: every field, the ones the models do not name too, in its order."""
        return self._saved


class RttFigures(Record):
    p50_us: Figure | None = None
    p99_us: Figure | None = None


class LoopbackRtt(Record):
    busy: RttFigures | None = None
    idle: RttFigures | None = None
    idle_gap_ms: Figure | None = None


class Calibration(Record):
    timer_resolution_ns: Figure | None = None
    loopback_rtt: LoopbackRtt | None = None


class ProxyOverhead(Record):
    """What the network proxy itself adds with no delay configured, measured once per experiment
    (lab/proxy.py ``measure_overhead``): round trips direct vs through the proxy, µs."""

    added_p50: Figure | None = None
    added_p99: Figure | None = None
    direct_p50: Figure | None = None
    proxied_p50: Figure | None = None
    samples: Count | None = None
    fast_wakeups: bool | None = None  # idle CPUs polled for the experiment (lab/wakeups.py); null: not recorded


class Environment(_KeepsSaved):
    """The machine and software a run was measured on (measure/fingerprint.py)."""

    cachemark: str | None = None
    python: str | None = None
    os: str | None = None
    cpu: str | None = None
    cpus: Count | None = None
    packages: Table[Any] | None = None
    calibration: Calibration | None = None
    proxy_overhead: ProxyOverhead | None = None  # only when a run went through the network proxy


class ReferenceRecord(Record):
    """The write-up a preset reproduces (spec.Reference), as far as the verdict reads it."""

    name: str | None = None  # how the verdict names it: "reference 003"
    clients: Table[str] = Field(default_factory=dict)  # label → the client library the reference measured it through


class ExperimentRecord(_KeepsSaved):
    """The spec as run (spec.Experiment, targets redacted): the fields a report reads are typed, the
    rest kept as saved (the workload, the targets: it is re-run, not reported)."""

    name: str = "cachemark"
    description: str | None = None
    network: str | None = None  # the network profiles asked for (comma-separated); null: none emulated
    repeat: Count | None = None  # each run's repeats
    sweep: Table[Many[str]] | None = None  # field → the values swept over, as text
    headline: str | None = None  # the reference's own figure the report leads with; null: the generic table only
    baseline: str | None = None  # the configuration every other one is shown against (label or label@profile)
    reference: ReferenceRecord | None = None  # the write-up a preset reproduces
    full_scale: str | None = None  # the flags that run a preset at its reference's own scale ("": its defaults)
    needs: Table[Any] | None = None  # what the application needs ([needs]): the report then advises

    @property
    def given_name(self) -> str | None:
        """``name`` when the file gives one; None when it gives none (``name`` then reads "cachemark")."""
        return self.name if "name" in self.model_fields_set else None

    @property
    def workload_spec(self) -> dict[str, Any]:
        """The workload as saved (spec.Workload's fields); ``{}`` when the file has none."""
        workload = (self.model_extra or {}).get("workload")
        return workload if isinstance(workload, dict) else {}

    @property
    def planned_phases(self) -> list[dict[str, Any]]:
        """The workload's phases as saved (each an object with its ``name``), in order."""
        return [p for p in self.workload_spec.get("phases") or [] if isinstance(p, dict)]


class SaturationPoint(Record):
    value: Any = None  # the swept parameter's value (a number, or the text the sweep gave)
    ops_per_s: Figure
    p99_us: Figure


class Saturation(Record):
    """One target's load sweep (measure/saturation.py): where throughput stopped rising as p99 climbed."""

    label: str
    param: str
    saturation: Any = None  # the swept value before the flat-and-slower step; null: throughput kept rising
    points: Many[SaturationPoint] = Field(default_factory=list)


class ResultsDocument(Record):
    schema_: str = Field(alias="schema")
    created: str | None = None
    environment: Environment = Field(default_factory=Environment)
    experiment: ExperimentRecord = Field(default_factory=ExperimentRecord)
    runs: Many[Run] = Field(default_factory=list)
    saturation: Many[Saturation] | None = None  # a sweep of a load parameter with three or more points

    @property
    def measured_runs(self) -> list[Run]:
        """The runs whose figures are reported (``ok`` or ``interrupted``), in file order."""
        return [run for run in self.runs if run.measured]


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


_UNION_MEMBERS = ("constrained-int", "constrained-float")


def _first_error(exc: ValidationError) -> Any:
    """The first error, with a number's two union members (int, then float) read as one: the float's."""
    errors = exc.errors(include_url=False)
    error = errors[0]
    if error["loc"] and error["loc"][-1] in _UNION_MEMBERS:
        where = error["loc"][:-1]
        error = next((e for e in errors if e["loc"] == (*where, "constrained-float")), error)
        error = {**error, "loc": where}
        if error["type"] == "int_type":
            error["type"] = "float_type"
    return error


def validate(document: dict[str, Any], source: str) -> ResultsDocument:
    """The typed document, or :class:`UserError` (one line, the path to the first bad field)."""
    schema = document.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_FAMILY):
        raise UserError(f"{source}: not a cachemark results file (no {SCHEMA_FAMILY} schema)")
    if schema != SCHEMA:
        raise UserError(f"{source}: schema {one_line(schema, 40)} is not one this cachemark reads ({SCHEMA})")
    try:
        return ResultsDocument.model_validate(document)
    except ValidationError as exc:
        error = _first_error(exc)
        raise UserError(f"{source}: {location(error['loc'])}: {_message(error)}") from None
