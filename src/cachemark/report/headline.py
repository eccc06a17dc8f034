"""Each preset's own figure: the table its reference's author printed, computed from the results.

A preset declares ``headline`` (and, for ``baseline``, which configuration the others are
shown against); :func:`headline_blocks` turns a results document into that figure as
:class:`~.blocks.Block` s, which the terminal, Markdown and HTML draw alike. Every figure's
arithmetic is a small pure function here (``seconds_per_1000``, ``harness_ops_per_s``,
``latency_total_s``, ``percent_of``…), so a test can hold the printed numbers to it. A figure
resting on too few samples is marked (``*``) or withheld (``-``), never printed as if it
were as good as the others. It reads the typed document (:mod:`cachemark.results.schema`); the
public functions take its dict too.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from ..measure.histogram import Histogram
from ..measure.summary import latency_histogram
from ..results import OpResult, Phase, ResultsDocument, Run
from ..results.names import op_label
from .blocks import Block
from .data import proxy_overhead_note
from .figures import fmt_factor, fmt_latency, fmt_rate

FEW = "*"  # the mark on a figure from too few samples; each block's notes say what it means
MIN_P99_SAMPLES = 30  # a p99 of fewer ops is one of the few largest values, not a percentile
MIN_RATE_SAMPLES = 30
DROPPED_NOTE = "writes were dropped: these timings are of a cache that stores nothing"


def headline_blocks(document: ResultsDocument) -> list[Block]:
    """The figure the experiment's ``headline`` names; none when it names none (or nothing ran)."""
    kind = document.experiment.headline
    if not kind:
        return []
    if kind == "bandwidth":
        from . import thresholds

        build: Callable[[ResultsDocument], list[Block]] | None = getattr(thresholds, "bandwidth_headline", None)
        blocks = list(build(document)) if build is not None else []
    else:
        builder = BUILDERS.get(kind)
        if builder is None or not _measured(document):
            return []
        blocks = builder(document)
    if blocks and (scale := scale_note(document)):
        blocks[-1].notes.append(scale)
    return blocks


def scale_note(document: ResultsDocument) -> str | None:
    """The one command that runs the reference at its own scale, where the preset's defaults cut it."""
    experiment = document.experiment
    flags, name = experiment.full_scale, experiment.given_name
    if flags is None or not name:
        return None
    if not flags.strip():  # declared empty: the defaults are the reference's own scale
        return f"At its defaults this preset runs at the reference's own scale (`cachemark run {name}`)."
    return (f"At its defaults this preset runs a shorter version of the reference; its full scale: "
            f"`cachemark run {name} {flags}`.")


# --- shared ---------------------------------------------------------------------------


def _measured(document: ResultsDocument) -> list[Run]:
    return [run for run in document.measured_runs if run.phases]


def _not_measured(document: ResultsDocument) -> list[str]:
    return [f"{run.name}: {run.status}: {run.reason or 'no result'}"
            for run in document.runs if not run.measured or not run.phases]


def _config_name(run: Run) -> str:
    """The run's name without its repeat number: the configuration its repeats share."""
    return run.model_copy(update={"repeat": None}).name


def _phase(run: Run, name: str) -> Phase | None:
    return next((p for p in run.phases if p.name == name), None)


def _count(phase: Phase | None) -> int:
    return sum(op.count for op in phase.ops.values()) if phase is not None else 0


def _wall(phase: Phase) -> float | None:
    """The phase's wall time, None when the file gives none."""
    return phase.measured_wall_s


