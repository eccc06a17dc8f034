"""The ``cachemark`` command: parse, call, render — no logic the tests can't reach directly.

Errors a user can cause end as one line on stderr and exit code 2; ``--debug`` (or
``CACHEMARK_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .. import __version__, outfile
from ..errors import EXIT_CRASH, EXIT_INTERRUPTED, EXIT_RUN_FAILED, EXIT_USAGE, Crash, SpecError, UserError
from ..textfile import one_line
from .capacity_command import capacity as capacity_command
from .capture_command import capture as capture_command
from .decide_command import decide as decide_command
from .decide_commands import advise as advise_command
from .decide_commands import cost as cost_command
from .prices_command import prices as prices_command
from .report_commands import compare as compare_command
from .report_commands import report as report_command
from .report_commands import thresholds as thresholds_command
from .size_command import size as size_command
from .sources import experiment_from, resolve_source, split_sources
from .stampede_command import stampede as stampede_command
from .terminal import make_console
from .trace_commands import trace_app

if TYPE_CHECKING:
    from rich.console import Console

    from ..results import ResultsDocument

app = typer.Typer(
    add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Benchmark any cache backend a web application uses, with numbers worth trusting.",
)


@functools.cache
def _console() -> Console:
    """The command's console, made when it first prints: its width follows ``COLUMNS`` and the output as they
    are when the command runs, not when this module was imported. Piped output (CI logs, files) gets a wide
    table; a bad ``COLUMNS`` cannot break any command."""
    return make_console()


def _debug_requested() -> bool:
    return "--debug" in sys.argv or os.environ.get("CACHEMARK_DEBUG") == "1"


def _print_version(value: bool) -> None:
    if value:
        _console().print(f"cachemark {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", help="Print the version and exit.", is_eager=True, callback=_print_version)
    ] = False,
) -> None:
    """Benchmark any cache backend a web application uses, with numbers worth trusting."""


def _workload_flags(**flags: Any) -> dict[str, Any]:
    """The workload fields given on the command line (None means: not given)."""
    return {name: value for name, value in flags.items() if value is not None}


def output_paths(out: Path | None) -> tuple[Path | None, Path | None, str | None]:
    """``-o`` as (results JSON path, report path, report format): ``-o x.md`` writes that report, and
    the results JSON goes to the default results/ path."""
    from ..report.formats import FORMAT_BY_SUFFIX

    if out is None:
        return None, None, None
    fmt = FORMAT_BY_SUFFIX.get(out.suffix.lower())
    if fmt is None or fmt == "json":
        return out, None, None
    return None, out, fmt


def untrusted_runs(document: ResultsDocument) -> list[str]:
    """The runs whose figures are not of a working cache: one line per finding, each once, naming every
    repeat it covers (``django(dummy) #1, #2: drops writes: …``). A run that drops writes is said to
    drop them, not counted again as the canaries' ``dropped_write`` errors: that is the same finding."""
    import re

    repeat = re.compile(r" #(\d+)\b")
    found: dict[tuple[str, str], tuple[list[str], dict[str, int]]] = {}  # (run, finding) -> repeats, errors
    for run in document.runs:
        base, number = repeat.sub("", run.name, count=1), (m.group(1) if (m := repeat.search(run.name)) else "")
        if run.dropped_writes:
            found.setdefault((base, f"drops writes: {run.dropped_writes}"), ([], {}))[0].append(number)
        kinds: dict[str, int] = {}
        for phase in run.phases:
            for op in phase.ops.values():
                for kind, count in op.errors.items():
                    if not (run.dropped_writes and kind == "dropped_write"):
                        kinds[kind] = kinds.get(kind, 0) + count
        if sum(kinds.values()):
            numbers, total = found.setdefault((base, "failed"), ([], {}))
            numbers.append(number)
            for kind, count in kinds.items():
                total[kind] = total.get(kind, 0) + count
    lines = []
    for (base, finding), (numbers, kinds) in found.items():
        name = base + (" " + ", ".join(f"#{n}" for n in numbers) if any(numbers) else "")
        if finding != "failed":
            lines.append(f"{name}: {finding}")
            continue
        detail = ", ".join(f"{kind} {count:,}" for kind, count in sorted(kinds.items(), key=lambda kv: -kv[1]))
        lines.append(f"{name}: {sum(kinds.values()):,} ops failed ({detail})")
    return lines


@app.command()
def run(
    sources: Annotated[
        list[str] | None,
        typer.Argument(help="An experiment TOML file or a preset name; target URLs given here count as -t."),
    ] = None,
    target: Annotated[list[str] | None, typer.Option("--target", "-t", help="Target URL (repeat for several).")] = None,
    keys: Annotated[int | None, typer.Option(help="Number of distinct keys.")] = None,
    key_dist: Annotated[str | None, typer.Option(help="uniform | zipf[:S] | sequential | hotspot[:F,P]")] = None,
    value_size: Annotated[str | None, typer.Option(help="100 | 100-1000 | 100:9,10000:1")] = None,
    key_size: Annotated[str | None, typer.Option(help="Pad keys to N bytes, or etc (Facebook ETC's key sizes); "
                                                 "none: prefix + id (the default).")] = None,
    mix: Annotated[str | None, typer.Option(help="Op mix, e.g. get=90,set=9,delete=1 or exists+get=100.")] = None,
    ttl: Annotated[float | None, typer.Option(help="TTL in seconds for writes (0: none).")] = None,
    origin: Annotated[str | None, typer.Option(
        help="What the fetch op (cache-aside) calls on a miss: fixed:10ms | lognormal:10ms,0.5 | hist:FILE | "
             "postgresql://…?query=…, with ?pool=N (docs/contracts.md).")] = None,
    prefill: Annotated[bool | None, typer.Option("--prefill/--no-prefill", help="Write every key first.")] = None,
    warmup: Annotated[str | None, typer.Option(help="Untimed warm-up before each phase, e.g. 1s.")] = None,
    warmup_ops: Annotated[int | None, typer.Option(help="Untimed warm-up ops per phase (all workers).")] = None,
    duration: Annotated[str | None, typer.Option(help="Timed duration per phase, e.g. 10s.")] = None,
    ops: Annotated[int | None, typer.Option(help="Timed ops per phase (all workers together).")] = None,
    workers: Annotated[int | None, typer.Option(help="Worker processes.")] = None,
    rate: Annotated[float | None, typer.Option(help="Open loop: total ops/s (latency from intended start).")] = None,
    arrival: Annotated[str | None, typer.Option(help="Open loop arrivals: fixed (even gaps) | poisson.")] = None,
    on_error: Annotated[
        str | None, typer.Option(help="stop (default): end the run after --error-grace of only errors | continue")
    ] = None,
    error_grace: Annotated[
        str | None, typer.Option(help="How long only errors may last before stopping, e.g. 2s.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for every random choice.")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="Label per target (same order).")] = None,
    sweep: Annotated[list[str] | None, typer.Option(help="Sweep a field: value_size=1024,10000 (repeatable).")] = None,
    repeat: Annotated[int | None, typer.Option(help="Run every variant this many times.")] = None,
    network: Annotated[
        str | None, typer.Option(help="same-host,lan,same-zone,cross-zone,cross-region or 2ms,...")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Where to write: x.json (the results), or x.csv / x.md / x.html (that "
                     "format; the results JSON then goes to results/)."),
    ] = None,
    allow_errors: Annotated[
        bool, typer.Option("--allow-errors", help="Exit 0 even when ops failed or a target dropped writes.")
    ] = False,
    html: Annotated[bool, typer.Option("--html", help="Also write the HTML report beside the results.")] = False,
    calibrate: Annotated[
        bool, typer.Option("--calibrate/--no-calibrate", help="Measure timer and loopback RTT first.")
    ] = True,
    trace: Annotated[
        Path | None,
        typer.Option(help="Replay a recorded trace as the workload (Twitter CSV, oracleGeneral, CacheLib, Redis "
                     "MONITOR, cachemark's own; .zst too): its ops, keys, sizes and timing (docs/traces.md).")
    ] = None,
    trace_format: Annotated[str | None, typer.Option(help="The trace's format, when not told by its name.")] = None,
    speed: Annotated[
        float | None, typer.Option(help="Replay at this × the recorded rate (open loop); 0: as fast as possible.")
    ] = None,
    amplify: Annotated[
        int | None, typer.Option(help="Replay N copies of the trace over disjoint keys at the same times.")
    ] = None,
    trace_limit: Annotated[int | None, typer.Option(help="Replay only the trace's first N requests.")] = None,
    cluster: Annotated[
        str | None,
        typer.Option(help="Drive the load from a Dask cluster: tcp://scheduler:8786 or local:N "
                     "(?agents=K&measure=RATE; docs/distributed.md)."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    """Run an experiment and print the comparison table.

    With no arguments: the default comparison of memory, file, diskcache, sqlite, and
    spawned redis and memcached under get 90 / set 9 / delete 1 on 10,000 zipf keys.

    Example: cachemark run -t redis://127.0.0.1:6379 -t spawn:memcached --mix get=80,set=20 --duration 10s
    \f
    Over 80 lines for its 35 options alone (typer reads them from this signature; ``\\f`` keeps this out of
    --help): the body, under 50 lines, parses, hands the experiment to the session, writes the reports and
    says how the run ended.
    """
    source, positional_targets = split_sources(sources or [])
    if positional_targets:
        target = [*positional_targets, *(target or [])]
    if target and not cluster:  # they replace a file's targets: the workers' fork server can start now
        from ..run.forkserver import start_early

        start_early(target)
    data, where = resolve_source(source)
    flags = _workload_flags(
        keys=keys, key_dist=key_dist, value_size=value_size, key_size=key_size, mix=mix, ttl=ttl, prefill=prefill,
        warmup=warmup,
        warmup_ops=warmup_ops, duration=duration, ops=ops, workers=workers, rate=rate, seed=seed,
        arrival=arrival, on_error=on_error, error_grace=error_grace, origin=origin,
    )
    if trace is not None:
        flags["trace"] = _workload_flags(path=str(trace), format=trace_format, speed=speed, amplify=amplify,
                                         limit=trace_limit)
    elif any(v is not None for v in (trace_format, speed, amplify, trace_limit)):
        raise SpecError("--trace-format, --speed, --amplify and --trace-limit go with --trace FILE")
    results_path, report_path, report_format = output_paths(out)
    for path in (results_path, report_path):
        if path is not None and not outfile.is_stdout(path):
            outfile.check(path)  # a directory, device, FIFO, socket or symlink: refused before the run
    experiment = experiment_from(data, where, target, flags, label, sweep, repeat, network)
    if experiment.stampede is not None:  # a hot key expiring under load, per strategy (docs/decide.md)
        from .stampede_command import run_stampedes

        run_stampedes(list(experiment.targets), {**experiment.stampede, **({"duration": duration} if duration else {})})
        return
    if not cluster:  # the workers' fork server imports while this process prepares the run (if not yet)
        from ..run.forkserver import start_early

        start_early(experiment.targets)
    from ..run.distributed import cluster_session
    from ..scratch import directory as scratch_directory
    from .session import run_experiment

    if experiment.workload.trace is not None and cluster:
        raise SpecError("--trace with --cluster: a replay's shares are prepared on this host; not yet supported")
    with cluster_session(cluster) as on_cluster, scratch_directory("cachemark-replay-") as scratch:
        from ..plan import with_trace

        experiment = with_trace(experiment, scratch)  # a trace replay: read once, split over the workers
        document, path = run_experiment(experiment, out=results_path, calibrate=calibrate, console=_console(),
                                        cluster=on_cluster)
    _console().print(f"results: {path}", markup=False, highlight=False)
    reports = [(report_path, report_format)] if report_path is not None and report_format is not None else []
    _write_reports(document, [*reports, *([(path.with_suffix(".html"), "html")] if html else [])])
    _exit_for(document, allow_errors)


def _write_reports(document: ResultsDocument, reports: list[tuple[Path, str]]) -> None:
    """``run -o x.md`` and ``--html``: each report written (atomically) and named."""
    from ..report.formats import render as render_format

    for where_to, fmt in reports:
        outfile.write_text(where_to, render_format(document, fmt), "the report")
        _console().print(f"report: {where_to}", markup=False, highlight=False)


def _exit_for(document: ResultsDocument, allow_errors: bool) -> None:
    """Exit 1, with its line, unless every run measured a working cache (the README's exit codes)."""
    console, runs = _console(), document.runs
    if any(run.status == "failed" for run in runs):
        raise typer.Exit(EXIT_RUN_FAILED)  # each failed run's reason is already on the screen
    untrusted = untrusted_runs(document)
    if untrusted and not allow_errors:
        for line in untrusted:
            console.print(line, markup=False, highlight=False)
        console.print("exit 1: the figures above include failed ops or a cache that keeps nothing "
                      "(--allow-errors exits 0 anyway)", markup=False, highlight=False)
        raise typer.Exit(EXIT_RUN_FAILED)
    skipped = [run for run in runs if run.status == "skipped"]
    if skipped and len(skipped) == len(runs):
        console.print("nothing was measured: every target was skipped (see the reasons above)", markup=False,
                      highlight=False)
        raise typer.Exit(EXIT_RUN_FAILED)
    if skipped:  # exit 0 means every run was measured
        for run in skipped:
            console.print(f"exit 1: {run.label} was skipped: {one_line(run.reason or 'no reason recorded')}",
                          markup=False, highlight=False)
        raise typer.Exit(EXIT_RUN_FAILED)


@app.command()
def show(results: Annotated[Path, typer.Argument(help="A results JSON file.")]) -> None:
    """Print the table of a saved results file. Example: cachemark show results/cachemark-*.json"""
    from ..report.table import render
    from ..results import load

    render(load(results).model, _console())  # the typed document alone: the file's dict goes before the table


@app.command()
def targets() -> None:
    """List the target URL schemes and spawnable servers. Example: cachemark targets"""
    from ..backends import schemes
    from ..lab import kinds
    from ..run.driver import DRIVERS

    console = _console()
    console.print("schemes: " + ", ".join(f"{s}://" for s in schemes()))
    console.print("spawn:   " + ", ".join(f"spawn:{k}" for k in kinds()))
    console.print("sockets: redis+unix:///path.sock?db=N, memcached+unix:///path.sock (Unix domain sockets, "
                  "no --network); spawn:redis?unix=1, spawn:memcached?unix=1 give one", markup=False, highlight=False)
    console.print("tls:     rediss://…?ssl_ca_certs=ca.pem[&ssl_certfile=…&ssl_keyfile=…|&ssl_cert_reqs=none], "
                  "memcached://…?tls=1&ssl_ca_certs=…; spawn:redis?tls=1, spawn:memcached?tls=1 give one",
                  markup=False, highlight=False)
    console.print("clients: ?client=engine (redis, memcached: the native Rust engine); "
                  + "; ".join(f"?client={d.name} ({', '.join(sorted(d.schemes))}: docs/drivers.md)"
                              for d in DRIVERS.values()), markup=False, highlight=False)


@app.command()
def presets() -> None:
    """List the named experiments. Example: cachemark presets"""
    from rich.table import Table
    from rich.text import Text

    from ..presets import describe_presets

    listing = Table.grid(padding=(0, 2))  # a description wraps under itself, not under the names
    listing.add_column(style="bold", no_wrap=True)
    listing.add_column()
    for name, description in describe_presets():
        listing.add_row(Text(name), Text(description))
    _console().print(listing)


app.command("report")(report_command)
app.command("compare")(compare_command)
app.command("thresholds")(thresholds_command)
app.command("size")(size_command)
app.command("decide")(decide_command)
app.command("advise")(advise_command)
app.command("cost")(cost_command)
app.command("capacity")(capacity_command)
app.command("prices")(prices_command)
app.command("stampede")(stampede_command)
app.command("capture")(capture_command)
app.add_typer(trace_app, name="trace")


# The click typer parses with (its own copy since typer 0.22, click itself before), by a class typer exports.
CLICK_ERRORS = sys.modules[typer.BadParameter.__module__]
NO_ARGS_IS_HELP = getattr(CLICK_ERRORS, "NoArgsIsHelpError", ())  # `cachemark trace`: its help, not an error line
_NO_SUCH_COMMAND = re.compile(r"No such command (['\"])(.*?)\1")  # click's and typer's words for it


def usage_text(exc: Any) -> str:
    """A misspelled flag or command (or a missing or bad value) as the text of a one-line error,
    with the closest match: typer would draw a box of five lines around it."""
    if isinstance(exc, CLICK_ERRORS.NoSuchOption):
        return f"no such option {one_line(exc.option_name, 60)}{_closest(exc.possibilities)}"
    command = _unknown_command(exc)
    if command is not None:
        known = getattr(exc.ctx.command, "commands", {}) if exc.ctx is not None else {}
        return f"no such command {one_line(command, 60)}{_closest(difflib.get_close_matches(command, list(known)))}"
    text = exc.format_message().rstrip(".")  # "Missing argument 'results'", "Invalid value for '--workers': …"
    where = exc.ctx.command_path if exc.ctx is not None else "cachemark"
    return f"{text[:1].lower()}{text[1:]}; see {where} --help"


def _unknown_command(exc: Any) -> str | None:
    """The command name a usage error did not know: click's NoSuchCommand says it (from click 8.4); typer's
    group, and older clicks, only in the message."""
    if getattr(exc, "command_name", None):
        return str(exc.command_name)
    match = _NO_SUCH_COMMAND.match(exc.message)
    return match[2] if match else None


def _closest(matches: list[str] | None) -> str:
    """`` (did you mean --duration?)``: the closest match only (difflib puts it first)."""
    return f" (did you mean {matches[0]}?)" if matches else ""


def _app() -> None:
    """The command, with click's usage errors raised as the UserError they are, so that they end as
    every other one does: one line, exit 2."""
    try:
        code = app(standalone_mode=False, prog_name="cachemark")
    except NO_ARGS_IS_HELP as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except CLICK_ERRORS.UsageError as exc:
        raise UserError(usage_text(exc)) from None
    except typer.Abort:  # end of input at a prompt
        print("cachemark: aborted", file=sys.stderr)
        sys.exit(EXIT_RUN_FAILED)
    sys.exit(code if isinstance(code, int) else 0)  # typer.Exit's code: returned, not raised, here


class _Signals:
    """Whether a Ctrl-C, SIGTERM or SIGHUP has reached this process."""

    received = False


def _interrupt_on(signum: int, frame: Any) -> None:
    _Signals.received = True
    raise KeyboardInterrupt  # the path Ctrl-C takes: workers stopped, servers and temp dirs removed


def _an_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C that a library caught and raised as an error of its own: pydantic,
    building a model's validator when the signal lands, raises a SchemaError that only names it."""
    if not _Signals.received:
        return False
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt) or "KeyboardInterrupt" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def main() -> None:
    import signal

    from ..proctitle import hide_secrets

    hide_secrets()  # `ps` shows other users our command line: its target URLs redacted
    # `timeout`, a CI cancel or a closed terminal must clean up like Ctrl-C does; each is noted as it comes
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), _interrupt_on)
    from ..interrupts import redeliver_interrupts

    sys.unraisablehook = redeliver_interrupts(sys.unraisablehook)
    try:
        _app()
    except UserError as exc:
        if _debug_requested():
            traceback.print_exc()
        from ..target import redact_text

        print(f"cachemark: error: {redact_text(str(exc))}", file=sys.stderr)  # one line, no secret
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        print("cachemark: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 — a bug of ours: one line, the traceback kept in a file
        if _an_interrupt(exc):
            print("cachemark: interrupted", file=sys.stderr)
            sys.exit(EXIT_INTERRUPTED)
        from ..crash import crash_line

        if _debug_requested():
            traceback.print_exc()
        details = exc.details if isinstance(exc, Crash) and exc.details else traceback.format_exc()
        message = str(exc) if isinstance(exc, Crash) else f"{type(exc).__name__}: {exc}"
        print(crash_line(message, details), file=sys.stderr)
        sys.exit(EXIT_CRASH)


if __name__ == "__main__":
    main()
