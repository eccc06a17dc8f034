"""Exports, the HTML document's structure and the report command, on results from real runs."""

from __future__ import annotations

import csv
import io
import json
import re
import tomllib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cachemark import outfile
from cachemark.cli.report_commands import compare as compare_cmd
from cachemark.cli.report_commands import report as report_cmd
from cachemark.cli.report_commands import thresholds as thresholds_cmd
from cachemark.errors import UserError
from cachemark.measure.histogram import Histogram
from cachemark.measure.summary import latency_histogram
from cachemark.report import data, export
from cachemark.report.charts import percentile_grid, percentile_to_x
from cachemark.report.data import op_rows
from cachemark.report.html import render_html, saturation_point
from cachemark.results import as_model, as_run, write_atomic
from cachemark.spec import to_toml

pytest_plugins = ["report_fixtures"]


def _all_ops(doc):
    return [(run, phase, name, op) for run in doc["runs"] for phase in run["phases"]
            for name, op in phase["ops"].items()]


def test_markdown_tables_and_percent_of_baseline(report_doc):
    text = export.to_markdown(as_model(report_doc), baseline="redis")
    tables = [line for line in text.splitlines() if line.startswith("|")]
    # summary: header + align + one line per run × op
    assert len([t for t in tables if t.startswith("| memory #")]) == 3 * 2 * 3  # summary + baseline tables
    assert "### Server" in text and "### Comparison to baseline (redis)" in text
    rows = op_rows(as_model(report_doc))
    base = {(r.sweep, r.op_name): r for r in rows if r.label == "redis"}
    # the baseline's own rows read "--"; another label's ops/s is the exact ratio to the first redis point
    first_sweep = min(base)[0]
    memory_get = next(r for r in rows if r.label == "memory" and r.op_name == "get")
    expected = data.fmt_percent(memory_get.summary.ops_per_s / base[(first_sweep, "get")].summary.ops_per_s * 100)
    assert any(line.startswith("| memory #1 | get |") and f"| {expected} |" in line for line in tables)
    assert any(line.startswith("| redis [value_size=100] | get |") and "| -- |" in line for line in tables)


def test_unknown_baseline_is_a_user_error(report_doc, tmp_path, cachemark):
    with pytest.raises(UserError, match="baseline 'nope'"):
        export.to_markdown(as_model(report_doc), baseline="nope")
    # the HTML page is written as it is made: the label is refused before any of it reaches stdout
    (tmp_path / "r.json").write_text(json.dumps(report_doc))
    result = cachemark("report", "r.json", "-f", "html", "-o", "-", "--baseline", "nope", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert "baseline 'nope' is not a label in the results" in result.stderr


def test_csv_one_row_per_run_phase_op_with_every_figure(report_doc):
    rows = list(csv.DictReader(io.StringIO(export.to_csv(as_model(report_doc)))))
    ops = _all_ops(report_doc)
    assert len(rows) == len(ops)
    for row, (run, phase, name, op) in zip(rows, ops, strict=True):
        assert row["label"] == run["label"] and row["op"] == name and int(row["count"]) == op["count"]
        for key, value in op["summary"].items():
            assert row[key] == ("" if value is None else str(value))
        if phase.get("server"):
            assert float(row["server_cpu_us_per_op"]) == phase["server"]["cpu_us_per_op"]


def test_json_export_drops_histograms_only(report_doc):
    slim = json.loads(export.to_json(report_doc))
    assert "histograms" not in json.dumps(slim)
    assert len(slim["runs"]) == len(report_doc["runs"])
    assert slim["runs"][0]["phases"][0]["ops"]["get"]["summary"] == \
        report_doc["runs"][0]["phases"][0]["ops"]["get"]["summary"]
    assert "histograms" in report_doc["runs"][0]["phases"][0]["ops"]["get"]  # the input is untouched


def test_write_text_leaves_no_temp_files(tmp_path):
    path = outfile.write_text(tmp_path / "sub" / "r.md", "hello\n")
    assert path.read_text() == "hello\n" and [p.name for p in path.parent.iterdir()] == ["r.md"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="cannot write"):
        outfile.write_text(tmp_path / "file" / "y.md", "x")  # a file where a directory should be


def test_html_has_every_section_and_chart(report_doc):
    html = render_html(as_model(report_doc), baseline="memory")
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    for heading in ("Summary", "Server", "Latency percentile spectrum", "Throughput and hit ratio",
                    "Per-second time series", "Sweeps", "Environment", "Calibration", "Re-run this experiment"):
        assert f">{heading}</h" in html, heading
    ops = {name for *_, name, _ in _all_ops(report_doc)}
    assert html.count('id="spectrum-') == len(ops)
    assert html.count('id="sweep-') == 3  # ops/s, bandwidth, p99 vs value_size
    assert "saturates at" not in html  # value_size is not a load: no saturation point to mark
    # self-contained: no external resources of any kind
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html)
    assert "@import" not in html