def _seconds(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


# --- 000: timeit -------------------------------------------------------------------------


def seconds_per_1000(wall_s: float, count: int) -> float | None:
    """What ``timeit`` prints for a loop of 1000 ops: the loop's wall time, scaled to 1000 ops."""
    return wall_s / count * 1000 if count > 0 else None


def timeit_summary(values: list[float]) -> tuple[float | None, float | None]:
    """(min, median) of the repeats, as one reads ``timeit.repeat``'s list."""
    return (min(values), statistics.median(values)) if values else (None, None)


def writes_dropped(run: Run) -> str | None:
    """Why this run's timings are of a cache that stores nothing, or None.

    The write-then-read probe's finding (``run.dropped_writes``), or, without one, a get
    phase that found nothing right after a set phase wrote its keys.
    """
    if run.dropped_writes:
        return run.dropped_writes
    names = [p.name for p in run.phases]
    for i, phase in enumerate(run.phases):
        get = phase.ops.get("get")
        wrote = any("set" in p.ops and p.ops["set"].count for p in run.phases[:i])
        if get and wrote and get.count and not get.hits and get.misses:
            return f"the {names[i]} phase found none of the keys the phases before it wrote"
    return None


def timeit_rows(document: ResultsDocument) -> tuple[list[str], list[list[str]], list[str]]:
    """Per configuration × phase: seconds per 1000 ops of each repeat, min, median, × the fastest."""
    groups: dict[tuple[str, str], list[tuple[int, float | None]]] = {}
    dropped: dict[str, str] = {}
    for run in _measured(document):
        name = _config_name(run)
        why = writes_dropped(run)
        if why:
            dropped.setdefault(name, why)
        for phase in run.phases:
            value = seconds_per_1000(phase.wall_s or 0.0, _count(phase))
            groups.setdefault((name, phase.name), []).append((run.repeat or 0, value))
    repeats = max((len(v) for v in groups.values()), default=0)
    medians: dict[str, list[float]] = {}
    figures = {}
    for (name, phase), values in groups.items():
        values.sort(key=lambda item: item[0])
        per = [v for _, v in values if v is not None]
        low, mid = timeit_summary(per)
        figures[(name, phase)] = (values, low, mid)
        if mid is not None and name not in dropped:
            medians.setdefault(phase, []).append(mid)
    columns = ["backend", "phase", *(f"repeat {i + 1}" for i in range(repeats)), "min", "median", "× fastest"]
    rows, notes = [], []
    few = False
    for (name, phase), (values, low, mid) in figures.items():
        cells = [_seconds(v) for _, v in values] + [""] * (repeats - len(values))
        best = min(medians.get(phase, []), default=None)
        if name in dropped:
            factor = "writes dropped"
        elif mid is None or not best:
            factor = "-"
        else:
            factor = f"{fmt_factor(mid / best)}×"
        median = _seconds(mid)
        if len(values) < 3 and mid is not None:
            median, few = median + FEW, True
        label = f"{name} [writes dropped]" if name in dropped else name
        rows.append([label, phase, *cells, _seconds(low), median, factor])
    if few:
        notes.append(f"Marked {FEW}: a median of fewer than timeit's 3 repeats (run with --repeat 3).")
    for name, why in dropped.items():
        notes.append(f"{name}: {DROPPED_NOTE}. Found by: {why}")
    return columns, rows, notes


def timeit_headline(document: ResultsDocument) -> list[Block]:
    columns, rows, notes = timeit_rows(document)
    return [Block(
        title="timeit: seconds per 1000 ops, each repeat (reference 000)",
        lines=["Each phase's wall time ÷ its ops × 1000: what `timeit.Timer(loop of 1000).repeat(3, number=1)` "
               "prints. Read the min (the least disturbed repeat) and the median; × fastest is the median "
               "against the fastest cache that kept its writes."],
        columns=columns, rows=rows, notes=notes + _not_measured(document), left=2,
    )]


# --- 002: Mollenhour's cache-benchmark ---------------------------------------------------

TAG_OPS = (("read", "get"), ("write", "set"), ("clean", "clean"))


def harness_ops_per_s(count: int, mean_us: float | None, clients: int) -> float | None:
    """cache-benchmark's "ops/s": each client's count ÷ the time it spent in that op, summed
    over the clients — with clients doing equal shares, count ÷ Σ latency × clients."""
    if not count or not mean_us:
        return None
    return count / (mean_us * count / 1e6) * clients


def wall_ops_per_s(count: int, wall_s: float) -> float | None:
    return count / wall_s if count and wall_s > 0 else None


def _rate(value: float | None, count: int) -> str:
    if value is None:
        return "-"
    text = f"{value:.3g}" if value < 100 else fmt_rate(value)  # a few ops/s keep their digits
    return text + (FEW if count < MIN_RATE_SAMPLES else "")


def tag_clean_rows(document: ResultsDocument) -> tuple[list[str], list[list[str]], list[str]]:
    columns = ["backend"]
    for what, _ in TAG_OPS:
        columns += [f"{what} ops/s (harness)", f"{what} ops/s (wall)"]
    rows, notes, few = [], [], False
    sequences = set()
    for run in _measured(document):
        for phase in run.phases:
            wall = phase.wall_s or 0.0
            clients = phase.workers or 1
            ops = phase.ops
            row = [_config_name(run) if len(run.phases) == 1 else f"{_config_name(run)}: {phase.name}"]
            for _, op_name in TAG_OPS:
                op = ops.get(op_name)
                count = op.count if op is not None else 0
                mean = op.summary_for(wall).mean_us if op is not None and count else None
                few = few or 0 < count < MIN_RATE_SAMPLES
                row += [_rate(harness_ops_per_s(count, mean, clients), count),
                        _rate(wall_ops_per_s(count, wall), count)]
            rows.append(row)
            sequences.add(tuple(sorted((name, op.count) for name, op in ops.items())))
    if len(sequences) == 1:
        (sequence,) = sequences
        notes.append("Every backend replayed the same op sequence: "
                     + ", ".join(f"{count:,} {name}" for name, count in sequence) + ".")
    elif sequences:
        notes.append("The backends did NOT do the same ops (a time cap or errors ended some early): "
                     "their rates are not of the same work.")
    if few:
        notes.append(f"Marked {FEW}: from fewer than {MIN_RATE_SAMPLES} ops, a rough rate.")
    return columns, rows, notes


def tag_clean_headline(document: ResultsDocument) -> list[Block]:
    columns, rows, notes = tag_clean_rows(document)
    return [Block(
        title="read / write / clean-by-tag ops/s (reference 002, Mollenhour's cache-benchmark)",
        lines=["harness: as cache-benchmark.php computes it, each client's ops ÷ the time it spent in "
               "that op type, summed over the clients (= count ÷ Σ latency × clients): the rate of a "
               "client doing nothing else. wall: count ÷ the phase's wall-clock time, all ops of "
               "all clients sharing it."],
        columns=columns, rows=rows, notes=notes + _not_measured(document),
    )]


# --- 003: DiskCache's DjangoCache percentile tables --------------------------------------


def latency_total_s(op: OpResult) -> float:
    """Σ latency of the op's successful outcomes, from its histograms: mean × count."""
    hists = {k: Histogram.decode(v) for k, v in op.histograms.items()}
    hist = latency_histogram(hists)
    return hist.mean * hist.total / 1e9


def fmt_total(seconds: float) -> str:
    """Σ latency as the reference prints it: 28.962s, 265.399ms, 576.973µs."""
    if seconds >= 1:
        return f"{seconds:.3f}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f}ms"
    return f"{seconds * 1e6:.3f}µs"


def percentile_cells(op: OpResult, wall_s: float) -> tuple[list[str], bool]:
    """Median, P90, P99, Max; a 1-op figure has no percentile, a p99 of < 30 ops is marked."""
    count = op.count
    summary = op.summary_for(wall_s)
    if count <= 1:
        return ["-", "-", "-", fmt_latency(summary.max_us) if count else "-"], False
    p99 = fmt_latency(summary.p99_us)
    few = count < MIN_P99_SAMPLES
    if few:
        p99 += FEW
    return [fmt_latency(summary.p50_us), fmt_latency(summary.p90_us), p99,
            fmt_latency(summary.max_us)], few


def percentile_table(run: Run) -> tuple[list[list[str]], bool]:
    rows, few = [], False
    total_count, total_s = 0, 0.0
    many = len(run.phases) > 1
    for phase in run.phases:
        wall = phase.wall_s or 0.0
        for name, op in phase.ops.items():
            count = op.count
            cells, marked = percentile_cells(op, wall)
            few = few or marked
            seconds = latency_total_s(op)
            total_count, total_s = total_count + count, total_s + seconds
            action = op_label(phase.name, name, many)
            rows.append([action, f"{count:,}", f"{op.misses:,}", *cells, fmt_total(seconds)])
    rows.append(["Total", f"{total_count:,}", "", "", "", "", "", fmt_total(total_s)])
    return rows, few


def percentiles_headline(document: ResultsDocument) -> list[Block]:
    blocks = []
    counts = set()
    any_few = False
    for run in _measured(document):
        rows, few = percentile_table(run)
        any_few = any_few or few
        counts.add(sum(_count(p) for p in run.phases))
        blocks.append(Block(
            title=f"Timings for {run.name}",
            columns=["Action", "Count", "Miss", "Median", "P90", "P99", "Max", "Total"],
            rows=rows,
        ))
    if blocks:
        same = (f"every backend did the same {next(iter(counts)):,} timed ops" if len(counts) == 1 else
                "the backends did NOT do the same number of ops: compare the Totals with care")
        blocks[0].lines = [
            "Reference 003's table per backend: Miss counts gets that found nothing and deletes of a "
            "key that was not there; Total is Σ latency (mean × count, from the histograms), the time "
            f"the application spent waiting on the cache; {same}."]
        if any_few:
            blocks[-1].notes.append(f"Marked {FEW}: a P99 from fewer than {MIN_P99_SAMPLES} ops (the largest few "
                                    "values, not a percentile). A 1-op row has no percentile (-).")
        blocks[-1].notes += _not_measured(document)
    return blocks


# --- 004: Rails local vs remote, % of one baseline ---------------------------------------


def percent_of(value: float | None, base: float | None) -> float | None:
    """``value`` as a percentage of ``base``: the reference's "Comparison to Baseline"."""
    if value is None or not base:
        return None
    return value / base * 100


def _fixed(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.6f}"  # as Benchmark.bm prints "real"


def _profile(run: Run) -> str:
    return run.profile or ""


def choose_baseline(runs: list[Run], wanted: str | None) -> tuple[Run | None, str]:
    """The run every other one is shown against: ``label@profile``, ``label``, or the first."""
    if not runs:
        return None, ""
    if not wanted:
        return runs[0], ""
    label, _, profile = wanted.partition("@")
    for run in runs:
        if run.label == label and (not profile or _profile(run) == profile):
            return run, ""
    return runs[0], f"baseline {wanted!r} is not among the measured configurations: the first stands in."


_BLOCK_OPS = ("set", "delete")  # a block's write and delete around its reads


def _one_block(run: Run) -> Phase | None:
    """The block run as one phase, its steps in order (a ``sequence``: no pause between write, reads and
    delete, as in the reference's own process), or None: the block in three phases (older files)."""
    if len(run.phases) != 1 or _phase(run, "write") is not None:
        return None
    (phase,) = run.phases
    return phase if set(_BLOCK_OPS) <= set(phase.ops) and len(phase.ops) == 3 else None


def _block_time(run: Run) -> float | None:
    """The whole block's time: write, the N iterations, delete — what ``Benchmark.bm`` reports as
    real around the reference's block (None when a phase is missing)."""
    if (block := _one_block(run)) is not None:
        return _wall(block)
    phases = [_phase(run, name) for name in ("write", "read", "delete")]
    if any(p is None or _wall(p) is None for p in phases):
        return None
    return sum(p.wall_s for p in phases if p is not None)


def _read_count(run: Run) -> int:
    """The block's N: its read iterations."""
    if (block := _one_block(run)) is not None:
        return sum(op.count for name, op in block.ops.items() if name not in _BLOCK_OPS)
    return _count(_phase(run, "read"))


def _read_time(run: Run) -> float | None:
    """The N iterations alone: the read phase's wall, or the block's less its write's and delete's latency."""
    if (block := _one_block(run)) is not None:
        wall = _wall(block)
        return None if wall is None else wall - sum(latency_total_s(block.ops[name]) for name in _BLOCK_OPS)
    read = _phase(run, "read")
    return _wall(read) if read is not None else None


def _rtt(run: Run) -> str:
    """The round trip the run's network profile added (the reference's local vs remote)."""
    network = run.network
    if network is None or network.is_empty:
        return "-"  # run without --network
    rtt = network.rtt_us or 0
    return fmt_latency(rtt) if network.proxied and rtt else "0"


@dataclass
class _Configuration:
    """A configuration's repeats, read as one: the median block (and read block) of its runs."""

    first: Run
    runs: list[Run]

    @property
    def count(self) -> int:
        return _read_count(self.first)

    @property
    def blocks(self) -> list[float]:
        return [b for run in self.runs if (b := _block_time(run)) is not None]

    def block(self) -> float | None:
        return statistics.median(self.blocks) if self.blocks else None

    def read_time(self) -> float | None:
        reads = [w for run in self.runs if (w := _read_time(run)) is not None]
        return statistics.median(reads) if reads else None


def _configurations(runs: list[Run]) -> list[_Configuration]:
    """The runs grouped by configuration (label and profile), in order: a repeat is not a configuration."""
    groups: dict[str, _Configuration] = {}
    for run in runs:
        name = _config_name(run)
        if name in groups:
            groups[name].runs.append(run)
        else:
            groups[name] = _Configuration(run, [run])
    return list(groups.values())


def baseline_rows(document: ResultsDocument) -> tuple[list[str], list[list[str]], list[str]]:
    """Per configuration: the profile's added round trip, the iterations, the whole block's time and
    its % of the baseline's whole block (the reference's "Comparison to Baseline"), and the read
    block alone beside it (the N iterations without the write and the delete around them). With
    repeats, one row per configuration: the median of its repeats' blocks, their range beside it."""
    configurations = _configurations(_measured(document))
    base_run, problem = choose_baseline([c.first for c in configurations], document.experiment.baseline)
    base = next((c for c in configurations if c.first is base_run), None)
    n = base.count if base else 0
    comparable = base is not None and n > 1
    base_block = base.block() if base and comparable else None
    base_read_time = base.read_time() if base and comparable else None
    repeated = any(len(c.runs) > 1 for c in configurations)
    columns = ["Configuration", "added RTT", "iterations", "block (s)", "Comparison to Baseline", "read block %"]
    if repeated:
        columns += ["repeats", "block range (s)"]
    rows, notes = [], [problem] if problem else []
    for config in configurations:
        count, block, read_time = config.count, config.block(), config.read_time()
        if config is base:
            whole = alone = "--"
        elif count <= 1 or base_block is None:
            whole = alone = "-"  # one sample: no comparison
        else:
            mark = FEW if count != n else ""
            whole, alone = (f"{pct:.0f}%{mark}" if (pct := percent_of(value, reference)) is not None else "-"
                            for value, reference in ((block, base_block), (read_time, base_read_time)))
        row = [_config_name(config.first), _rtt(config.first), f"{count:,}", _fixed(block), whole, alone]
        if repeated:
            blocks = config.blocks
            row += [f"{len(config.runs)}", f"{_fixed(min(blocks))}–{_fixed(max(blocks))}" if blocks else "-"]
        rows.append(row)
    if base is not None:
        notes.insert(0, f"baseline: {_config_name(base.first)}.")
    if repeated:
        notes.append("With repeats, a configuration's block and read block are the medians of its repeats, and its "
                     "% of baseline is against the baseline's medians; the range is its fastest and slowest block.")
    if any(r[4].endswith(FEW) for r in rows):
        notes.append(f"Marked {FEW}: this configuration ran a different number of iterations than the baseline.")
    if base_block is None and base is not None:
        notes.append("the baseline's read block has one op or none: no comparison is made.")
    return columns, rows, notes


def baseline_headline(document: ResultsDocument) -> list[Block]:
    columns, rows, notes = baseline_rows(document)
    return [Block(
        title="Time of the block per configuration, and % of baseline (reference 004)",
        lines=["The block is the reference's: write one value, N iterations of exist? + fetch, delete it; its "
               "time is what Benchmark.bm reports as real, and Comparison to Baseline divides it by the baseline's "
               "block, as the author did. Read block % is the N iterations alone against the baseline's; added RTT "
               "is the round trip the configuration's network profile adds to every request (0: loopback)."],
        columns=columns, rows=rows, notes=notes + _proxy_note(document) + _not_measured(document),
    )]


def _proxy_note(document: ResultsDocument) -> list[str]:
    note = proxy_overhead_note(document)
    return [note] if note else []


BUILDERS: dict[str, Callable[[ResultsDocument], list[Block]]] = {
    "timeit": timeit_headline,
    "tag-clean": tag_clean_headline,
    "percentiles": percentiles_headline,
    "baseline": baseline_headline,
}
