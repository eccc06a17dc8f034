"""Readable anywhere: tables at 80 (and 60) columns, progress in a pipe, compare's workload warning.

Tables fit the console by folding names and leaving out whole columns, never by cutting
a figure; piped output (a CI log) gets a plain progress line every few seconds; compare
says when the two files measured different workloads.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from cachemark.cli.session import LineProgress
from cachemark.report import compare as cmp
from cachemark.report.data import latency_cell
from cachemark.report.figures import fmt_latency, fmt_rate
from cachemark.report.fitted_table import print_fitted
from cachemark.report.table import COLUMNS, render, rows
from cachemark.results import as_model, as_run
from conftest import run_cli

DATA = Path(__file__).parent / "data"
REPORT_DOC = DATA / "report-doc.json"
ANSI = re.compile(r"\x1b\[")


def cli(*args: str, columns: int, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``cachemark ARGS`` as a user runs it, stdout piped, at ``COLUMNS=columns``."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env["COLUMNS"] = str(columns)
    result = run_cli(*args, cwd=cwd, timeout=timeout, env=env)
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result


def table_columns(text: str, header_word: str = "backend") -> dict[str, list[str]]:
    """The first table in ``text``: per header, its non-empty cells top to bottom (a folded name's
    continuation lines carry no figures, so each figure column has one cell per row)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┃") and header_word in line)
    header_lines = []
    for line in lines[start:]:
        if not line.startswith("┃"):
            break
        header_lines.append([cell.strip() for cell in line.split("┃")[1:-1]])
    headers = [" ".join(part[i] for part in header_lines if part[i]) for i in range(len(header_lines[0]))]
    cells: dict[str, list[str]] = {h: [] for h in headers}
    for line in lines[start + len(header_lines) + 1:]:
        if line.startswith("└"):
            break
        if not line.startswith("│"):
            continue
        for header, cell in zip(headers, (c.strip() for c in line.split("│")[1:-1]), strict=True):
            if cell:
                cells[header].append(cell)
    return cells


def expected_figures(document: dict[str, Any]) -> dict[str, list[str]]:
    """The figures of the results file, formatted as the table formats them, in the table's order."""
    out: dict[str, list[str]] = {"count": [], "ops/s": [], "p50": [], "p99": [], "p90": [], "p99.9": [],
                                 "max": []}
    for run in document["runs"]:
        for phase in run["phases"]:
            for op in phase["ops"].values():
                if not op["count"]:
                    continue
                summary = op["summary"]
                out["count"].append(f"{op['count']:,}")
                out["ops/s"].append(fmt_rate(summary["ops_per_s"]))
                for column, key in (("p50", "p50_us"), ("p90", "p90_us"), ("p99", "p99_us"),
                                    ("p99.9", "p999_us"), ("max", "max_us")):
                    out[column].append(latency_cell(op["count"], key, summary[key], fmt_latency))
    return out


def assert_fits(text: str, width: int) -> None:
    for line in text.splitlines():
        assert cell_len(line) <= width, f"{cell_len(line)} > {width}: {line!r}"
    assert "…" not in text  # nothing ellipsized, figures least of all


# --- tables at 80 and 60 columns -------------------------------------------------------------


@pytest.mark.parametrize("width", [80, 60])
def test_show_fits_narrow_terminals_with_every_figure_whole(tmp_path, width):
    result = cli("show", str(REPORT_DOC), columns=width, cwd=tmp_path)
    assert_fits(result.stdout, width)
    shown = table_columns(result.stdout)
    expected = expected_figures(json.loads(REPORT_DOC.read_text()))
    assert shown["p50"] == expected["p50"]  # p50 is never left out
    assert shown["ops/s"] == expected["ops/s"]
    for column in ("count", "p90", "p99", "p99.9", "max"):
        if column in shown:
            assert shown[column] == expected[column], column
    left_out = [c for c in COLUMNS if c not in shown]
    assert left_out, "11 columns cannot fit in 80"
    note = re.search(rf"not shown at {width} columns: ([^(]*) \(all columns: cachemark report -f markdown",
                     " ".join(result.stdout.split()))  # the note may wrap
    assert note, result.stdout
    named = note.group(1).split(", ")
    assert sorted(named) == sorted(left_out)
    assert named[:3] == ["p99.9", "p90", "max"]  # the least important go first


