"""The results file: what cachemark writes loads back unchanged; a bad file is one line naming the bad field.

Ground truth for "every file the current code writes" is real runs: the report fixtures
(memory repeats, a redis sweep with server sampling), a command-line run through the
Python workers, the engine and open loop, and the three files from real runs the fuzz
starts from (``tests/data``). The full-disk test mounts a 64 KiB tmpfs (root only).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from cachemark.errors import UserError
from cachemark.outfile import write_text
from cachemark.results import SCHEMA, as_model, load, write_atomic
from conftest import run_cli

pytest_plugins = ["report_fixtures"]

DATA = Path(__file__).parent / "data"
SEEDS = sorted(DATA.glob("results-*.json"))


def _through_disk(document: dict[str, Any], directory: Path) -> dict[str, Any]:
    path = write_atomic(directory / f"{uuid.uuid4().hex}.json", document)
    assert load(path) == json.loads(path.read_text()), "load must return what the file holds (no secrets in these)"
    return load(path)


def test_files_written_by_real_runs_load_unchanged(report_doc, slower_doc, tmp_path):
    for document in (report_doc, slower_doc):
        assert _through_disk(document, tmp_path) == json.loads(json.dumps(document, default=str))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: p.name)
def test_the_fuzz_seed_files_from_real_runs_load(seed):
    document = load(seed)
    assert document["schema"] == SCHEMA and document["runs"]


def test_a_command_line_run_loads_and_every_report_reads_it(tmp_path):
    """Python workers with server sampling, the native engine, open loop and two phases: all load."""
    (tmp_path / "two.toml").write_text(
        'targets = ["memory://", "spawn:redis", "spawn:memcached?client=engine"]\n'
        "[workload]\nkeys = 200\nwarmup = 0\nworkers = 1\nrate = 400.0\n"
        '[[workload.phases]]\nname = "fill"\nmix = { set = 1 }\nduration = "0.3s"\n'
        '[[workload.phases]]\nname = "read"\nmix = { exists = 1, get = 3, get_many = 1 }\nduration = "0.3s"\n')
    run = run_cli("run", "two.toml", "--no-calibrate", "-o", "r.json", cwd=tmp_path, env=dict(os.environ))
    assert run.returncode == 0, run.stderr
    document = load(tmp_path / "r.json")
    assert [r["status"] for r in document["runs"]] == ["ok", "ok", "ok"]
    assert all(p["mode"] == "open" for r in document["runs"] for p in r["phases"])
    for args in (["show", "r.json"], ["report", "r.json"], ["report", "r.json", "-f", "csv", "-o", "-"],
                 ["compare", "r.json", "r.json"], ["thresholds", "r.json", "--metric", "ops"]):
        result = run_cli(*args, cwd=tmp_path, timeout=120, env=dict(os.environ))
        assert result.returncode == 0, (args, result.stderr)


def _seed() -> dict[str, Any]:
    return json.loads((DATA / "results-closed-server.json").read_text())


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def mutate(document: dict[str, Any]) -> None:
        node = document
        for key in path[:-1]:
            node = node[key]
        if value is KeyError:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return mutate


@pytest.mark.parametrize(("mutate", "message"), [
    (_set(("runs", 0, "phases", 0, "ops", "get", "count"), "5"),
     "runs[0].phases[0].ops.get.count: expected an integer, not a string"),
    (_set(("runs", 0, "phases", 0, "ops", "get", "count"), -1),
     "runs[0].phases[0].ops.get.count: must not be negative"),
    (_set(("runs", 0, "phases", 0, "ops", "get", "count"), 1.0),
     "runs[0].phases[0].ops.get.count: expected an integer, not a number"),
    (_set(("runs", 0, "phases", 0, "wall_s"), None), "runs[0].phases[0].wall_s: expected a number, not null"),
    (_set(("runs", 0, "label"), KeyError), "runs[0].label: missing"),
    (_set(("runs", 0, "label"), 7), "runs[0].label: expected a string, not an integer"),
    (_set(("runs", 0, "repeat"), True), "runs[0].repeat: expected an integer, not true or false"),
    (_set(("runs", 1, "phases", 0, "ops", "set", "summary", "p99_us"), "fast"),
     "runs[1].phases[0].ops.set.summary.p99_us: expected a number, not a string"),
    (_set(("runs", 1, "phases", 0, "ops", "get", "summary", "p50_us"), 1e300),
     "runs[1].phases[0].ops.get.summary.p50_us: too large"),
    (_set(("runs", 1, "phases", 0, "ops", "get", "errors"), {"timeout": "3"}),
     "runs[1].phases[0].ops.get.errors.timeout: expected an integer, not a string"),
    (_set(("runs", 1, "phases", 0, "ops", "get", "histograms", "hit"), "HISTFAAAAB"),
     "runs[1].phases[0].ops.get.histograms.hit: not a cachemark histogram"),
    (_set(("runs", 1, "phases", 0, "server", "samples", 0, "t"), []),
     "runs[1].phases[0].server.samples[0].t: expected a number, not a list"),
    (_set(("runs", 1, "phases", 0, "timeseries", 0, "ops"), 1.5),
     "runs[1].phases[0].timeseries[0].ops: expected an integer, not a number"),
    (_set(("runs", 1, "phases", 0, "ops", "exists+get"), {"count": None}),
     "runs[1].phases[0].ops['exists+get'].count: expected an integer, not null"),
    (_set(("runs",), {}), "runs: expected a list, not an object"),
    (_set(("environment", "calibration"), 5), "environment.calibration: expected an object, not an integer"),
    (_set(("environment", "proxy_overhead"), {"added_p50": "38"}),
     "environment.proxy_overhead.added_p50: expected a number, not a string"),
    (_set(("experiment", "name"), ["x"]), "experiment.name: expected a string, not a list"),
    (_set(("runs", 0, "label"), "\ud800"), "runs[0].label: text holds an invalid character (lone surrogate \\ud800"),
    (_set(("extra",), json.loads("[" * 70 + "]" * 70)), "extra" + "[0]" * 63 + ": nested deeper than 64 levels"),
    (_set(("schema",), "cachemark.results/2"), "schema cachemark.results/2 is not one this cachemark reads"),
    (_set(("schema",), KeyError), "not a cachemark results file (no cachemark.results/ schema)"),
])
def test_a_bad_field_is_one_line_naming_its_path(tmp_path, mutate, message):
    document = _seed()
    mutate(document)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(document))
    with pytest.raises(UserError) as caught:
        load(path)
    text = str(caught.value)
    assert len(text.splitlines()) == 1 and text.startswith(f"{path}: "), text
    assert message in text, text


@pytest.mark.parametrize(("data", "message"), [
    (b'{"schema": "cachemark.results/1", "runs": "\xff"}', "not UTF-8 text (byte 0xff at offset 43)"),
    (b"[" * 100_000, "not a results file (JSON nested too deeply to read)"),
    (b'{"schema": "cachemark.results/1"', "invalid JSON at line 1, column 33"),
    (b"", "invalid JSON at line 1, column 1"),
    (b"[]", "expected a JSON object at the top level"),
    (b'{"schema": "cachemark.results/1", "n": ' + b"9" * 5000 + b"}", "a number too long to read"),
])
def test_unreadable_files_are_one_line(tmp_path, data, message):
    path = tmp_path / "r.json"
    path.write_bytes(data)
    with pytest.raises(UserError, match="^" + str(path).replace(".", r"\.") + ": ") as caught:
        load(path)
    assert message in str(caught.value) and len(str(caught.value).splitlines()) == 1


@pytest.mark.parametrize(("path", "message"), [
    ("no-such.json", "no such results file"), (".", "is a directory"), ("a\x00b.json", "holds a NUL byte"),
    ("x" * 5000 + ".json", "File name too long"),
])
def test_bad_paths_are_one_line(tmp_path, monkeypatch, path, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=message) as caught:
        load(path)
    assert len(str(caught.value).splitlines()) == 1 and len(str(caught.value)) < 300


def test_nan_that_python_writes_reads_as_no_figure(tmp_path):
    document = _seed()
    document["runs"][1]["phases"][0]["server"]["cpu_us_per_op"] = float("nan")
    document["runs"][1]["phases"][0]["server"]["net_mbps_p90"] = float("inf")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(document))  # Python writes NaN and Infinity, which JSON lacks
    server = load(path)["runs"][1]["phases"][0]["server"]
    assert server["cpu_us_per_op"] is None and server["net_mbps_p90"] is None


def test_a_bom_is_tolerated(tmp_path):
    path = tmp_path / "r.json"
    path.write_bytes(b"\xef\xbb\xbf" + (DATA / "results-closed-server.json").read_bytes())
    assert load(path)["runs"]


def test_writing_to_a_bad_path_is_one_line_and_leaves_nothing(tmp_path):
    with pytest.raises(UserError, match="not a valid file name"):
        write_atomic(tmp_path / "a\x00b.json", _seed())
    with pytest.raises(UserError, match="not a valid file name"):
        write_text(tmp_path / "a\x00b.html", "x")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def full_disk(tmp_path: Path):
    """A 64 KiB tmpfs, mounted for this test (root only)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a 64 KiB tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_one_line_and_leaves_no_temp_file(full_disk):
    earlier = write_atomic(full_disk / "results.json", _seed())  # ~13 KB: fits
    before = earlier.read_bytes()
    big = _seed()
    big["runs"] = big["runs"] * 12  # ~150 KB: does not
    with pytest.raises(UserError) as caught:
        write_atomic(full_disk / "results.json", big)
    assert str(caught.value) == f"cannot write results to {full_disk / 'results.json'}: No space left on device"
    with pytest.raises(UserError, match="No space left on device"):
        write_text(full_disk / "report.html", "x" * 200_000)
    assert sorted(p.name for p in full_disk.iterdir()) == ["results.json"]  # no .tmp left behind
    assert earlier.read_bytes() == before  # the earlier result is intact


