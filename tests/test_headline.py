"""Each preset prints its reference's own figure: run small, through the real command line.

Every test holds the printed figure to arithmetic done here, from the saved results
(histograms decoded afresh), not to the module's own helpers.
"""

import copy
import json
import re
import statistics

import pytest

from cachemark.measure.histogram import Histogram
from cachemark.report.headline import headline_blocks, latency_total_s
from cachemark.results import as_model

RATE = re.compile(r"^([0-9.,]+)(k|M)?\*?$")


def rate_value(text: str) -> float:
    number, unit = RATE.match(text).groups()
    return float(number.replace(",", "")) * {None: 1, "k": 1e3, "M": 1e6}[unit]


def seconds_value(text: str) -> float:
    number, unit = re.match(r"^([0-9.]+)(s|ms|µs)$", text).groups()
    return float(number) * {"s": 1.0, "ms": 1e-3, "µs": 1e-6}[unit]


def sigma_latency_s(op: dict) -> float:
    """Σ latency of an op's successful outcomes, straight from its saved histograms."""
    total = Histogram()
    for outcome in ("hit", "miss", "ok"):
        if outcome in op.get("histograms", {}):
            total.add(Histogram.decode(op["histograms"][outcome]))
    return total.mean * total.total / 1e9


def run_preset(cachemark, tmp_path, *args: str) -> tuple[object, dict]:
    result = cachemark("run", *args, "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    return result, json.loads((tmp_path / "out.json").read_text())


def table_line(stdout: str, *cells: str) -> list[str]:
    """The terminal line holding every one of ``cells``, split on runs of 2+ spaces."""
    for line in stdout.splitlines():
        if all(cell in line for cell in cells):
            return re.split(r"\s{2,}", line.strip())
    raise AssertionError(f"no line with {cells} in:\n{stdout}")


def test_timeit_seconds_per_1000_per_repeat_and_dropped_writes_marked(tmp_path, cachemark):
    result, document = run_preset(cachemark, tmp_path, "django-s3-vs-memcached", "--ops", "20")
    assert result.returncode == 1, result.stderr  # the dummy cache drops writes: exit 1 by design
    assert "timeit: seconds per 1000 ops" in result.stdout
    s3 = [r for r in document["runs"] if r["backend"]["scheme"] == "s3"]
    assert s3 and all(r["backend"]["info"]["key_naming"] == "sha1" and r["backend"]["info"]["encoding"] == "pickle"
                      for r in s3)  # django-s3-cache's layout reached the backend
    (block,) = headline_blocks(as_model(document))
    assert block.columns[:5] == ["backend", "phase", "repeat 1", "repeat 2", "repeat 3"]
    assert len(block.rows) == 4 * 2  # 4 caches × (set, get)
    for label in document["experiment"]["labels"]:
        runs = sorted((r for r in document["runs"] if r["label"] == label), key=lambda r: r["repeat"])
        assert [r["repeat"] for r in runs] == [0, 1, 2]
        for phase in ("set", "get"):
            per_1000 = []
            for run in runs:
                (p,) = [p for p in run["phases"] if p["name"] == phase]
                (op,) = p["ops"].values()
                assert op["count"] == 20  # --ops scales timeit's loop
                per_1000.append(p["wall_s"] / op["count"] * 1000)
            (row,) = [r for r in block.rows if r[0].startswith(label) and r[1] == phase]
            figures = [float(c.rstrip("*")) for c in row[2:7]]
            expected = [*per_1000, min(per_1000), statistics.median(per_1000)]
            assert figures == pytest.approx(expected, rel=1e-3)
            dropped = label.startswith("misconfigured")
            assert ("[writes dropped]" in row[0]) == dropped
            assert (row[-1] == "writes dropped") == dropped
            line = table_line(result.stdout, row[0], f" {phase} ")
            assert line[2:7] == row[2:7]  # the terminal prints these very figures
    assert "writes were dropped: these timings are of a cache that stores nothing" in result.stdout
    # without the probe's finding, a get phase that found none of the keys just set is enough
    bare = copy.deepcopy(document)
    for run in bare["runs"]:
        run["dropped_writes"] = None
    rows = headline_blocks(as_model(bare))[0].rows
    assert [r[0].endswith("[writes dropped]") for r in rows] == [r[0].endswith("[writes dropped]")
                                                                  for r in block.rows]


def test_tag_clean_rates_as_the_harness_and_the_wall_clock_count_them(tmp_path, cachemark):
    result, document = run_preset(cachemark, tmp_path, "magento-clean-by-tag", "--ops", "2000", "--keys", "300")
    assert result.returncode == 0, result.stderr
    assert document["experiment"]["workload"]["duration"] is None  # ends by count, never by a time cap
    (block,) = headline_blocks(as_model(document))
    assert block.columns == ["backend", "read ops/s (harness)", "read ops/s (wall)", "write ops/s (harness)",
                             "write ops/s (wall)", "clean ops/s (harness)", "clean ops/s (wall)"]
    sequences = set()
    for run, row in zip(document["runs"], block.rows, strict=True):
        (phase,) = run["phases"]
        assert phase["workers"] == 4
        ops = phase["ops"]
        assert sum(op["count"] for op in ops.values()) == 2000
        sequences.add(tuple((name, ops[name]["count"]) for name in sorted(ops)))
        for i, name in enumerate(("get", "set", "clean")):
            op = ops[name]
            harness = op["count"] / sigma_latency_s(op) * phase["workers"]
            wall = op["count"] / phase["wall_s"]
            assert rate_value(row[1 + 2 * i]) == pytest.approx(harness, rel=0.01)
            assert rate_value(row[2 + 2 * i]) == pytest.approx(wall, rel=0.01)
            assert row[1 + 2 * i].endswith("*") == (op["count"] < 30)  # a rate from a handful of ops is marked
        assert table_line(result.stdout, row[0], row[1])[1:] == row[1:]
    assert len(sequences) == 1  # every backend replayed the same op sequence
    assert "Every backend replayed the same op sequence" in result.stdout
    assert "count ÷ Σ latency × clients" in result.stdout


def test_op_streams_are_the_same_for_every_backend():
    from cachemark.spec import Workload
    from cachemark.workload.ops import OpStream

    workload = Workload(keys=10000, key_dist="uniform", mix={"get": 999, "set": 1, "clean": 1}, ops=200000,
                        workers=4)
    (phase,) = workload.effective_phases()
    assert phase.duration is None and phase.ops == 200000

    def stream(worker: int) -> list:
        return [list(b) for b in OpStream(workload, phase, worker, 4, 5000).batches()]

    assert stream(2) == stream(2)  # a second backend gets the very same ops, keys and sizes
    assert stream(1) != stream(2)  # and each client its own


def test_percentile_tables_with_totals_and_delete_misses(tmp_path, cachemark):
    result, document = run_preset(cachemark, tmp_path, "diskcache-django", "--ops", "2000", "--warmup-ops", "0",
                                  "--workers", "2")
    assert result.returncode == 0, result.stderr
    blocks = headline_blocks(as_model(document))
    assert [b.title for b in blocks] == [f"Timings for {label}" for label in document["experiment"]["labels"]]
    counts = set()
    for run, block in zip(document["runs"], blocks, strict=True):
        assert block.columns == ["Action", "Count", "Miss", "Median", "P90", "P99", "Max", "Total"]
        ops = run["phases"][0]["ops"]
        total = 0.0
        for row in block.rows[:-1]:
            op = ops[row[0]]
            assert row[1] == f"{op['count']:,}" and row[2] == f"{op['misses']:,}"
            sigma = sigma_latency_s(op)
            total += sigma
            assert seconds_value(row[7]) == pytest.approx(sigma, rel=2e-3, abs=2e-9)
            assert row[5].endswith("*") == (op["count"] < 30)  # a p99 of a handful of ops is marked
        assert ops["delete"]["hits"] + ops["delete"]["misses"] == ops["delete"]["count"]  # deletes count misses
        assert ops["set"]["misses"] == 0
        last = block.rows[-1]
        assert last[0] == "Total" and last[1] == f"{sum(op['count'] for op in ops.values()):,}"
        assert seconds_value(last[7]) == pytest.approx(total, rel=2e-3)
        counts.add(last[1])
        title = result.stdout.index(block.title)
        assert table_line(result.stdout[title:], "get", block.rows[0][1]) == block.rows[0]
    assert counts == {"2,000"}  # every backend ran the same op count
    locmem = document["runs"][0]["phases"][0]["ops"]
    assert locmem["get"]["misses"] > 0  # per-process caches with culling: the reference's high miss count


def test_delete_of_a_missing_key_is_a_miss():
    from cachemark.run.runner import run_target
    from cachemark.spec import Workload

    workload = Workload(keys=40, key_dist="uniform", mix="set=30,delete=70", ops=2000, duration=None, warmup=0,
                        workers=1, prefill=False)
    ops = run_target("memory://", workload).phases[0].ops
    delete = ops["delete"]
    assert delete.hits > 0 and delete.misses > 0  # more deletes than sets: many keys are already gone
    assert delete.hits + delete.misses == delete.count
    assert delete.hits <= ops["set"].count  # a delete can only find what a set put there
    assert Histogram.decode(delete.histograms["miss"]).total == delete.misses


def test_baseline_block_time_and_percent_in_terminal_markdown_and_html(tmp_path, cachemark):
    result, document = run_preset(cachemark, tmp_path, "rails-local-vs-remote", "--ops", "40",
                                  "--network", "same-host,same-zone")
    assert result.returncode == 0, result.stderr
    (block,) = headline_blocks(as_model(document))
    assert block.columns == ["Configuration", "added RTT", "iterations", "block (s)", "Comparison to Baseline",
                             "read block %"]
    # the proxy's own overhead, measured in the run, beside the percentages it is part of
    overhead = document["environment"]["proxy_overhead"]["added_p50"]
    assert f"network proxy: adds {max(overhead, 0):.0f} µs p50" in " ".join(block.notes)
    runs = document["runs"]
    assert [r["display"] for r in runs] == [row[0] for row in block.rows]
    # the block in one phase, its steps back to back in order, as the reference's process runs them: the
    # delete found the key the write wrote, and every one of the N iterations between them found it too
    for run in runs:
        (phase,) = run["phases"]
        ops = phase["ops"]
        assert (ops["set"]["count"], ops["exists+get"]["count"], ops["delete"]["count"]) == (1, 40, 1)  # --ops: N
        assert ops["exists+get"]["hits"] == 40 and ops["delete"]["hits"] == 1, run["display"]
    # the block is the reference's whole block (Benchmark.bm's real): the phase's wall; the N iterations
    # alone are that less the write's and the delete's own latency
    blocks = [r["phases"][0]["wall_s"] for r in runs]
    reads = [whole - sum(latency_total_s(r.phases[0].ops[op]) for op in ("set", "delete"))
             for whole, r in zip(blocks, as_model(document).runs, strict=True)]
    base, base_read = blocks[0], reads[0]  # redis on the same host
    assert block.rows[0][4] == block.rows[0][5] == "--"
    for run, whole, read, row in zip(runs[1:], blocks[1:], reads[1:], block.rows[1:], strict=True):
        assert float(row[3]) == pytest.approx(whole, abs=1e-6)
        assert float(row[4].rstrip("%")) == pytest.approx(whole / base * 100, abs=0.51)
        assert float(row[5].rstrip("%")) == pytest.approx(read / base_read * 100, abs=0.51)
        assert row[1] == ("300µs" if run["network"]["profile"] == "same-zone" else "0")
    assert table_line(result.stdout, block.rows[-1][0], block.rows[-1][3])[4] == block.rows[-1][4]
    # one baseline for every target, chosen by label@profile
    other = copy.deepcopy(document)
    other["experiment"]["baseline"] = "memcached@same-zone"
    rows = headline_blocks(as_model(other))[0].rows
    (chosen,) = [i for i, r in enumerate(rows) if r[4] == "--"]
    assert rows[chosen][0] == "memcached [same-zone]"
    assert float(rows[0][4].rstrip("%")) == pytest.approx(base / blocks[chosen] * 100, abs=0.51)
    assert "its full scale: `cachemark run rails-local-vs-remote --ops 100000 --network same-host,same-zone," \
        "cross-zone`" in " ".join(block.notes)  # the defaults are cut: the reference's own scale is one command
    # a 1-op block has no "% of baseline"
    single = copy.deepcopy(document)
    single["runs"][1]["phases"][0]["ops"]["exists+get"]["count"] = 1
    assert headline_blocks(as_model(single))[0].rows[1][4] == "-"
    # with repeats, one row per configuration: the medians of its repeats, and their range beside them
    repeated = copy.deepcopy(document)
    repeated["runs"] = []
    for run in document["runs"]:
        for repeat, scale in ((1, 1.0), (2, 3.0), (3, 2.0)):
            again = copy.deepcopy(run) | {"repeat": repeat}
            for phase in again["phases"]:
                phase["wall_s"] *= scale
            repeated["runs"].append(again)
    twice = headline_blocks(as_model(repeated))[0]
    assert twice.columns[-2:] == ["repeats", "block range (s)"]
    assert [row[0] for row in twice.rows] == [row[0] for row in block.rows]  # not one row per repeat
    for whole, row in zip(blocks, twice.rows, strict=True):
        assert float(row[3]) == pytest.approx(2 * whole, abs=2e-6) and row[6] == "3"  # the median: the ×2 repeat
        assert [float(x) for x in row[7].split("–")] == pytest.approx([whole, 3 * whole], abs=2e-6)
    assert [row[4] for row in twice.rows] == [row[4] for row in block.rows]  # medians against medians
    assert any("medians of its repeats" in note for note in twice.notes)

    markdown = cachemark("report", "out.json", "-f", "markdown", "-o", "-", cwd=tmp_path)
    assert markdown.returncode == 0, markdown.stderr
    header = "| Configuration | added RTT | iterations | block (s) | Comparison to Baseline | read block % |"
    assert header in markdown.stdout
    assert "| " + " | ".join(block.rows[1]) + " |" in markdown.stdout
    html = cachemark("report", "out.json", "-f", "html", "-o", "r.html", cwd=tmp_path)
    assert html.returncode == 0, html.stderr
    page = (tmp_path / "r.html").read_text()
    section = page[page.index('<section class="headline">'):]
    section = section[:section.index("</section>")]
    assert "<th class=\"r\">Comparison to Baseline</th>" in section
    assert f'<td class="r">{block.rows[1][4]}</td>' in section


def test_no_headline_without_the_field_and_bandwidth_is_the_thresholds_module(monkeypatch):
    from cachemark.report import thresholds
    from cachemark.report.blocks import Block

    assert headline_blocks(as_model({"experiment": {"name": "x"}, "runs": []})) == []
    document = {"experiment": {"headline": "bandwidth"}, "runs": []}
    sentinel = Block(title="bandwidth")
    monkeypatch.setattr(thresholds, "bandwidth_headline", lambda doc: [sentinel], raising=False)
    assert headline_blocks(as_model(document)) == [sentinel]
    monkeypatch.delattr(thresholds, "bandwidth_headline")
    assert headline_blocks(as_model(document)) == []  # before thresholds.py has it, nothing breaks


def test_each_reference_preset_names_its_scale():
    """A preset's headline says the one command for the reference's own scale, or that its defaults are it."""
    from cachemark.presets import load_preset, preset_names
    from cachemark.report.headline import scale_note

    for name in preset_names():
        preset = load_preset(name)
        if preset.get("headline") is None:
            continue  # not a reference's figure
        note = scale_note(as_model({"experiment": {"name": name, "full_scale": preset.get("full_scale")}}))
        assert note is not None and f"`cachemark run {name}" in note, name
    own_scale = scale_note(as_model({"experiment": {"name": "x", "full_scale": ""}}))
    assert own_scale.endswith("own scale (`cachemark run x`).")
    assert "`cachemark run x --ops 9`" in scale_note(as_model({"experiment": {"name": "x", "full_scale": "--ops 9"}}))
    assert scale_note(as_model({"experiment": {"name": "x"}})) is None