def test_show_at_200_columns_leaves_nothing_out(tmp_path):
    result = cli("show", str(REPORT_DOC), columns=200, cwd=tmp_path)
    assert_fits(result.stdout, 200)
    shown = table_columns(result.stdout)
    assert list(shown) == list(COLUMNS)
    expected = expected_figures(json.loads(REPORT_DOC.read_text()))
    for column, values in expected.items():
        assert shown[column] == values, column
    assert "not shown" not in result.stdout


@pytest.mark.parametrize("width", [60, 80])
def test_network_baseline_table_fits_too(tmp_path, width):
    result = cli("show", str(DATA / "results-network-phases.json"), columns=width, cwd=tmp_path)
    assert_fits(result.stdout, width)
    baseline = result.stdout[result.stdout.index("% of baseline"):]
    shown = table_columns(baseline, header_word="network")
    assert "vs baseline" in shown and "baseline" in shown["vs baseline"]
    # a one-op phase (reference 004's write and delete) has no figure to compare: "-"
    assert all(re.fullmatch(r"baseline|\d+%|-", cell) for cell in shown["vs baseline"])
    assert any(re.fullmatch(r"\d+%", cell) for cell in shown["vs baseline"])


def _render(document: dict[str, Any], width: int) -> str:
    console = Console(file=io.StringIO(), width=width)
    render(as_model(document), console, title="cachemark: a title long enough to wrap at narrow widths")
    return console.file.getvalue()


@pytest.mark.parametrize("name", ["report-doc", "results-network-phases", "results-open-sweep",
                                  "results-closed-server"])
def test_every_width_keeps_every_figure_whole(name):
    document = json.loads((DATA / f"{name}.json").read_text())
    medians = [row[5] for row in rows(as_model(document)) if row[5]]
    for width in (24, 40, 52, 66, 80, 97, 120, 160):
        text = _render(document, width)
        assert_fits(text, width)
        for value in medians:
            assert re.search(rf"(?<![\d.]){re.escape(value)}(?![\dµnms])", text), (width, value)


def test_narrower_than_any_table_lists_every_figure_as_words():
    document = json.loads(REPORT_DOC.read_text())
    text = _render(document, 30)
    assert_fits(text, 30)
    words = text.split()
    for value in expected_figures(document)["p50"]:
        assert f"p50={value}" in words


def test_names_fold_rather_than_push_figures_off(tmp_path):
    document = json.loads(REPORT_DOC.read_text())
    for run in document["runs"]:
        run["label"] = "a-very-long-backend-label-that-needs-folding-" + run["label"]
    text = _render(document, 80)
    assert_fits(text, 80)
    assert table_columns(text)["p50"] == expected_figures(document)["p50"]


def test_a_skipped_runs_reason_goes_under_the_table():
    document = json.loads(REPORT_DOC.read_text())
    reason = "memcached is not installed: install it with apt-get install memcached or put it on PATH"
    document["runs"].append({"label": "memcached", "target": "spawn:memcached", "status": "skipped",
                             "reason": reason, "phases": []})
    text = _render(document, 80)
    assert_fits(text, 80)
    assert f"memcached: skipped: {reason}" in " ".join(text.split())
    assert table_columns(text)["op"][-1] == "skipped"
    assert "count" in table_columns(text)  # the reason did not widen a figure column


def test_print_fitted_drops_in_the_given_order_and_reports_it():
    columns = ("name", "a", "b", "c")
    rows = [["x", "1,234,567", "2,345,678", "3,456,789"]]
    console = Console(file=io.StringIO(), width=36)
    dropped = print_fitted(console, columns, rows, names=1, drop_order=("b", "c"))
    assert dropped == ["b"]
    text = console.file.getvalue()
    assert_fits(text, 36)
    assert "1,234,567" in text and "3,456,789" in text and "2,345,678" not in text


