"""compare(): ratios and directions per label × op, noise from repeats (or the default), and
the CI gate (``--fail-on``), on real runs: checked-in ones, and two made here through the CLI,
one of them slowed by the network proxy."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from cachemark.cli.report_commands import compare as compare_cmd
from cachemark.cli.terminal import make_console
from cachemark.errors import UserError
from cachemark.report.compare import (
    DEFAULT_NOISE,
    METRICS,
    SAME,
    compare,
    gate,
    parse_rules,
    render_table,
    to_markdown,
    unmatched,
)
from cachemark.report.data import op_rows
from cachemark.results import as_model, write_atomic

pytest_plugins = ["report_fixtures"]


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("compare")(compare_cmd)
    app.command("noop")(lambda: None)  # two commands: typer then keeps "compare" as the verb
    return app


def _scaled(document: dict[str, Any], label: str, factor: float) -> dict[str, Any]:
    """A copy of ``document`` whose ``label`` runs took ``factor`` times as long per op."""
    out = copy.deepcopy(document)
    for run in out["runs"]:
        if run["label"] != label:
            continue
        for phase in run["phases"]:
            for op in phase["ops"].values():
                summary = op["summary"]
                summary["ops_per_s"] /= factor
                for metric in METRICS[1:]:
                    if summary[metric] is not None:
                        summary[metric] *= factor
    return out


def test_a_document_against_itself_is_all_same_and_within_noise(report_doc):
    rows = compare(as_model(report_doc), [as_model(report_doc)])
    keys = {(r.label, r.sweep, r.phase.name, r.op_name) for r in op_rows(as_model(report_doc))}
    assert len(rows) == len(keys)
    for row in (r.to_json() for r in rows):  # as compare -f json writes them
        for metric in METRICS:
            assert row[f"{metric}_ratio"] == pytest.approx(1.0)
            assert row[f"{metric}_direction"] == "same" and row[f"{metric}_within_noise"] is True
        if row["label"] == "memory":  # three repeats: the noise is measured
            assert row["base_repeats"] == 3
            assert row["ops_per_s_noise_measured"] is True and row["ops_per_s_noise"] != DEFAULT_NOISE
        else:  # the redis sweep has no repeats: the stated default stands in
            assert row["ops_per_s_noise_measured"] is False and row["ops_per_s_noise"] == DEFAULT_NOISE


def test_a_difference_within_the_noise_is_same_not_better_or_worse(report_doc):
    # the redis sweep has no repeats: 2 % slower is inside the default 5 %, 10 % is not
    for factor, direction in ((1.02, "same"), (1 / 1.02, "same"), (1.10, "worse"), (1 / 1.10, "better")):
        scaled = as_model(_scaled(report_doc, "redis", factor))
        rows = [r for r in compare(as_model(report_doc), [scaled]) if r.label == "redis"]
        assert rows and all(r.figures["p99_us"].direction == direction for r in rows), factor
        assert all(r.figures["ops_per_s"].direction == direction for r in rows), factor
        markdown = to_markdown(rows)
        if direction == "same":
            assert "worse" not in markdown.replace("neither better nor worse", "")
            assert "better" not in markdown.replace("neither better nor worse", "")
            assert f"{factor:.2f}× {SAME}" in markdown  # the ratio stays visible
            assert f"{DEFAULT_NOISE:.0%}, assumed where neither side has repeats" in markdown
        else:
            assert SAME not in markdown and f"× {direction}" in markdown


def test_the_table_says_same_within_noise_and_keeps_the_ratio(report_doc, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    console = make_console()
    with console.capture() as captured:
        render_table(compare(as_model(report_doc), [as_model(_scaled(report_doc, "redis", 1.01))]), console)
    text = " ".join(captured.get().split())  # the note under the table wraps
    assert f"1.01× {SAME}" in text and "0.99× better" not in text
    assert "worse" not in text.replace("neither better nor worse", "")
    assert "the spread across repeats" in text and f"{DEFAULT_NOISE:.0%}, assumed" in text  # redis: no repeats


def test_noise_is_the_spread_across_repeats(report_doc):
    rows = compare(as_model(report_doc), [as_model(report_doc)])
    memory_get = next(r for r in rows if r.label == "memory" and r.op == "get").figures["ops_per_s"]
    values = [r.summary.ops_per_s for r in op_rows(as_model(report_doc))
              if r.label == "memory" and r.op_name == "get"]
    mean = sum(values) / len(values)
    assert memory_get.base == pytest.approx(mean)
    assert memory_get.noise == pytest.approx((max(values) - min(values)) / mean)


def test_a_real_slowdown_is_worse_and_not_noise(report_doc, slower_doc):
    # "memory" in slower_doc really went to redis over loopback: far slower than in-process memory
    rows = [r for r in compare(as_model(report_doc), [as_model(slower_doc)]) if r.label == "memory"]
    assert {r.op for r in rows} == {"get", "set", "delete"}
    for row in rows:
        ops, p50 = row.figures["ops_per_s"], row.figures["p50_us"]
        assert ops.ratio < 0.5 and ops.direction == "worse"
        assert p50.ratio > 2 and p50.direction == "worse"
        assert ops.within_noise is False
    # and the other way round it is better
    back = [r for r in compare(as_model(slower_doc), [as_model(report_doc)]) if r.label == "memory"]
    assert all(r.figures["ops_per_s"].direction == "better" and r.figures["p50_us"].direction == "better"
               for r in back)
    assert any("redis" in name for name in unmatched(as_model(report_doc), [as_model(slower_doc)]))
    assert "worse" in to_markdown(rows)


def test_compare_command(report_doc, slower_doc, tmp_path):
    base = write_atomic(tmp_path / "base.json", report_doc)
    new = write_atomic(tmp_path / "new.json", slower_doc)
    app = _app()
    result = CliRunner().invoke(app, ["compare", str(base), str(new)])
    assert result.exit_code == 0, result.output
    assert "worse" in result.output and "memory" in result.output
    result = CliRunner().invoke(app, ["compare", str(base), str(new), "-f", "json", "-o", str(tmp_path / "c.json")])
    assert result.exit_code == 0 and (tmp_path / "c.json").exists()
    with pytest.raises(UserError, match="unknown format"):
        compare_cmd(base, [new], "xml", None)
    other = dict(slower_doc, runs=[dict(slower_doc["runs"][0], label="other")])
    with pytest.raises(UserError, match="nothing to compare"):
        compare_cmd(base, [write_atomic(tmp_path / "other.json", other)], "table", None)


# --- the CI gate: compare --fail-on ------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("p99>10%", [("p99_us", 10.0)]),
    (" p99 > 10 % , ops/s<-5%", [("p99_us", 10.0), ("ops_per_s", -5.0)]),
    ("P99.9>+2.5%,max>0%,p50>1%,p90>.5%,ops/s<0%", [("p999_us", 2.5), ("max_us", 0.0), ("p50_us", 1.0),
                                                     ("p90_us", 0.5), ("ops_per_s", 0.0)]),
])
def test_rules_name_the_figures_as_printed(text, expected):
    assert [(rule.metric, rule.threshold_pct) for rule in parse_rules(text)] == expected


@pytest.mark.parametrize(("text", "message"), [
    ("", "an empty rule"),
    ("p99>10%,", "an empty rule"),
    ("p99>10", "cannot read 'p99>10': write FIGURE>N% for a latency, ops/s<-N% for throughput"),
    ("p99>=10%", "cannot read 'p99>=10%'"),
    ("p99>ten%", "cannot read"),
    ("p95>10%", "unknown figure 'p95'; choose one of ops/s, p50, p90, p99, p99.9, max"),
    ("p99\x1b>10%", "unknown figure 'p99\\x1b'"),
    ("p99<10%", "a latency regresses when it rises; write p99>10%"),
    ("p99>-5%", "a latency regresses when it rises; write p99>5%"),
    ("ops/s>5%", "ops/s regresses when it falls; write ops/s<-5%"),
    ("ops/s<5%", "ops/s regresses when it falls; write ops/s<-5%"),
    ("ops/s<-100%", "could never fail"),
])
def test_a_malformed_rule_is_one_clear_line(text, message):
    with pytest.raises(UserError) as raised:
        parse_rules(text)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_malformed_rule_exits_2_before_any_file_is_read(tmp_path, cachemark):
    result = cachemark("compare", "missing.json", "missing.json", "--fail-on", "p99<10%", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.splitlines() == ["cachemark: error: --fail-on 'p99<10%': a latency regresses when it "
                                          "rises; write p99>10%"]


def test_the_gate_fails_on_a_real_slowdown_and_names_it(report_doc, slower_doc):
    rules = parse_rules("p99>10%,ops/s<-5%")
    verdict = gate(compare(as_model(report_doc), [as_model(slower_doc)]), rules, ["slower.json"]).to_json()
    assert verdict["passed"] is False
    failed = {(f["label"], f["phase"], f["op"], f["figure"]) for f in verdict["failures"]}
    assert {("memory", "main", op, figure) for op in ("get", "set") for figure in ("p99", "ops/s")} <= failed
    get_p99 = next(f for f in verdict["failures"] if f["op"] == "get" and f["figure"] == "p99")
    assert get_p99["change_pct"] > 100 and get_p99["noise_measured"] is True  # the base has three repeats
    line = get_p99["line"]
    assert line.startswith("regression: memory main:get p99 ") and " → " in line
    assert f"(+{get_p99['change_pct']:,.1f}%), beyond p99>10% and the noise " in line
    assert line.endswith("(the spread across repeats)")
    same = gate(compare(as_model(report_doc), [as_model(report_doc)]), rules, ["same.json"]).to_json()
    assert same["passed"] is True and same["failures"] == []
    assert same["checked"] == 2 * len(compare(as_model(report_doc), [as_model(report_doc)]))


def test_the_gate_needs_a_change_beyond_both_the_threshold_and_the_noise(report_doc):
    rules = parse_rules("p99>0%")

    def failed(new: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
        verdict = gate(compare(as_model(report_doc), [as_model(new)]), rules, ["new.json"]).to_json()
        return {(f["label"], f["sweep"], f["op"]): f for f in verdict["failures"]}

    # memory: three repeats, so its own measured spread is the bar
    same = compare(as_model(report_doc), [as_model(report_doc)])
    memory_get = next(r for r in same if r.label == "memory" and r.op == "get").figures["p99_us"]
    noise = memory_get.noise
    assert noise > 0 and memory_get.noise_measured
    assert ("memory", "", "get") not in failed(_scaled(report_doc, "memory", 1 + noise / 2))
    assert ("memory", "", "get") in failed(_scaled(report_doc, "memory", 1 + noise * 1.5 + 0.01))
    # redis: no repeats, so the stated default (5 %): 2 % is within it, 10 % beyond it
    assert not any(key[0] == "redis" for key in failed(_scaled(report_doc, "redis", 1.02)))
    beyond = [f for key, f in failed(_scaled(report_doc, "redis", 1.10)).items() if key[0] == "redis"]
    assert beyond and len(beyond) == sum(1 for r in same if r.label == "redis")
    assert all(f["line"].endswith(f"the noise {DEFAULT_NOISE:.1%} (assumed: no repeats)") for f in beyond)
    assert {f["sweep"] for f in beyond} == {"value_size=100", "value_size=1000", "value_size=10000"}
    assert "redis [value_size=1000] main:get p99" in next(f["line"] for f in beyond if f["sweep"].endswith("=1000"))


def test_the_gate_command_exits_1_after_writing_every_format(report_doc, slower_doc, tmp_path):
    base = str(write_atomic(tmp_path / "base.json", report_doc))
    new = str(write_atomic(tmp_path / "new.json", slower_doc))
    app, runner, rule = _app(), CliRunner(), ["--fail-on", "p99>10%"]
    table = runner.invoke(app, ["compare", base, new, *rule])
    assert table.exit_code == 1, table.output
    assert "regression: memory main:get p99 " in table.stdout
    assert "exit 1: " in table.stdout and f"{DEFAULT_NOISE:.0%} assumed where neither side has" in table.stdout
    as_json = runner.invoke(app, ["compare", base, new, "-f", "json", *rule])
    assert as_json.exit_code == 1
    document = json.loads(as_json.stdout)  # stdout stays one JSON document; the gate speaks on stderr
    assert document["gate"]["passed"] is False and document["gate"]["rules"] == ["p99>10%"]
    assert document["gate"]["default_noise_pct"] == DEFAULT_NOISE * 100
    assert any(f["op"] == "get" and f["figure"] == "p99" for f in document["gate"]["failures"])
    assert "regression: memory main:get p99 " in as_json.stderr
    written = runner.invoke(app, ["compare", base, new, "-f", "json", "-o", str(tmp_path / "gate.json"), *rule])
    assert written.exit_code == 1 and "wrote" in written.stderr
    assert json.loads((tmp_path / "gate.json").read_text())["gate"] == document["gate"]
    markdown = runner.invoke(app, ["compare", base, new, "-f", "markdown", *rule])
    assert markdown.exit_code == 1 and "**Gate failed:**" in markdown.stdout
    assert "- regression: memory main:get p99 " in markdown.stdout
    passed = runner.invoke(app, ["compare", base, base, "-f", "json", *rule])
    assert passed.exit_code == 0 and json.loads(passed.stdout)["gate"]["passed"] is True
    assert "passed: no figure regressed beyond --fail-on 'p99>10%'" in passed.stderr
    plain = runner.invoke(app, ["compare", base, new, "-f", "json"])  # no rules: a report, never a gate
    assert plain.exit_code == 0 and json.loads(plain.stdout)["gate"] is None


@pytest.mark.alone
def test_the_gate_on_two_real_runs_fires_when_the_proxy_slows_one(redis_server, tmp_path, cachemark):
    # The CI recipe, as a user runs it: the same short workload against one redis-server
    # twice, the second through the network proxy with 20 ms added per round trip.
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    run = ("run", "-t", url, "--label", "redis", "--keys", "50", "--duration", "1s", "--warmup", "0",
           "--workers", "1", "--seed", "7", "--no-calibrate")
    base = cachemark(*run, "-o", "base.json", cwd=tmp_path)
    assert base.returncode == 0, base.stderr
    slowed = cachemark(*run, "--network", "20ms", "-o", "new.json", cwd=tmp_path)
    assert slowed.returncode == 0, slowed.stderr
    gated = cachemark("compare", "base.json", "new.json", "--fail-on", "p99>10%", cwd=tmp_path)
    assert gated.returncode == 1, (gated.stdout, gated.stderr)
    line = next(x for x in gated.stdout.splitlines() if x.startswith("regression: redis main:get p99 "))
    change = float(line.split("(+")[1].split("%")[0].replace(",", ""))
    assert change > 500  # ≥ 20 ms against a loopback p99 far under 3 ms: a wide margin
    assert gated.stdout.splitlines()[-1].startswith("exit 1: ")
    as_json = cachemark("compare", "base.json", "new.json", "--fail-on", "p99>10%", "-f", "json", "-o",
                        "gate.json", cwd=tmp_path)
    assert as_json.returncode == 1
    assert json.loads((tmp_path / "gate.json").read_text())["gate"]["passed"] is False
    unchanged = cachemark("compare", "base.json", "base.json", "--fail-on", "p99>10%,ops/s<-5%", cwd=tmp_path)
    assert unchanged.returncode == 0, (unchanged.stdout, unchanged.stderr)
    assert "regression" not in unchanged.stdout and "passed: no figure regressed" in unchanged.stdout
    assert "worse" not in unchanged.stdout.replace("neither better nor worse", "")