_PEAK = """
import resource, sys
from cachemark.results import load
from cachemark.errors import UserError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load(sys.argv[1])
    print("loaded")
except UserError as exc:
    print(exc)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def _load_peak(path: Path) -> tuple[str, int]:
    """What loading ``path`` said, and how much its peak memory grew (bytes), in a process of its own."""
    done = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    said, grew = done.stdout.strip().rsplit("\n", 1)
    return said, int(grew)


def test_a_large_results_file_loads_in_memory_proportional_to_it(tmp_path) -> None:
    sample = json.loads((DATA / "results-closed-server.json").read_text())
    big = dict(sample, runs=sample["runs"] * 1600)  # ~20 MB
    path = tmp_path / "big.json"
    path.write_text(json.dumps(big, indent=1))
    said, grew = _load_peak(path)
    # 21.5 MB for a 23.5-MB file against 235 MB (11x); a figure of what is allocated, which load cannot move
    assert said == "loaded" and grew < 10 * path.stat().st_size, (said, grew, path.stat().st_size)


def test_a_file_of_a_million_errors_is_refused_at_the_first(tmp_path) -> None:
    """pydantic collected every error: 600,000 empty runs (1.8 MB) took 1.2 GB and 10 s to refuse."""
    sample = json.loads((DATA / "results-closed-server.json").read_text())
    path = tmp_path / "empty-runs.json"
    path.write_text(json.dumps(dict(sample, runs=[{}] * 600_000)))
    said, grew = _load_peak(path)
    assert said.endswith("empty-runs.json: runs[0].label: missing"), said
    # the parsed JSON's 600,000 dicts: ~50 MB at most, under the peak the imports left (0 grew here), against
    # 144 MB; it was 1.2 GB
    assert grew < 60 * path.stat().st_size


def test_a_results_file_past_the_largest_cachemark_writes_is_refused_unread(tmp_path) -> None:
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.truncate(200_000_000)  # sparse: nothing to read, and nothing is
    said, grew = _load_peak(path)
    assert said == f"{path}: larger than 100,000,000 bytes: too large for a results file"
    assert grew < 20_000_000  # 0 here: nothing is read (reading it would be 200 MB)


def test_a_document_cachemark_builds_wrong_is_a_crash_on_write_and_still_kept(tmp_path) -> None:
    """Validated on write: a producer's slip is a bug of ours (exit 70) where it is made, and the
    measurement is on disk all the same."""
    from cachemark.errors import Crash

    document = _seed()
    document["runs"][0]["phases"][0]["ops"]["get"]["count"] = "5"
    with pytest.raises(Crash, match=r"schema refuses: .*ops\.get\.count: expected an integer"):
        write_atomic(tmp_path / "r.json", document)
    assert json.loads((tmp_path / "r.json").read_text()) == document


def test_the_probe_finding_and_a_sweeps_saturation_are_part_of_the_schema(tmp_path) -> None:
    document = _seed()
    document["runs"][0]["dropped_writes"] = "kept 0 of 3 writes read back"
    document["saturation"] = [{"label": "redis", "param": "workers", "saturation": 4,
                               "points": [{"value": 2, "ops_per_s": 1000.0, "p99_us": 90.0}]}]
    assert load(write_atomic(tmp_path / "ok.json", document))["saturation"][0]["saturation"] == 4
    for field, bad, message in (("dropped_writes", 3, "runs[0].dropped_writes: expected a string"),
                                ("saturation", [{"label": "x", "param": "workers", "points": [{"ops_per_s": "fast",
                                                                                            "p99_us": 1.0}]}],
                                 "saturation[0].points[0].ops_per_s: expected a number")):
        broken = _seed()
        (broken["runs"][0] if field == "dropped_writes" else broken)[field] = bad
        path = tmp_path / f"{field}.json"
        path.write_text(json.dumps(broken))
        with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")):
            load(path)


# --- the typed document the reports read -----------------------------------------------------------

def test_load_keeps_the_validated_model_and_reports_take_either_form(report_doc, tmp_path) -> None:
    """``load`` validates once and keeps the model; ``as_model`` hands it back without validating again,
    and validates a dict built in memory (no ``schema``: taken as the current one)."""
    from unittest import mock

    from cachemark.results import ResultsDocument, as_model, as_run, read

    path = write_atomic(tmp_path / "r.json", report_doc)
    with mock.patch.object(ResultsDocument, "model_validate", wraps=ResultsDocument.model_validate) as validated:
        loaded = load(path)
        assert as_model(loaded) is loaded.model and as_model(loaded.model) is loaded.model
    assert validated.call_count == 1
    assert loaded == json.loads(path.read_text())  # still the file's dict for every caller that indexes it
    typed = read(path)
    run = typed.runs[0]
    assert run.name == "memory #1" and run.measured and run.last_phase is run.phases[-1]
    assert run.last_phase.ops["get"].summary.p99_us == report_doc["runs"][0]["phases"][-1]["ops"]["get"]["summary"][
        "p99_us"]
    in_memory = {k: v for k, v in report_doc.items() if k != "schema"}
    assert as_model(in_memory).runs[0].label == "memory"
    assert as_run(report_doc["runs"][0]).name == "memory #1"
    loaded["runs"] = []  # a changed document is validated afresh
    assert as_model(loaded).runs == []


def test_a_document_being_built_reads_as_its_file_will(tmp_path) -> None:
    """A session renders its document before reading it back: the builder's typed document is the one its
    file holds (a NaN is null there, a tuple a list), validated once on write and kept for the reports.
    A dict handed to as_model is validated as it is: a NaN in it is refused in one line."""
    from unittest import mock

    from cachemark.results import ResultsBuilder, ResultsDocument, as_model

    run = _seed()["runs"][0]
    phase = run["phases"][0]
    phase["client_cpu_s"], phase["error_samples"] = float("nan"), ("timeout",)
    results = ResultsBuilder({"name": "built"}, {"python": "3.11"})
    results.add_run(run, None, None)
    typed = results.model.runs[0].phases[0]  # before any write: read back as the file will hold it
    assert typed.client_cpu_s is None and typed.error_samples == ["timeout"]
    results.write(tmp_path / "r.json")
    with mock.patch.object(ResultsDocument, "model_validate", wraps=ResultsDocument.model_validate) as validated:
        saved = results.saved()
        assert as_model(saved) is results.model and saved == results.document
    assert validated.call_count == 0
    with pytest.raises(UserError, match=r"runs\[0\]\.phases\[0\]\.client_cpu_s: expected a finite number"):
        as_model({"runs": [run]})
    with pytest.raises(UserError, match=r"runs\[0\]\.label: expected a string"):
        as_model({"runs": [{"label": 1, "status": "ok"}]})


def test_figures_keep_the_type_the_file_gave_and_a_missing_summary_is_recomputed(report_doc) -> None:
    """4 stays 4 (not 4.0): the reports print a figure as the JSON held it. A summary the file lacks is
    recomputed from the histograms, once, and equals the saved one."""
    from cachemark.results import as_model

    document = json.loads(json.dumps(report_doc))
    phase = document["runs"][0]["phases"][0]
    phase["wall_s"] = 4
    saved = phase["ops"]["get"].pop("summary")
    typed = as_model(document).runs[0].phases[0]
    assert typed.wall_s == 4 and isinstance(typed.wall_s, int)
    get = typed.ops["get"]
    assert get.summary is None
    recomputed = typed.summary_of(get)
    assert recomputed is typed.summary_of(get)
    phase["wall_s"] = report_doc["runs"][0]["phases"][0]["wall_s"]
    again = as_model(document).runs[0].phases[0]
    assert again.summary_of(again.ops["get"]).p99_us == pytest.approx(saved["p99_us"])
    assert again.summary_of(again.ops["get"]).ops_per_s == pytest.approx(saved["ops_per_s"])


def test_a_dask_runs_record_written_as_cluster_loads_as_dask(tmp_path) -> None:
    """A distributed run's record (run/distributed.py) was written as the run's ``cluster``, easily read
    as Redis Cluster's ``phase.cluster``: the model calls it ``dask`` and moves an old file's there; the
    file itself is left as it was. A file with the new name reads the same."""
    from cachemark.report.agents import agent_blocks

    old = DATA / "dask-cluster-results.json"
    loaded = load(old)
    run = loaded.model.runs[0]
    assert run.dask is not None and [a.agent for a in run.dask.agents] == [0, 1, 2]
    assert run.dask.agents[1].clock_skew_flagged and run.dask.hosts == ["ci-host (127.0.0.1)"]
    assert run.phases[0].cluster is None  # not a Redis Cluster run
    assert "cluster" in loaded["runs"][0] and "dask" not in loaded["runs"][0]  # the dict is the file's
    assert loaded.model.runs[1].dask is None
    renamed = json.loads(old.read_text())
    renamed["runs"][0]["dask"] = renamed["runs"][0].pop("cluster")
    (tmp_path / "new.json").write_text(json.dumps(renamed))
    blocks = agent_blocks(as_model(loaded))
    assert agent_blocks(as_model(load(tmp_path / "new.json"))) == blocks
    (block,) = blocks
    assert block.rows[1][-1] == "-1.60 !" and block.rows[-1][:3] == ["all", "1 host(s)", "2"]
    assert block.notes[0].startswith("Measuring agent 2 (50 ops/s, open loop, apart from the load): get p50")


def test_every_field_a_report_reads_is_declared() -> None:
    """The fields reports once read "as the file gave it" are typed on the models (issue 41): a value
    given reads as given, one left out reads as its default, and ``wall_s`` and the experiment's ``name``
    tell "absent" apart from their defaults. Every report reads plain attributes."""
    document = json.loads((DATA / "results-network-phases.json").read_text())
    document["experiment"].update(headline="baseline", baseline="redis@same-zone", full_scale="--ops 9",
                                  needs={"app_servers": 2}, reference={"name": "reference 004",
                                                                       "clients": {"redis": "pylibmc"}})
    phase = document["runs"][1]["phases"][0]
    phase["engine"] = {"protocol": "resp2", "connections": 4}
    phase["server"]["low_samples"] = True
    del document["runs"][0]["phases"][0]["wall_s"]
    typed = as_model(document)
    experiment = typed.experiment
    assert (experiment.headline, experiment.baseline, experiment.full_scale) == ("baseline", "redis@same-zone",
                                                                                 "--ops 9")
    assert experiment.needs == {"app_servers": 2} and experiment.repeat == 1 and experiment.sweep == {}
    assert experiment.reference is not None and experiment.reference.clients == {"redis": "pylibmc"}
    assert experiment.network == "same-host,same-zone,cross-zone" and experiment.given_name == experiment.name
    first, second = typed.runs[0], typed.runs[1]
    assert first.network is not None and not first.network.proxied and first.network.rtt_us == 0.0
    assert second.network is not None and second.network.proxied and second.network.rtt_us == 300
    assert second.phases[0].engine == {"protocol": "resp2", "connections": 4}
    assert second.phases[0].server is not None and second.phases[0].server.low_samples
    assert second.phases[0].server.cpu_pct_mean == document["runs"][1]["phases"][0]["server"]["cpu_pct_mean"]
    assert first.phases[0].wall_s == 0.0 and first.phases[0].measured_wall_s is None
    assert second.phases[0].measured_wall_s == second.phases[0].wall_s > 0
    bare = as_model({"experiment": {}, "runs": [{"label": "x", "status": "ok", "network": {"profile": "p"},
                                                  "server": {"kind": "redis"}, "phases": [{"server": {}}]}]})
    assert bare.experiment.name == "cachemark" and bare.experiment.given_name is None
    assert bare.experiment.headline is None and bare.experiment.reference is None and bare.experiment.repeat is None
    run = bare.runs[0]
    assert run.network is not None and (run.network.proxied, run.network.rtt_us) == (False, None)
    assert run.server is not None and run.server.version is None and run.phases[0].engine is None
    assert run.phases[0].server is not None and (run.phases[0].server.low_samples,
                                                  run.phases[0].server.cpu_pct_mean) == (False, None)
    assert not hasattr(run, "stated")
    with pytest.raises(UserError, match=r"experiment\.repeat: expected an integer, not a string"):
        as_model({"experiment": {"repeat": "3"}, "runs": []})


def test_a_runs_cluster_object_loads_as_dask_an_empty_one_as_none() -> None:
    """A distributed run's record written as the run's ``cluster`` loads as ``dask`` whether or not it
    lists agents; ``{}`` says nothing and is no Dask run."""
    runs = [{"label": "a", "status": "ok", "cluster": {"address": "tcp://127.0.0.1:8786"}},
            {"label": "b", "status": "ok", "cluster": {}}]
    first, second = as_model({"runs": runs}).runs
    assert first.dask is not None and first.dask.address == "tcp://127.0.0.1:8786"
    assert second.dask is None


def test_a_redis_cluster_phase_keeps_its_cluster_figures() -> None:
    from cachemark.results import as_model

    document = json.loads((DATA / "results-closed-server.json").read_text())
    document["runs"][0]["phases"][0]["cluster"] = {"primaries": 3, "moved": 2, "ask": 0}
    run = as_model(document).runs[0]
    assert run.dask is None and run.phases[0].cluster.moved == 2


# Every module outside results/ reads the typed document (results.as_model, as_run, a PhaseRecord), never a
# results dict. A results key read as a dict key where it is not the results document's: the experiment's
# workload (an op budget "ops", its "phases"), a command's flags, the engine's own answer, a worker's
# per-second entry, or a report's own rows. Each exact line, with why.
NOT_THE_RESULTS = {
    ("cli/sources.py", 'if flags.get("ops") is not None and flags.get("duration") is None:'),  # the --ops flag
    ("cli/sources.py", 'if flags.get("ops") is not None:'),
    ("cli/sources.py", "raise SpecError(f\"--ops {flags['ops']}: the phases {', '.join(fixed)} of {where} set their "
                       "own op \""),
    ("measure/summary.py", 'counts["ops"] += entry["ops"]'),  # a worker's per-second entry, merged by second
    ("report/compare.py", 'out["phases"] = [p.get("name", str(i)) for i, p in enumerate(phases)]'),  # its fields
    ("report/compare.py", 'same_phases = base["phases"] == new["phases"]'),  # ... compared
    ("report/thresholds.py", '*(["runs"] if repeats else [])]'),  # a column heading, not a key
    ("report/verdict.py", 'elif wl.get("ops"):'),  # the workload's op budget
    ("report/verdict.py", "parts.append(f\"{_num(wl['ops'])} ops per run\")"),
    # a phase's op budget over the workload's (spec.phase_over_workload: a run's phases, and the saved ones)
    ("spec.py", 'if phase.get("duration") and phase.get("ops") is None:'),
    ("spec.py", 'merged["ops"] = None'),
    ("spec.py", 'if phase.get("ops") is not None and not phase.get("duration"):'),
    # the engine's answer, read into op records
    ("run/engine_runner.py", 'renamed = {ours.get(name, name): op for name, op in result["ops"].items()}'),
}
_AS_DICT = re.compile(r"""\[["'](phases|ops|runs)["']\]|\.get\(["'](phases|ops|runs)["']""")
PACKAGE = Path(__file__).parent.parent / "src" / "cachemark"


def _indexing(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if _AS_DICT.search(line)]


def test_modules_read_the_model_not_results_dicts() -> None:
    modules = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))]
    found = {(name, line) for name in modules if not name.startswith("results/") for line in _indexing(PACKAGE / name)}
    assert found <= NOT_THE_RESULTS, sorted(found - NOT_THE_RESULTS)
    assert found >= NOT_THE_RESULTS, f"gone, delete from NOT_THE_RESULTS: {sorted(NOT_THE_RESULTS - found)}"