def test_spectrum_points_are_the_histogram_percentiles(report_doc):
    op = report_doc["runs"][0]["phases"][0]["ops"]["get"]
    hist = latency_histogram({k: Histogram.decode(v) for k, v in op["histograms"].items()})
    grid = percentile_grid(hist.total)
    assert grid[0] == 0.0 and percentile_to_x(90.0) == pytest.approx(1.0)
    assert percentile_to_x(99.0) == pytest.approx(2.0)
    # p90 of the plotted series is the summary's p90 (the grid passes exactly through the nines)
    values = dict(zip(grid, hist.percentiles(grid), strict=True))
    p90 = min(grid, key=lambda p: abs(p - 90.0))
    assert values[p90] / 1000 == pytest.approx(op["summary"]["p90_us"])


def test_saturation_point_is_where_throughput_flattens_while_p99_climbs():
    throughput = [(1, 1000.0), (2, 1900.0), (4, 1950.0), (8, 1960.0)]
    assert saturation_point(throughput, [(1, 100.0), (2, 105.0), (4, 200.0), (8, 400.0)]) == 2
    assert saturation_point(throughput, [(1, 100.0), (2, 100.0), (4, 101.0), (8, 102.0)]) is None
    assert saturation_point([], []) is None


def test_spec_toml_round_trips(report_doc):
    experiment = report_doc["experiment"]
    parsed = tomllib.loads(to_toml(experiment))

    def without_none(value):
        if isinstance(value, dict):
            return {k: without_none(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [without_none(v) for v in value]
        return value

    assert parsed == without_none(experiment)


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("report")(report_cmd)
    app.command("compare")(compare_cmd)
    app.command("thresholds")(thresholds_cmd)
    return app


def test_report_command_writes_each_format(report_doc, tmp_path):
    results = write_atomic(tmp_path / "run.json", report_doc)
    runner = CliRunner()
    for fmt, name in (("html", "run.html"), ("markdown", "run.md"), ("csv", "run.csv"), ("json", "run.summary.json")):
        outcome = runner.invoke(_app(), ["report", str(results), "--format", fmt])
        assert outcome.exit_code == 0, outcome.output
        assert (tmp_path / name).stat().st_size > 0
    json.loads((tmp_path / "run.summary.json").read_text())
    outcome = runner.invoke(_app(), ["report", str(results), "-o", str(tmp_path / "b.md"), "--baseline", "redis"])
    assert outcome.exit_code == 0 and "Comparison to baseline" in (tmp_path / "b.md").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_report_command_bad_input(tmp_path):
    not_results = tmp_path / "x.json"
    not_results.write_text('{"hello": 1}')
    garbage = tmp_path / "g.json"
    garbage.write_text("{not json")
    for args, message in (
        ([str(tmp_path / "missing.json")], "no such results file"),
        ([str(not_results)], "not a cachemark results file"),
        ([str(garbage)], "not a results file"),
    ):
        with pytest.raises(UserError, match=message):
            report_cmd(Path(args[0]), None, None, None)


def test_report_command_unknown_format(report_doc, tmp_path):
    results = write_atomic(tmp_path / "run.json", report_doc)
    with pytest.raises(UserError, match="unknown format 'pdf'"):
        report_cmd(results, None, "pdf", None)
    with pytest.raises(UserError, match="one of this command.s inputs"):
        report_cmd(results, results, "json", None)


def test_a_handful_of_ops_marks_its_tail_and_a_single_op_has_no_percentile(tmp_path) -> None:
    from cachemark.report.data import FEW_SAMPLES_NOTE, latency_cell
    from cachemark.report.export import to_markdown
    from cachemark.report.figures import fmt_latency

    assert latency_cell(1, "p50_us", 12.0, fmt_latency) == "-"
    assert latency_cell(1, "max_us", 12.0, fmt_latency) == "12µs"
    assert latency_cell(29, "p99_us", 12.0, fmt_latency) == "12µs*"
    assert latency_cell(30, "p99_us", 12.0, fmt_latency) == "12µs"
    assert latency_cell(299, "p999_us", 12.0, fmt_latency) == "12µs*"
    assert latency_cell(29, "p50_us", 12.0, fmt_latency) == "12µs"
    document = json.loads((Path(__file__).parent / "data" / "results-network-phases.json").read_text())
    text = to_markdown(as_model(document))
    assert FEW_SAMPLES_NOTE in text
    summary = [line for line in text.splitlines() if line.count(" | ") == 10]  # the op table's 11 columns
    one_op = [line for line in summary if line.split(" | ")[1:2] in (["write:set"], ["delete"])]
    assert len(one_op) == 6 and all("| - | - | - | - |" in line for line in one_op)


def test_the_proxy_overhead_note_follows_the_proxied_runs():
    from cachemark.report.data import proxy_overhead_note

    document = json.loads((Path(__file__).parent / "data" / "results-network-phases.json").read_text())
    note = proxy_overhead_note(as_model(document))
    assert note.startswith("network proxy: adds 154 µs p50, 846 µs p99 per round trip")
    del document["environment"]["proxy_overhead"]  # an older file: said so, not silently dropped
    assert "not measured" in proxy_overhead_note(as_model(document))
    for run in document["runs"]:
        run["network"]["proxied"] = False
    assert proxy_overhead_note(as_model(document)) is None  # nothing went through the proxy


def test_a_phase_named_after_its_op_is_not_said_twice(report_doc):
    """Reference 004's phases write (set), read (exists+get) and delete (delete): ``delete``, not ``delete:delete``,
    in the terminal, the Markdown, the HTML, the preset's percentile table and the verdict."""
    from cachemark.report import table
    from cachemark.report.headline import percentile_table
    from cachemark.report.verdict import verdict_blocks

    document = json.loads((Path(__file__).parent / "data" / "results-network-phases.json").read_text())
    assert {row[1] for row in table.rows(as_model(document))} == {"write:set", "read:exists+get", "delete"}
    outputs = [export.to_markdown(as_model(document)), render_html(as_model(document)),
               "\n".join(" | ".join(row) for row in percentile_table(as_run(document["runs"][0]))[0]),
               "\n".join(verdict_blocks(as_model(document))[0].notes)]
    for text in outputs:
        assert "delete:delete" not in text and "write:set" in text
    assert re.search(r"^\| redis \[same-host\] \| delete \|", outputs[0], re.M)


def test_a_few_ops_never_sent_are_a_note_in_words_not_a_warning(report_doc):
    """One op of an open-loop schedule not sent: "1 op due was", its share to two digits (not "0 %"), and no
    warning that changes the reading (under 1 % of the schedule is a busy moment at its edge)."""
    import copy

    from cachemark.report.verdict import verdict_blocks

    document = copy.deepcopy(report_doc)
    phase = document["runs"][3]["phases"][0]
    phase["missed"] = 1
    sent = sum(op["count"] for op in phase["ops"].values())
    share = 100 / (1 + sent)
    assert share < 1
    (note,) = data.load_notes(as_model(document))
    assert note == (f"redis [value_size=100]: main: the load fell behind its rate: 1 op due was never sent "
                    f"({share:.2g}% of the schedule); the latencies cover the ops that were sent")
    assert not any("never sent" in line for line in verdict_blocks(as_model(document))[0].notes)

