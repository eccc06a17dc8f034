"""A cache that keeps nothing is named, and the command says so in its exit code (reference 000's lesson).

Also the exit code of a run whose ops failed, and ``-o`` choosing the output format by suffix.
"""

from __future__ import annotations

import json
from pathlib import Path

from cachemark.cli import output_paths, untrusted_runs
from cachemark.results import as_model


def _results(path: Path) -> dict:
    return json.loads(path.read_text())


def test_a_target_that_drops_writes_is_named_and_the_run_exits_1(tmp_path, cachemark) -> None:
    result = cachemark("run", "-t", "django://?BACKEND=dummy", "-t", "memory://", "--ops", "300", "--warmup", "0",
                       "--keys", "100", "--value-size", "700", "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    runs = {run["label"]: run for run in _results(tmp_path / "out.json")["runs"]}
    dummy = next(run for label, run in runs.items() if label != "memory")
    assert "700-byte value written without error was not there when read back" in dummy["dropped_writes"]
    assert runs["memory"]["dropped_writes"] is None
    assert dummy["status"] == "ok"  # measured all the same, as the reference's author did
    # every get of the dummy missed: the measurement agrees with the probe
    get = dummy["phases"][0]["ops"]["get"]
    assert get["hits"] == 0 and get["misses"] == get["count"] > 0
    assert f"{dummy['label']}: drops writes: a 700-byte value" in result.stdout
    assert "--allow-errors" in result.stdout


def test_allow_errors_keeps_exit_0_and_the_finding(tmp_path, cachemark) -> None:
    result = cachemark("run", "-t", "django://?BACKEND=dummy", "--ops", "100", "--warmup", "0", "--keys", "10",
                       "--no-calibrate", "--allow-errors", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert _results(tmp_path / "out.json")["runs"][0]["dropped_writes"]


def test_a_working_cache_passes_the_probe_at_the_largest_value_size(tmp_path, cachemark, spawn) -> None:
    server = spawn("memcached")
    result = cachemark("run", "-t", server.url(), "--ops", "200", "--warmup", "0", "--keys", "50",
                       "--value-size", "100:1,900000:1", "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run = _results(tmp_path / "out.json")["runs"][0]
    assert run["dropped_writes"] is None
    assert run["backend"]["cleanup_removed"] != 0  # the probe key went with the run's own keys


def test_untrusted_runs_counts_failed_ops() -> None:
    run = {"label": "redis", "target": "spawn:redis", "status": "ok",
           "phases": [{"ops": {"get": {"count": 10, "errors": {"connection": 3}},
                               "set": {"count": 5, "errors": {"timeout": 2}}}}]}
    assert untrusted_runs(as_model({"runs": [run]})) == ["redis: 5 ops failed (connection 3, timeout 2)"]
    run["phases"][0]["ops"] = {"get": {"count": 10, "errors": {}}}
    assert untrusted_runs(as_model({"runs": [run]})) == []


def test_a_finding_of_several_repeats_is_one_line_naming_them_all() -> None:
    """A cache that drops writes, run twice: one line says so for #1 and #2, and its canaries' dropped_write
    errors are not counted again as failed ops (the same finding); other failures are summed over repeats."""
    def run(repeat: int, errors: dict[str, int]) -> dict:  # repeat: 0-based, named #1, #2
        return {"label": "django(dummy)", "target": "django://?BACKEND=dummy", "status": "ok", "repeat": repeat,
                "dropped_writes": "a 1,000-byte value written without error was not there when read back",
                "phases": [{"ops": {"set": {"count": 10, "errors": errors}}}]}

    lines = untrusted_runs(as_model({"runs": [run(0, {"dropped_write": 12}), run(1, {"dropped_write": 22})]}))
    assert lines == ["django(dummy) #1, #2: drops writes: a 1,000-byte value written without error was not there "
                     "when read back"]
    lines = untrusted_runs(as_model({"runs": [run(0, {"dropped_write": 12, "timeout": 1}), run(1, {"timeout": 2})]}))
    assert lines[1:] == ["django(dummy) #1, #2: 3 ops failed (timeout 3)"]


def test_output_suffix_chooses_the_format() -> None:
    assert output_paths(Path("r.json")) == (Path("r.json"), None, None)
    assert output_paths(Path("r")) == (Path("r"), None, None)
    assert output_paths(Path("x/r.CSV")) == (None, Path("x/r.CSV"), "csv")
    assert output_paths(Path("r.md")) == (None, Path("r.md"), "markdown")
    assert output_paths(Path("r.html")) == (None, Path("r.html"), "html")


def test_o_csv_md_html_write_that_format_and_keep_the_results(tmp_path, cachemark) -> None:
    for name, first in (("r.csv", "run,"), ("r.md", "## cachemark"), ("r.html", "<!DOCTYPE html>")):
        result = cachemark("run", "-t", "memory://", "--ops", "200", "--warmup", "0", "--keys", "10",
                           "--no-calibrate", "-o", name, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert (tmp_path / name).read_text().startswith(first), name
        assert f"report: {name}" in result.stdout
    saved = sorted((tmp_path / "results").glob("cachemark-*.json"))
    assert len(saved) >= 1 and _results(saved[-1])["runs"][0]["status"] == "ok"