# --- producers build the document through one builder (the producing half) --------------------------

def test_the_summary_measure_computes_is_the_one_the_schema_reads() -> None:
    """measure/ computes an op's summary and results/ reads it back as the same type (OpSummary, defined
    once in measure/figures.py). Merged ops carry nothing private into the file (no ``_merged``): counters,
    encoded histograms and the summaries, the uncorrected one only in open loop."""
    from dataclasses import replace

    from cachemark.measure.figures import OpSummary as Computed
    from cachemark.measure.histogram import Histogram
    from cachemark.measure.summary import MergedOp, OpRecord, merge_ops, summarize
    from cachemark.results import OpSummary
    from cachemark.results.schema import OpResult

    assert OpSummary is Computed and OpResult.model_fields["summary"].annotation == OpSummary | None
    closed = OpRecord(count=2, hits=1, misses=1, errors={"timeout": 1}, bytes_out=3, bytes_in=4,
                      histograms={"hit": Histogram.of([1000]).encode(), "miss": Histogram.of([3000]).encode()})
    opened = replace(closed, histograms_uncorrected={"hit": Histogram.of([500]).encode()})
    merged = merge_ops([{"get": closed}, {"get": opened}], wall_s=2.0)["get"]
    assert list(merged.to_json()) == ["count", "hits", "misses", "errors", "bytes_out", "bytes_in", "histograms",
                                      "histograms_uncorrected", "summary", "summary_uncorrected"]
    assert merged.summary == summarize(MergedOp.of(merged), 2.0)
    assert merged.summary.ops_per_s == 2.0 and merged.summary.hit_ratio == 0.5
    assert merged.summary.error_count == 2 and merged.errors == {"timeout": 2}
    assert OpSummary.model_validate(merged.to_json()["summary"]) == merged.summary
    assert isinstance(merged.summary, OpSummary)
    assert merge_ops([{"get": closed}], wall_s=2.0)["get"].summary_uncorrected is None
    assert merge_ops([{"get": closed}])["get"].summary is None  # no wall time: nothing to summarise over