def test_narrower_than_any_table_indents_every_line_of_figures():
    text = _render(json.loads(REPORT_DOC.read_text()), 30)
    figures = [line for line in text.splitlines() if re.search(r"(?:^|\s)(?:count|ops/s|p50|max|errors)=", line)]
    assert len(figures) > len(rows(as_model(json.loads(REPORT_DOC.read_text()))))  # they wrap at 30 columns
    assert all(line.startswith("  ") for line in figures), figures  # continuations too, not from column 0


# --- the presets' headline figures at 80 columns ------------------------------------------------


def _phases_of(run: dict[str, Any], names: dict[str, str]) -> list[dict[str, Any]]:
    """``run``'s one phase split into one phase per op: {phase name: op}."""
    (phase,) = run["phases"]
    return [{**phase, "name": name, "ops": {op: phase["ops"][op]}} for name, op in names.items()]


def _preset_document(headline: str) -> dict[str, Any]:
    """The checked-in results reshaped as the preset whose headline figure is ``headline`` runs:
    its phases, its repeats, its labels (the longest: a network profile, an emulator, dropped writes)."""
    report = json.loads(REPORT_DOC.read_text())
    memory = [r for r in report["runs"] if r["label"] == "memory"]
    runs: list[dict[str, Any]] = []
    if headline == "timeit":  # django-s3-vs-memcached: set, then get, 3 repeats, 4 caches
        for label in ("memcached (python-memcached)", "memcached (pylibmc)", "s3 (django-s3-cache layout)",
                      "misconfigured (dummy cache)"):
            for run in memory:
                phases = _phases_of(run, {"set": "set", "get": "get"})
                runs.append({**copy.deepcopy(run), "label": label, "phases": phases,
                             "server": {"emulator": True} if label.startswith("s3") else None,
                             "dropped_writes": "nothing read back" if label.startswith("misconfigured") else None})
    elif headline == "tag-clean":  # magento-clean-by-tag: read / write / clean per backend
        for label in ("file (scan)", "redis (tag sets)", "memcached+file", "memcached+redis"):
            run = copy.deepcopy(memory[0])
            ops = run["phases"][0]["ops"]
            ops["clean"] = ops.pop("delete")
            runs.append({**run, "label": label, "repeat": None})
    elif headline == "percentiles":  # diskcache-django: one table per backend
        runs = report["runs"]
    elif headline == "baseline":  # rails-local-vs-remote: write, read, delete per network profile
        network = json.loads((DATA / "results-network-phases.json").read_text())
        rtts = {"same-host": 0, "same-zone": 300, "cross-zone": 1000, "cross-region": 70000}
        for label in ("redis", "memcached (Rails.cache)"):
            for profile, rtt in rtts.items():
                run = copy.deepcopy(network["runs"][0])
                for phase in run["phases"]:  # the cross-region block's seconds, as wide as a real one's
                    phase["wall_s"] *= 1 + rtt / 100
                runs.append({**run, "label": label, "network": {**run["network"], "profile": profile,
                                                                "rtt_us": rtt, "proxied": rtt > 0}})
    elif headline == "bandwidth":  # redis-bandwidth-sweep: a value-size sweep, sampled server
        runs = [{**r, "label": "local-redis"} for r in report["runs"] if r["label"] == "redis"]
    return {**report, "experiment": {**report["experiment"], "headline": headline}, "runs": runs}


@pytest.mark.parametrize("headline", ["timeit", "tag-clean", "percentiles", "baseline", "bandwidth"])
def test_every_presets_headline_stays_a_table_at_80_columns(headline):
    """At 80 columns a headline table is a table: headers and text cells break between words, names fold,
    no figure is cut; not one block of ``Comparison_to_Baseline=305%`` words per row."""
    from cachemark.report.blocks import to_rich
    from cachemark.report.headline import headline_blocks

    blocks = headline_blocks(as_model(_preset_document(headline)))
    assert blocks and all(block.rows for block in blocks)
    for block in blocks:
        console = Console(file=io.StringIO(), width=80)
        to_rich(block, console)
        text = console.file.getvalue()
        assert_fits(text, 80)
        assert "─" * 20 in text  # the rule under a table's header
        for column in block.columns[block.left:]:
            assert f"{column.replace(' ', '_')}=" not in text, (column, text)
        for row in block.rows:  # every figure whole, in its row's line
            figures = [cell for cell in row[block.left:] if cell and " " not in cell]
            assert any(all(re.search(rf"(?<!\S){re.escape(f)}(?!\S)", line) for f in figures)
                       for line in text.splitlines()), (row, text)


