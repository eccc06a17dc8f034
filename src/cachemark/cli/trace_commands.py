"""The ``cachemark trace`` commands: ``stats`` (what a trace looks like) and ``convert`` (to our format).

Owns the typer group ``trace_app`` (registered in cli/__init__.py), its console output, and
:func:`trace_stats_blocks` — a trace's statistics as report ``Block``s, so the terminal, the
Markdown and (later) an HTML report draw the same strings. The figures themselves are computed
in :mod:`cachemark.workload.traces.stats`. A bad file, format or option is one line, exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import UserError
from ..report.blocks import Block, to_markdown, to_rich
from ..textfile import one_line
from .terminal import make_console

if TYPE_CHECKING:
    from ..workload.traces import Problems, TraceReader, TraceStats

trace_app = typer.Typer(
    no_args_is_help=True, add_completion=False,
    help="Read cache traces (Twitter CSV, libCacheSim oracleGeneral, CacheLib KV CSV, Redis MONITOR, "
         "cachemark's own): statistics and conversion. Example: cachemark trace stats cluster52.sort.zst",
)

FORMAT_HELP = "twitter | oracle | cachelib | redis-monitor | cachemark (default: detected from name and content)."


def trace_stats_blocks(stats: TraceStats, problems: Problems | None = None) -> list[Block]:
    """A trace's statistics (and the lines its reader skipped) as blocks for any renderer."""
    blocks = [Block(title=s["title"], lines=s.get("lines", []), columns=s.get("columns", []),
                    rows=s.get("rows", []), notes=s.get("notes", []), left=s.get("left", 1))
              for s in stats.sections()]
    if problems is not None and (problems.malformed or problems.skipped):
        blocks.append(Block(title="Lines not used", lines=problems.lines()))
    return blocks


def _reader(file: Path, format: str | None, strict: bool, keep_keys: bool = False) -> TraceReader:
    from ..workload.traces import open_trace

    return open_trace(file, format, strict=strict, keep_keys=keep_keys)


def _with_progress(reader: TraceReader, work):  # noqa: ANN001, ANN202
    """Run ``work(tick)`` with a transient progress bar over the file's bytes on stderr."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    console = make_console(stderr=True)
    if not console.is_terminal:
        return work(lambda done: None)
    with Progress(TextColumn("reading {task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task(one_line(Path(reader.path).name, 40), total=reader.file_size or None)
        return work(lambda done: progress.update(task, completed=done))


def stats(
    file: Annotated[Path, typer.Argument(help="A trace file, plain or zstd-compressed.")],
    format: Annotated[str | None, typer.Option("--format", "-f", help=FORMAT_HELP)] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown instead of terminal tables.")] = False,
    sample: Annotated[float, typer.Option(
        "--sample", help="Keep this fraction of objects (spatial hash sampling; counts scaled) for huge traces.",
    )] = 1.0,
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first malformed line (exit 2).")] = False,
) -> None:
    """Objects, requests, op mix, one-hit wonders, Zipf slope, sizes, TTLs and request rate of a trace.

    Example: cachemark trace stats cluster52.sort.zst --sample 0.1 --markdown > cluster52.md
    """
    from ..workload.traces import trace_stats

    if not 0 < sample <= 1:
        raise UserError(f"--sample {sample:g}: give a fraction in (0, 1], e.g. 0.01")
    reader = _reader(file, format, strict)
    result = _with_progress(reader, lambda tick: trace_stats(reader, sample, tick))
    blocks = trace_stats_blocks(result, reader.problems)
    head = f"{one_line(file)} ({reader.format}"
    head += f", {reader.problems.malformed_total:,} malformed lines)" if reader.problems.malformed else ")"
    if markdown:
        sys.stdout.write(f"## Trace statistics: {head}\n\n" + "\n".join(to_markdown(b) for b in blocks))
        return
    console = make_console()
    console.print(f"[bold]Trace statistics[/bold]: {head}", highlight=False)
    console.print()
    for block in blocks:
        to_rich(block, console)


def convert(
    file: Annotated[Path, typer.Argument(help="A trace file in any format cachemark reads.")],
    out: Annotated[Path, typer.Argument(help="The cachemark trace to write ('.zst' suffix: compressed).")],
    format: Annotated[str | None, typer.Option("--format", "-f", help=FORMAT_HELP)] = None,
    raw_keys: Annotated[bool, typer.Option(
        "--raw-keys", help="Keep raw keys in a 'key' column (default: hashed only).")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first malformed line (exit 2).")] = False,
) -> None:
    """Rewrite a trace in cachemark's own format (#cachemark-trace/1), keys hashed unless --raw-keys.

    Example: cachemark trace convert monitor.log monitor.cmtrace.zst
    """
    from ..outfile import refuse_input
    from ..workload.traces import TraceWriter

    refuse_input(out, [file])  # before the reader opens it: the user's own trace is never rewritten
    reader = _reader(file, format, strict, keep_keys=raw_keys)
    if raw_keys and reader.format == "oracle":
        raise UserError(f"{one_line(file)}: oracleGeneral traces hold object ids, not keys: drop --raw-keys")

    def work(tick):  # noqa: ANN001, ANN202
        with TraceWriter(out, raw_keys=raw_keys) as writer:
            for batch in reader.batches():
                if raw_keys and batch.keys is None:
                    raise UserError(f"{one_line(file)}: this {reader.format} trace has no raw keys: drop --raw-keys")
                writer.write_records(batch.records, batch.keys)
                tick(reader.position())
        return writer.count

    count = _with_progress(reader, work)
    console = make_console(stderr=True)
    console.print(f"wrote {one_line(out)}: {count:,} requests from {reader.format}", markup=False, highlight=False)
    for line in reader.problems.lines():
        console.print(line, markup=False, highlight=False)


trace_app.command("stats")(stats)
trace_app.command("convert")(convert)