def test_the_builder_makes_the_document_an_experiment_writes(tmp_path) -> None:
    """Runs are added with their sweep point, repeat and display name (the keys after the outcome's own,
    in the file's order), the proxy's overhead goes in the environment, a sweep gets its saturation;
    every write is the document as built so far, and it loads."""
    from cachemark.results import ResultsBuilder

    seed = _seed()
    outcome = {k: v for k, v in seed["runs"][0].items() if k not in ("sweep", "repeat", "display")}
    results = ResultsBuilder({"name": "built"}, {"python": "3.11"})
    assert not results.has_runs and results.document["runs"] == []
    results.set_proxy_overhead({"added_p50": 12.0})
    for workers in (1, 2, 4):
        run = results.add_run(outcome, {"workers": workers}, None)
        assert list(run)[-3:] == ["sweep", "repeat", "display"]
        assert run["display"] == f"{outcome['label']} [workers={workers}]"
    repeated = results.add_run(outcome, {}, 1)
    assert repeated["sweep"] is None and repeated["display"] == f"{outcome['label']} #2"
    assert "sweep" not in outcome  # the outcome handed in is not changed
    results.summarize_saturation()
    path = results.write(tmp_path / "r.json")
    document = load(path)
    assert document == json.loads(json.dumps(results.document))
    assert list(document) == ["schema", "created", "environment", "experiment", "runs", "saturation"]
    assert document["environment"] == {"python": "3.11", "proxy_overhead": {"added_p50": 12.0}}
    assert [p["value"] for p in document["saturation"][0]["points"]] == [1, 2, 4]


