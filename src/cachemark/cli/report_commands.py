"""The report-side CLI commands — ``report``, ``compare``, ``thresholds`` — as plain functions.

Owns the typer-annotated functions that cli.py registers (``app.command("report")(report)``
and so on): they load and check the input, call the report modules, and write outputs
through :mod:`cachemark.outfile` (atomically; never over a directory, device, FIFO, socket or
symlink). Bad input ends as a one-line
:class:`~cachemark.errors.UserError`. ``-o -`` writes to standard output.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import UserError
from ..textfile import one_line
from .terminal import make_console

if TYPE_CHECKING:
    from rich.console import Console

    from ..report.compare import Comparison


def _console() -> Console:
    return make_console(stderr=True)


def _emit(text: str | Iterable[str], out: Path | None) -> None:
    """``text`` (or its parts, written as they are made) to ``out``, or to stdout."""
    parts = [text] if isinstance(text, str) else text
    if out is None or str(out) == "-":
        for part in parts:
            sys.stdout.write(part)
        return
    from .. import outfile

    outfile.write_parts(out, parts)
    _console().print(f"wrote {out}", markup=False, highlight=False)


def report(
    results: Annotated[Path, typer.Argument(help="A results JSON file from cachemark run.")],
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Output file ('-': stdout). Default: beside the results, e.g. run.html.")] = None,
    format: Annotated[str | None, typer.Option(
        "--format", "-f", help="html | markdown | csv | json (default: --out's suffix, else html).")] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", "-b", help="A run label: add '% of baseline' figures (markdown, html).")] = None,
) -> None:
    """Turn a results file into an HTML report, Markdown tables, CSV or summary JSON.

    Example: cachemark report results/cachemark-20261122-080904.json -f markdown --baseline redis -o bench.md
    """
    from ..outfile import refuse_input
    from ..report.export import strip_histograms
    from ..report.formats import BESIDE_RESULTS, FORMAT_BY_SUFFIX, FORMATS, render_parts
    from ..results import load, write_atomic

    if format is None:
        format = FORMAT_BY_SUFFIX.get(out.suffix.lower(), "html") if out is not None and str(out) != "-" else "html"
    if format not in FORMATS:
        raise UserError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    document = load(results)
    if out is None:
        out = results.with_name(results.name.removesuffix(".json") + BESIDE_RESULTS[format])
    if format == "json" and str(out) != "-":
        if baseline is not None:
            raise UserError("--baseline applies to the markdown and html formats")
        refuse_input(out, [results])
        write_atomic(out, strip_histograms(document))
        _console().print(f"wrote {out}", markup=False, highlight=False)
        return
    # the JSON summary keeps the file's own key order; the other formats read the typed document
    # alone, so the dict goes before the page is made (a report of many runs holds one of the two)
    source = document if format == "json" else document.model
    del document
    _emit(render_parts(source, format, baseline), out)


def compare(
    base: Annotated[Path, typer.Argument(help="The results file to compare against.")],
    new: Annotated[list[Path], typer.Argument(help="One or more newer results files.")],
    format: Annotated[str | None, typer.Option(
        "--format", "-f", help="table | markdown | json (default: --out's suffix .md/.json, else table)")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the table, markdown or json here.")] = None,
    fail_on: Annotated[str | None, typer.Option(
        "--fail-on", help="CI gate: comma-separated rules on the figures as printed (ops/s, p50, p90, p99, "
        "p99.9, max), e.g. 'p99>10%,ops/s<-5%'. Exit 1, one line per regression, when a figure moves beyond "
        "its rule and the noise (the spread across repeats; 5% assumed when neither side has repeats); "
        "else exit 0.")] = None,
) -> None:
    """Compare results per backend label and op: ratios of ops/s and percentiles, better, worse or same.

    A difference no larger than the noise reads "same (within noise)", never better or worse.
    The noise is the spread across repeats (cachemark run --repeat 3), or 5% when neither side has repeats.
    --fail-on makes it a CI gate: exit 1 and one line per regression beyond its rule and the noise, else 0.
    Example: cachemark compare results/before.json results/after.json --fail-on 'p99>10%,ops/s<-5%'
    """
    from ..errors import EXIT_REGRESSION
    from ..report import compare as cmp
    from ..results import read

    to_file = out is not None and str(out) != "-"
    if format is None:
        format = {".md": "markdown", ".markdown": "markdown", ".json": "json"}.get(
            out.suffix.lower() if to_file and out is not None else "", "table")
    if format not in ("table", "markdown", "json"):
        raise UserError(f"unknown format {format!r}; choose one of table, markdown, json")
    if to_file and out is not None:
        from ..outfile import refuse_input

        refuse_input(out, [base, *new])
    rules = cmp.parse_rules(fail_on) if fail_on is not None else None  # a typo costs no work
    base_doc = read(base)
    new_docs = [read(path) for path in new]
    rows = cmp.compare(base_doc, new_docs)
    if not rows:
        raise UserError(f"nothing to compare: no label and op appears in both {one_line(base)} and the new results")
    names = [p.name for p in new]
    warnings = cmp.workload_warnings(base_doc, new_docs, names=names)
    verdict = cmp.gate(rows, rules, names, cmp.failed_runs(new_docs, names)) if rules else None
    missing = cmp.unmatched(base_doc, new_docs)
    if format == "table":
        from rich.console import Console

        console = make_console()
        table = Console(record=True, width=console.width, file=io.StringIO()) if to_file else console
        cmp.render_table(rows, table, names=names, warnings=warnings)
        if missing:
            table.print("not compared (on one side only): " + ", ".join(missing), markup=False, highlight=False)
        if to_file:
            _emit(table.export_text(), out)
            console = _console()
    else:
        _compare_output(format, out, cmp.Comparison(str(base), [str(p) for p in new], rows, warnings, missing,
                                                    verdict))
        console = _console()  # stdout (or the file) holds the document: the gate speaks on stderr
    for line in cmp.gate_lines(verdict) if verdict else []:
        console.print(line, markup=False, highlight=False, soft_wrap=True)  # one line each, for grep
    if verdict and not verdict.passed:
        raise typer.Exit(EXIT_REGRESSION)  # after the output is written: the job keeps its evidence


def _compare_output(format: str, out: Path | None, comparison: Comparison) -> None:
    """compare's Markdown or JSON, to stdout or a file; the JSON is one document either way."""
    from ..outfile import write_json
    from ..report import compare as cmp

    to_file = out is not None and str(out) != "-"
    if to_file or format == "json":  # a file, or JSON with no place for them: the user sees them here
        for warning in comparison.warnings:
            _console().print(warning, markup=False, highlight=False)
    if format == "markdown":
        _emit(cmp.to_markdown(comparison.rows, comparison.warnings, comparison.gate), out)
    elif to_file:
        write_json(out, comparison.to_json(), "the comparison")
        _console().print(f"wrote {out}", markup=False, highlight=False)
    else:
        sys.stdout.write(json.dumps(comparison.to_json(), indent=1) + "\n")