def test_presets_wrap_their_descriptions_under_themselves(tmp_path):
    from cachemark.presets import preset_names

    lines = cli("presets", columns=80, cwd=tmp_path).stdout.splitlines()
    assert_fits("\n".join(lines), 80)
    indent = None
    for line in lines:
        name = line.split(" ", 1)[0]
        if name in preset_names():
            indent = len(line) - len(line[len(name):].lstrip())
        else:  # a description's next line starts where the description did
            assert indent and line[:indent].strip() == "" and line[indent] != " ", line
    assert len(lines) > len(preset_names())  # the descriptions do wrap at 80


# --- progress in a pipe ----------------------------------------------------------------------


def test_piped_run_prints_plain_progress_lines(tmp_path):
    result = cli("run", "-t", "memory://", "--duration", "7s", "--warmup", "0", "--no-calibrate",
                 "-o", str(tmp_path / "out.json"), columns=100, cwd=tmp_path)
    assert not ANSI.search(result.stdout), "escape codes in piped output"
    lines = result.stdout.splitlines()
    table = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    before = lines[:table]
    assert before[0] == "memory: starting"
    middle = [line for line in before if re.fullmatch(r"memory · main: [\d,]+ ops · \d+\.\d s of 7 s", line)]
    assert middle, before
    assert any(re.fullmatch(r"memory: ok · [\d,]+ ops in \d+\.\d s", line) for line in before), before


def test_line_progress_prints_at_most_every_few_seconds():
    now = [0.0]
    console = Console(file=io.StringIO(), width=80)
    progress = LineProgress(console, "redis", every=5.0, clock=lambda: now[0])
    for step in range(1, 121):  # 12 s of updates, ten a second
        now[0] = step / 10
        progress.update("main", step * 100, None, now[0], 12.0)
    progress.end("ok", as_run({"label": "redis", "status": "ok",
                               "phases": [{"wall_s": 12.0, "ops": {"get": {"count": 12_000}}}]}))
    assert console.file.getvalue().splitlines() == [
        "redis: starting",
        "redis · main: 5,000 ops · 5.0 s of 12 s",
        "redis · main: 10,000 ops · 10.0 s of 12 s",
        "redis: ok · 12,000 ops in 12.0 s",
    ]


@pytest.mark.parametrize(("value", "every"), [("1", 1.0), ("0.5", 0.5), ("", 5.0), ("soon", 5.0), ("-1", 5.0)])
def test_the_line_interval_is_read_from_the_environment(monkeypatch, value, every):
    monkeypatch.setenv("CACHEMARK_PROGRESS_EVERY", value)
    assert LineProgress(Console(file=io.StringIO()), "redis").every == every


def test_line_progress_counts_towards_an_op_target():
    console = Console(file=io.StringIO(), width=80)
    progress = LineProgress(console, "memory", every=0.0)
    progress.update("write", 10, 1000, 0.5, None)
    progress.end("skipped", as_run({"label": "memory", "status": "skipped"}))
    assert console.file.getvalue().splitlines()[1:] == ["memory · write: 10 of 1,000 ops · 0.5 s", "memory: skipped"]


def test_a_cluster_runs_label_is_printed_cut_escaped_and_never_as_markup():
    from cachemark.cli.agents_table import print_agents

    label = "[/bold]\x1b[2J" + "y" * 5000  # rich read a title's "[/bold]" as markup: a MarkupError
    run = as_run({"label": label, "target": "memory://", "status": "failed", "dask": {"agents": [], "hosts": ["h"]},
                  "phases": [{"name": "main", "agents": [], "workers": 2, "wall_s": 1.0, "client_cpu_s": 0.5,
                              "agents_missing": ["agent 1: never joined"]}]})
    console = Console(file=io.StringIO(), width=200)
    print_agents(console, run)
    text = console.file.getvalue()
    assert "\x1b" not in text and "[/bold]\\x1b[2Jyyy" in text
    assert all(len(line) <= 200 for line in text.splitlines())
    missing = next(line for line in text.splitlines() if line.endswith("missing: agent 1: never joined"))
    assert "…" in missing and len(missing) < 220