def _phase_record(**fields: Any) -> Any:
    from cachemark.measure.histogram import Histogram
    from cachemark.measure.summary import OpRecord
    from cachemark.results.phase_record import PhaseRecord

    get = OpRecord(count=3, hits=2, misses=1, errors={"timeout": 1}, bytes_out=30, bytes_in=40,
                   histograms={"hit": Histogram.of([1000, 2000]).encode(), "miss": Histogram.of([900]).encode()})
    base = {"name": "main", "mode": "closed", "rate": None, "workers": 2, "workers_reported": 2, "wall_s": 1.5,
            "client_cpu_s": 0.25, "error_samples": ["timeout: no reply"], "ops": {"get": get},
            "timeseries": [{"t": 0, "ops": 2, "errors": 0}, {"t": 1, "ops": 1, "errors": 1}]}
    return PhaseRecord(**{**base, **fields})


def test_a_phase_record_is_saved_in_one_order_and_fits_the_schema() -> None:
    """Every load path saves a phase's keys in one order (report -f json prints them so); a field a path
    lacks is left out, not written as null; what an agent ships is never saved. A phase an earlier
    version saved in its path's own order (the engine's began with cluster) reads the same."""
    from cachemark.results import Phase
    from cachemark.results.phase_record import SAVED_ORDER

    workers = _phase_record()
    assert list(workers.to_json()) == ["name", "mode", "rate", "workers", "workers_reported", "wall_s",
                                       "client_cpu_s", "interrupted", "stopped_on_errors", "missed", "error_samples",
                                       "ops", "timeseries", "server"]
    engine = _phase_record(workers_reported=None, cluster={"primaries": 3, "moved": 1, "ask": 0},
                           engine={"protocol": "resp", "threads": 1}, start_wall=5.0)
    saved = list(engine.to_json())
    assert saved == [k for k in SAVED_ORDER if k in saved] and saved[-3:] == ["engine", "server", "cluster"]
    for record in (workers, engine):
        Phase.model_validate(record.to_json())
        assert not set(record.to_json()) & {"start_wall", "end_wall", "start_lag_s"}
    as_engine_wrote = json.loads(json.dumps(engine.to_json()))
    as_engine_wrote = {"cluster": as_engine_wrote.pop("cluster"), **as_engine_wrote}
    assert Phase.model_validate(as_engine_wrote) == Phase.model_validate(engine.to_json())