def thresholds(
    results: Annotated[list[Path], typer.Argument(help="Results file(s); e.g. one per instance type.")],
    levels: Annotated[str, typer.Option(help="Alarm levels as % of the measured maximum.")] = "100,90,80",
    metric: Annotated[str, typer.Option(help="bandwidth | ops | cpu")] = "bandwidth",
    format: Annotated[str, typer.Option(
        "--format", "-f", help="json | cloudformation | prometheus")] = "json",
    label: Annotated[list[str] | None, typer.Option(
        "--label", help="Name of the target each results file measured (one per file): cache.m4.xlarge.")]
    = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Output file (cloudformation: JSON if it ends in .json, else YAML).")] = None,
    direction: Annotated[str, typer.Option(
        "--direction", help="bandwidth: out (bytes out of the server, like CloudWatch NetworkBytesOut) "
        "| both (in + out).")] = "out",
) -> None:
    """Capacity thresholds: the measured maximum per target and alarm levels at percentages of it.

    Bandwidth is bytes out of the server (reference 001's NetworkBytesOut); --direction both: in + out.
    A maximum from a point that evicted keys or mostly missed gets a one-line warning in the output.
    Example: cachemark thresholds results/m4-xlarge.json --label cache.m4.xlarge -f cloudformation -o map.yaml
    """
    from ..outfile import write_json
    from ..report import thresholds as th
    from ..results import read

    if format not in th.FORMATS:
        raise UserError(f"unknown format {format!r}; choose one of {', '.join(th.FORMATS)}")
    if metric not in th.METRICS:
        raise UserError(f"unknown metric {metric!r}; choose one of {', '.join(th.METRICS)}")
    parsed = th.parse_levels(levels)
    chosen = th.parse_direction(direction)
    documents = [read(path) for path in results]
    result = th.compute(documents, metric, parsed, label or None, direction=chosen)
    as_json = out is not None and out.suffix.lower() == ".json"
    to_file = out is not None and str(out) != "-"
    if to_file:  # the output carries them too; on a file the user would not see them otherwise
        for warning in result.warnings:
            _console().print(f"warning: {warning}", markup=False, highlight=False)
    if format == "json" and to_file:
        write_json(out, result.to_json(), "thresholds")
        _console().print(f"wrote {out}", markup=False, highlight=False)
        return
    _emit(th.render(result, format, as_json=as_json), out)