# --- compare: are these the same experiment? ---------------------------------------------------


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two real small runs that differ in value size only."""
    where = tmp_path_factory.mktemp("runs")
    paths = []
    for size in ("100", "1000"):
        path = where / f"v{size}.json"
        cli("run", "-t", "memory://", "--duration", "1s", "--warmup", "0", "--no-calibrate", "--workers", "1",
            "--value-size", size, "-o", str(path), columns=200, cwd=where)
        paths.append(path)
    return paths[0], paths[1]


def test_compare_warns_when_the_workloads_differ(two_runs, tmp_path):
    small, large = two_runs
    result = cli("compare", str(small), str(large), columns=80, cwd=tmp_path)
    text = " ".join(result.stdout.split())
    assert "warning: the workloads differ: value_size 100 vs 1000 — the comparison mixes two experiments" in text
    assert_fits(result.stdout, 80)
    markdown = cli("compare", str(small), str(large), "-f", "markdown", "-o", "-", columns=80, cwd=tmp_path)
    assert "> **warning:** the workloads differ: value_size 100 vs 1000" in markdown.stdout
    written = cli("compare", str(small), str(large), "-f", "json", "-o", str(tmp_path / "c.json"), columns=80,
                  cwd=tmp_path)
    assert "value_size 100 vs 1000" in written.stderr
    assert "value_size 100 vs 1000" in json.loads((tmp_path / "c.json").read_text())["warnings"][0]


def test_compare_of_the_same_workload_does_not_warn(two_runs, tmp_path):
    small, _ = two_runs
    for fmt in ("table", "markdown"):
        result = cli("compare", str(small), str(small), "-f", fmt, "-o", "-", columns=80, cwd=tmp_path)
        assert "warning" not in result.stdout + result.stderr


def test_workload_differences_name_each_field_with_both_values():
    base = json.loads(REPORT_DOC.read_text())
    new = copy.deepcopy(base)
    workload = new["experiment"]["workload"]
    workload.update(workers=4, seed=99, mix={"get": 50.0, "set": 50.0})
    new["experiment"]["network"] = "same-zone"
    new["experiment"]["sweep"] = {"value_size": ["100", "1000"]}
    differences = {d["field"]: (d["base"], d["new"]) for d in cmp.workload_differences(as_model(base), as_model(new))}
    assert differences == {
        "workers": ("1", "4"),
        "mix": ("get=90,set=9,delete=1", "get=50,set=50"),
        "network": ("none", "same-zone"),
        "sweep": ("none", "value_size=100,1000"),
    }  # the seed is another draw of the same workload, not another workload
    assert cmp.workload_differences(as_model(base), as_model(copy.deepcopy(base))) == []
    warnings = cmp.workload_warnings(as_model(base), [as_model(copy.deepcopy(base)), as_model(new)],
                                     names=["same.json", "other.json"])
    assert warnings == ["warning: the workloads differ (other.json): mix get=90,set=9,delete=1 vs get=50,set=50; "
                        "workers 1 vs 4; network none vs same-zone; sweep none vs value_size=100,1000 — the "
                        "comparison mixes two experiments"]


def test_workload_differences_compare_phases_field_by_field():
    base = json.loads((DATA / "results-network-phases.json").read_text())
    new = copy.deepcopy(base)
    new["experiment"]["workload"]["phases"][1]["ops"] = 2000
    read_ops = {"field": "read.ops", "base": "1000", "new": "2000"}
    assert cmp.workload_differences(as_model(base), as_model(new)) == [read_ops]
    new["experiment"]["workload"]["phases"].pop()
    assert cmp.workload_differences(as_model(base), as_model(new)) == [
        {"field": "phases", "base": "write,read,delete", "new": "write,read"}]


def test_files_without_an_experiment_compare_without_crashing():
    base = json.loads(REPORT_DOC.read_text())
    bare = {k: v for k, v in base.items() if k != "experiment"}
    assert {d["field"] for d in cmp.workload_differences(as_model(base), as_model(bare))} >= {"keys", "value_size"}
    assert cmp.workload_differences(as_model(bare), as_model(bare)) == []