def test_a_phase_record_is_changed_only_by_copy() -> None:
    """The on-error policy, the server monitor and an agent's gate each hand back a changed copy."""
    import dataclasses

    record = _phase_record()
    assert record.total_ops == 3 and record.error_kinds() == {"timeout": 1}
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.server = {}  # type: ignore[misc]
    stopped = record.stopped("timeout errors: …")
    assert stopped.stopped_on_errors == "timeout errors: …" and record.stopped_on_errors is None
    figures = {"source": "redis", "cpu_us_per_op": 3.5, "cluster": {"primaries": 3, "moved": 4, "ask": 0}}
    served = record.with_server(figures, [{"t": 1, "server_cpu_pct": 12.0, "net_in_mbps": None},
                                          {"t": 2, "server_cpu_pct": 9.0}])
    assert served.server == figures and served.cluster == figures["cluster"]  # redis-py followed them unseen
    assert served.timeseries == [{"t": 0, "ops": 2, "errors": 0}, {"t": 1, "ops": 1, "errors": 1,
                                                                   "server_cpu_pct": 12.0},
                                 {"t": 2, "server_cpu_pct": 9.0}]
    assert record.timeseries[1] == {"t": 1, "ops": 1, "errors": 1} and record.server is None
    assert record.with_server(None, []).to_json()["server"] is None


def test_an_agents_phase_record_reaches_its_coordinator_whole() -> None:
    """What an agent ships (its record, where it ran on its clock, how late it started) reads back the
    same on the coordinator, an engine op's missing counters (a set's hits) read as 0."""
    from cachemark.measure.summary import OpRecord
    from cachemark.results.phase_record import PhaseRecord

    record = _phase_record().on_agent_clock(100.0, 101.5).with_start_lag(0.002)
    shipped = json.loads(json.dumps(record.to_wire()))
    assert shipped["start_wall"] == 100.0 and shipped["start_lag_s"] == 0.002
    assert PhaseRecord.from_wire(shipped) == record
    engine_set = {"bytes_in": 0, "bytes_out": 10, "count": 1, "errors": {}, "histograms": {}}
    read = PhaseRecord.from_wire({**shipped, "ops": {"set": engine_set}, "newer_field": 1})
    assert read.ops["set"] == OpRecord(count=1, hits=0, misses=0, bytes_out=10)
    assert list(read.ops["set"].to_json()) == ["count", "hits", "misses", "errors", "bytes_out", "bytes_in",
                                              "histograms"]


def test_a_phase_records_ops_are_saved_in_one_order_to_the_file_and_back() -> None:
    """Python workers, drivers, a distributed run and the engine save an op in one order (OpRecord's
    fields; the engine's writes without hits and misses). An agent's ops read back the same, a write's
    uncounted hits and misses as 0; an op an earlier version saved in the engine's own order reads the same."""
    from cachemark.measure.histogram import Histogram
    from cachemark.measure.summary import OpRecord, merge_ops
    from cachemark.results import Phase
    from cachemark.results.phase_record import PhaseRecord

    hit, error = {"hit": Histogram.of([1000]).encode()}, {"error": Histogram.of([9000]).encode()}
    merged = merge_ops([{"get": OpRecord(count=1, hits=1, histograms=hit, histograms_uncorrected=hit)},
                        {"set": OpRecord(count=1, errors={"timeout": 1}, histograms=error)}], wall_s=1.0)
    engine_get = {"bytes_in": 5, "bytes_out": 3, "count": 1, "errors": {}, "histograms": hit,
                  "histograms_uncorrected": hit, "hits": 1, "misses": 0}
    engine_set = {"bytes_in": 0, "bytes_out": 9, "count": 1, "errors": {"timeout": 1}, "histograms": error}
    engine = {"get": OpRecord.from_json(engine_get).summarized(1.0),
              "set": OpRecord.from_json(engine_set).summarized(1.0)}
    counters = ["count", "hits", "misses", "errors", "bytes_out", "bytes_in", "histograms"]
    order = {"get": [*counters, "histograms_uncorrected", "summary", "summary_uncorrected"],
             "set": [*counters, "summary"]}
    for ops, expected in ((merged, order), (engine, {**order, "set": [c for c in order["set"] if "hits" not in c
                                                                        and "misses" not in c]})):
        record = _phase_record(ops=ops)
        saved = record.to_json()
        Phase.model_validate(saved)
        assert {name: list(op) for name, op in saved["ops"].items()} == expected
        read = PhaseRecord.from_wire(json.loads(json.dumps(record.to_wire())))
        assert read.ops == {name: op.with_every_counter() for name, op in ops.items()}
        assert list(read.ops["get"].to_json().items()) == list(saved["ops"]["get"].items())
    written_so = {**engine_get, "summary": saved["ops"]["get"]["summary"],
                  "summary_uncorrected": saved["ops"]["get"]["summary_uncorrected"]}
    assert OpRecord.from_json(written_so).to_json() == saved["ops"]["get"]
    assert list(OpRecord.from_json(written_so).to_json()) == order["get"]


# The same names holding something that is not a results document, with why.
NOT_A_RESULTS_DOCUMENT = {
    ("cli/size_command.py", "document"),  # size's own report, not a results file
}
_RESULTS_NAMES = {"document", "run", "phase", "record"}
_MUTATORS = {"append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear", "remove"}


def _assigned_through(tree: Any) -> set[str]:
    """The results names a module assigns into: ``document[k] = …``, ``run[k] += …``, ``del phase[k]``,
    ``record[k].append(…)``, ``phase.setdefault(…)``, ``self.document[k] = …`` (the dict under any holder)."""
    import ast

    def root(node: Any) -> str | None:
        while isinstance(node, ast.Subscript):
            node = node.value
        # ``self.document[k]``, ``x.run[k]``: the name the dict is held under, whatever holds it
        return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None

    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.Delete):
            targets = [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            changed = [t for t in targets if isinstance(t, ast.Subscript)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            changed = [node.target] if isinstance(node.target, ast.Subscript) else []
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
            changed = [node.func.value]
        else:
            continue
        found |= {name for name in map(root, changed) if name in _RESULTS_NAMES}
    return found


def test_only_the_builder_assigns_into_a_results_document() -> None:
    import ast

    found = {(str(path.relative_to(PACKAGE)), name) for path in sorted(PACKAGE.rglob("*.py"))
             for name in _assigned_through(ast.parse(path.read_text()))}
    assert _assigned_through(ast.parse('document["runs"].append(run)\nrun["display"] = x')) == {"document", "run"}
    assert _assigned_through(ast.parse('self.document["runs"] = []\nx.phase.update(y)')) == {"document", "phase"}
    unknown = sorted(found - NOT_A_RESULTS_DOCUMENT)
    assert not unknown, f"change a document through results/builder.py, a phase through phase_record.py: {unknown}"
    assert found >= NOT_A_RESULTS_DOCUMENT, f"gone, delete: {sorted(NOT_A_RESULTS_DOCUMENT - found)}"


# A run's outcome is changed in one module: the run sequence records what a load path returns.
OUTCOME_CHANGERS = {"run/sequence.py"}


def _outcome_changes(tree: Any) -> list[str]:
    """Where a module changes a run outcome, through any holder: ``outcome.status = …``,
    ``run.outcome.backend.info["client"] = …``, ``self.outcome.phases.append(…)``, ``del x.outcome.y``,
    ``setattr(outcome, …)``: any assignment or mutating call whose target reaches into an object
    named ``outcome`` (or ``…_outcome``) by a name or an attribute."""
    import ast

    def reaches_outcome(node: Any) -> bool:
        inside = False  # the outcome itself may be rebound or stored; what is inside it may not change
        while isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
            inside = True
            if isinstance(node, ast.Attribute) and node.attr.endswith("outcome"):
                return True
        return inside and isinstance(node, ast.Name) and node.id.endswith("outcome")

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.Delete):
            targets = [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
            targets = [ast.Attribute(value=node.func.value, attr=node.func.attr)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
        else:
            continue
        found += [f"line {node.lineno}: {ast.unparse(t)}" for t in targets if reaches_outcome(t)]
    return found


def test_only_the_run_sequence_changes_a_run_outcome() -> None:
    import ast

    samples = ('outcome.status = "failed"', 'run.outcome.backend.info["client"] = x', 'self.outcome.phases.append(r)',
               'outcome.backend.update(x)', 'a.outcome.reason, b = 1, 2', 'del run.outcome.dask', 'x.outcome.n += 1',
               'setattr(outcome, "dask", d)', 'info = outcome.backend.setdefault("info", {})')
    for sample in samples:
        assert _outcome_changes(ast.parse(sample)), sample
    for sample in ('outcome = RunOutcome(l, t)', 'self.outcome = outcome', 'x = outcome.status', 'outcomes.append(o)'):
        assert not _outcome_changes(ast.parse(sample)), sample
    found = {str(path.relative_to(PACKAGE)): changes for path in sorted(PACKAGE.rglob("*.py"))
             if (changes := _outcome_changes(ast.parse(path.read_text())))}
    unknown = {path: changes for path, changes in found.items() if path not in OUTCOME_CHANGERS}
    assert not unknown, f"return a LoadResult for run/sequence.py to record, not change the outcome: {unknown}"
    assert set(found) >= OUTCOME_CHANGERS, f"gone, delete: {sorted(OUTCOME_CHANGERS - set(found))}"
