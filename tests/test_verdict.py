"""The verdict: real runs for the ranking and where it appears, derived documents for each warning.

Ground truth: the factors are recomputed here from the p50s in the results file (and, with
repeats, the median and 95 % interval of the paired ratios by hand), and each warning is
shown to appear in a document where it applies and not in the same document without it.
"""

from __future__ import annotations

import copy
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cachemark.measure.histogram import Histogram
from cachemark.report.blocks import to_rich
from cachemark.report.figures import fmt_factor, fmt_latency, fmt_rate
from cachemark.report.headline import headline_blocks
from cachemark.report.verdict import TIE_WITHOUT_REPEATS, verdict_blocks
from cachemark.results import as_model, as_run, load
from conftest import run_cli  # noqa: E402

DATA = Path(__file__).parent / "data"
T95_DF2 = 4.303  # Student's t, 97.5 % quantile, 2 degrees of freedom (3 repeats)


def verdict(document: dict[str, Any]):
    blocks = verdict_blocks(as_model(document))
    assert len(blocks) == 1 and blocks[0].kind == "verdict"
    return blocks[0]


def warnings_of(document: dict[str, Any]) -> list[str]:
    return [n[2:] for n in verdict(document).notes if n.startswith("- ")]


def text_of(document: dict[str, Any]) -> str:
    block = verdict(document)
    return "\n".join([*block.lines, *(" | ".join(r) for r in block.rows), *block.notes])


def ranking(document: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    """(op cell, other label) → the row; the op and fastest cells are filled down."""
    out, op, fastest = {}, "", ""
    for row in verdict(document).rows:
        op, fastest = row[0] or op, row[1] or fastest
        out[(op, row[2])] = [op, fastest, *row[2:]]
    return out


def within_rounding(cell: str, expected: float) -> bool:
    """A factor as shown (``3.14×``, ``31.4×``, ``1,314×``) equals ``expected`` to its shown digits."""
    number = cell.split("×")[0].split("(")[-1].split("±")[0].strip().replace(",", "")
    digits = len(number.split(".")[1]) if "." in number else 0
    return abs(float(number) - expected) <= 0.5 * 10 ** -digits + 1e-9


def p50s(document: dict[str, Any], label: str, op: str) -> dict[Any, float]:
    return {r.get("repeat"): r["phases"][0]["ops"][op]["summary"]["p50_us"]
            for r in document["runs"] if r["label"] == label}


# --- real runs -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> tuple[Path, str]:
    where = tmp_path_factory.mktemp("verdict")
    result = run_cli("run", "-t", "memory://", "-t", "spawn:redis", "--duration", "1s", "--warmup", "0",
                     "--no-calibrate", "-o", "out.json", cwd=where)
    assert result.returncode == 0, result.stderr
    return where, result.stdout


def test_a_real_run_ends_in_the_verdict_in_every_output(real_run):
    where, stdout = real_run
    document = load(where / "out.json")
    block = verdict(document)
    # the terminal: after the table, with the ranking rows
    assert "What this means" in stdout and stdout.index("What this means") > stdout.index("p99.9")
    for row in block.rows:
        assert all(cell in stdout for cell in row if cell)
    markdown = run_cli("report", str(where / "out.json"), "-f", "markdown", "-o", "-", cwd=where)
    assert markdown.returncode == 0, markdown.stderr
    assert "### What this means" in markdown.stdout and block.lines[0] in markdown.stdout
    for row in block.rows:
        assert "| " + " | ".join(row) + " |" in markdown.stdout
    html = run_cli("report", str(where / "out.json"), "-f", "html", "-o", "-", cwd=where)
    assert html.returncode == 0, html.stderr
    assert '<section class="verdict card"><h2>What this means</h2>' in html.stdout
    assert html.stdout.index("verdict card") < html.stdout.index("<svg")  # the report's top card


def test_the_real_ranking_is_the_ratio_of_the_p50s(real_run):
    where, _ = real_run
    document = json.loads((where / "out.json").read_text())
    block = verdict(document)
    # the workload sentence: keys, distribution, sizes, mix, workers, clients and versions, network
    info = next(r for r in document["runs"] if r["label"] == "redis")["backend"]["info"]
    sentence = block.lines[0]
    for fact in ("10,000 keys (zipf:0.99)", "values 100-1000 B", "get 90 % · set 9 % · delete 1 %", "2 workers",
                 "closed loop", f"redis-py {info['client_version']}", f"redis {info['server_version']}",
                 "cachemark.memory", "no network emulated"):
        assert fact in sentence, (fact, sentence)
    rows = ranking(document)
    # per-process memory and shared redis are ranked apart: memory's group ends with redis, for scale
    assert set(rows) == {(f"{op} · local", "redis (shared)") for op in ("get", "set", "delete")}
    for op in ("get", "set", "delete"):
        memory, redis = p50s(document, "memory", op)[None], p50s(document, "redis", op)[None]
        row = rows[(f"{op} · local", "redis (shared)")]
        assert row[1].startswith("memory (")  # in-process memory is faster than a server round trip
        assert within_rounding(row[3], redis / memory), (row, redis / memory)
        runs = {r["label"]: r["phases"][0]["ops"][op] for r in document["runs"]}
        if min(o["count"] for o in runs.values()) >= 30:
            expected = runs["redis"]["summary"]["p99_us"] / runs["memory"]["summary"]["p99_us"]
            assert within_rounding(row[4], expected), (row, expected)
        else:
            assert row[4] == "-"
    assert "`--repeat 3`" in " ".join(block.notes)


@pytest.mark.alone
def test_repeats_give_the_factor_its_noise(tmp_path):
    # no timing bound: the cell is recomputed here from the run's own figures, whatever the host gave them
    result = run_cli("run", "-t", "memory://", "-t", "spawn:redis", "--duration", "0.5s", "--warmup", "0",
                     "--no-calibrate", "--repeat", "3", "-o", "r.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "r.json").read_text())
    rows = ranking(document)
    for op in ("get", "set"):
        memory, redis = p50s(document, "memory", op), p50s(document, "redis", op)
        assert sorted(memory) == sorted(redis) == [0, 1, 2]
        ratios = [redis[i] / memory[i] for i in range(3)]
        logs = [math.log(r) for r in ratios]
        half = T95_DF2 * statistics.stdev(logs) / math.sqrt(3)
        low, high = math.exp(statistics.fmean(logs) - half), math.exp(statistics.fmean(logs) + half)
        cell = rows[(f"{op} · local", "redis (shared)")][3]
        assert cell in result.stdout
        factor = statistics.median(ratios)
        if low <= 1 <= high or high - low > max(factor, 1 / factor):  # no ranking either way
            assert cell.startswith("not resolved (")
        else:
            factor, spread = cell.rstrip("×").split(" ± ")
            assert within_rounding(factor + "×", statistics.median(ratios)), (cell, ratios)
            assert within_rounding(spread + "×", (high - low) / 2), (cell, low, high)
    assert "`--repeat 3`" not in result.stdout


# --- the tie arithmetic, on a document with controlled summaries ------------------------------------------------


@pytest.fixture
def doc() -> dict[str, Any]:
    return json.loads((DATA / "report-doc.json").read_text())


def two_backends(doc: dict[str, Any], ratios: list[float], repeats: bool = True) -> dict[str, Any]:
    """memory's three repeats, and "other" with the same figures × ``ratios`` (one per repeat)."""
    memory = [r for r in doc["runs"] if r["label"] == "memory"]
    others = []
    for run, ratio in zip(memory, ratios):
        other = copy.deepcopy(run)
        other["label"] = "other"
        for op in other["phases"][0]["ops"].values():
            op["summary"] = {k: (v * ratio if k.endswith("_us") and v else v) for k, v in op["summary"].items()}
        others.append(other)
    runs = memory + others
    if not repeats:
        runs = [memory[0], others[0]]
        for run in runs:
            run.pop("repeat", None)
    return {**doc, "runs": runs}


def by_hand(ratios: list[float]) -> tuple[float, float, float]:
    logs = [math.log(r) for r in ratios]
    half = T95_DF2 * statistics.stdev(logs) / math.sqrt(len(logs))
    return (statistics.median(ratios), math.exp(statistics.fmean(logs) - half),
            math.exp(statistics.fmean(logs) + half))


def test_inside_run_to_run_noise_is_a_tie(doc):
    ratios = [1.02, 0.98, 1.10]
    median, low, high = by_hand(ratios)
    assert low < 1 < high
    row = ranking(two_backends(doc, ratios))[("get", "other")]
    assert row[1].startswith("memory (")
    assert row[3] == f"not resolved ({fmt_factor(median)}×, {fmt_factor(low)}–{fmt_factor(high)})" \
        == "not resolved (1.02×, 0.89–1.19)"
    assert "95 % interval" in " ".join(verdict(two_backends(doc, ratios)).notes)


def test_outside_the_noise_is_a_factor_with_its_spread(doc):
    ratios = [3.0, 3.2, 2.9]
    median, low, high = by_hand(ratios)
    assert not low <= 1 <= high
    row = ranking(two_backends(doc, ratios))[("get", "other")]
    assert row[3] == f"{median:.2f} ± {(high - low) / 2:.2f}×" == "3.00 ± 0.38×"
    assert row[4] == f"{fmt_factor(statistics.median(ratios))}×"  # p99: the median of the paired ratios


def test_without_repeats_under_5_percent_is_a_tie_and_repeat_is_suggested(doc):
    tie = verdict(two_backends(doc, [1.03], repeats=False))
    assert tie.rows[0][3] == "tie (1.03×)"
    assert sum("`--repeat 3`" in n for n in tie.notes) == 1
    apart = verdict(two_backends(doc, [1.2], repeats=False))
    assert apart.rows[0][3] == "1.20×"


def test_only_like_with_like_is_ranked(doc):
    # report-doc: memory without a sweep point, redis at three value sizes: no common ground
    assert verdict(doc).rows == []
    assert "Nothing to rank" in " ".join(verdict(doc).lines)
    for run in doc["runs"]:
        run["sweep"] = {"value_size": "100"} if run["label"] == "memory" else run["sweep"]
    rows = ranking(doc)
    assert set(rows) == {(f"{op} [value_size=100] · local", "redis (shared)") for op in ("get", "set", "delete")}


def test_a_p99_factor_below_1_says_faster_in_words(doc):
    """Slower at p50, faster at p99: the cell under "slower by" must not read ``0.50×``."""
    two = two_backends(doc, [2.0], repeats=False)
    other = next(r for r in two["runs"] if r["label"] == "other")
    memory = next(r for r in two["runs"] if r["label"] == "memory")
    for name, op in other["phases"][0]["ops"].items():
        op["summary"]["p99_us"] = memory["phases"][0]["ops"][name]["summary"]["p99_us"] / 1.25
    row = ranking(two)[("get", "other")]
    assert row[3] == "2.00×" and row[4] == "1.25× faster"
    assert "\"faster\" where the backend slower at p50 has the lower p99" in " ".join(verdict(two).notes)
    slower = ranking(two_backends(doc, [2.0], repeats=False))[("get", "other")]
    assert slower[4] == "2.00×"  # slower at p99 too: the plain factor


def test_the_table_fits_80_columns(doc):
    console = Console(width=80, record=True, color_system=None)
    to_rich(verdict(two_backends(doc, [1.02, 0.98, 1.10])), console)
    table = [line for line in console.export_text().splitlines() if "not resolved (" in line]
    assert table and all(len(line) <= 80 for line in table)
    assert any("not resolved (1.02×, 0.89–1.19)" in line for line in table)  # a cell, not folded


# --- each warning: present where it applies, absent where it does not ------------------------------------------


def redis_only(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "runs": [r for r in doc["runs"] if r["label"] == "redis"]}


def first(doc: dict[str, Any], label: str) -> dict[str, Any]:
    return next(r for r in doc["runs"] if r["label"] == label)


def test_nothing_found_says_so(doc):
    clean = redis_only(doc)
    assert warnings_of(clean) == []
    assert "No warnings: nothing found that changes this reading." in verdict(clean).notes


def test_dropped_writes_come_first_and_leave_the_ranking(doc):
    two = two_backends(doc, [3.0, 3.2, 2.9])
    assert not any("drops writes" in w for w in warnings_of(two))
    for run in two["runs"]:
        if run["label"] == "memory":
            run["dropped_writes"] = "a value written was not read back (got nothing)."
    found = warnings_of(two)
    # once, naming every repeat it covers
    assert found[0].startswith("memory #1, #2, #3 drops writes: a value written was not read back")
    assert sum("drops writes" in w for w in found) == 1
    assert verdict(two).rows == []  # the only faster backend stored nothing: no ranking against it


def test_a_cache_that_kept_nothing_is_said_to_drop_every_write(doc):
    two = two_backends(doc, [3.0, 3.2, 2.9])
    for run in two["runs"]:
        if run["label"] == "memory":
            run["dropped_writes"] = "a value written was not read back (got nothing)."
            for phase in run["phases"]:
                for op in phase["ops"].values():
                    reads = op.get("hits", 0) + op.get("misses", 0)
                    op["hits"], op["misses"] = 0, reads
                    op["errors"] = {"dropped_write": 3}
    found = warnings_of(two)
    assert found[0].startswith("memory #1, #2, #3 dropped every write (not one of its reads found a value)")
    # the canaries' dropped writes are that line's, not "3 errors"
    assert not any(w.startswith("memory") and "errors in" in w for w in found), found


def test_errors_failed_and_skipped_runs(doc):
    assert not any("error" in w or "failed" in w for w in warnings_of(doc))
    first(doc, "redis")["phases"][0]["ops"]["get"]["errors"] = {"timeout": 5, "connection": 2}
    doc["runs"].append({"label": "memcached", "target": "spawn:memcached", "status": "failed",
                        "reason": "connection refused", "phases": []})
    doc["runs"].append({"label": "pg", "target": "spawn:postgresql", "status": "skipped",
                        "reason": "postgres is not installed", "phases": []})
    found = warnings_of(doc)
    assert "redis [value_size=100]: 7 errors in 5,297 ops (timeout 5, connection 2); " \
           "latencies cover the successes" in found
    assert "memcached failed: connection refused" in found and "pg skipped: postgres is not installed" in found


def test_evictions(doc):
    assert not any("evicted" in w for w in warnings_of(doc))
    first(doc, "redis")["phases"][0]["server"]["evictions"] = 12
    assert any(w.startswith("redis [value_size=100]: the server evicted 12 keys") for w in warnings_of(doc))


def test_hit_ratio_far_from_what_the_key_space_predicts(doc):
    assert not any("get hit ratio" in w for w in warnings_of(doc))  # not prefilled: misses are expected
    doc["experiment"]["workload"]["prefill"] = True
    found = [w for w in warnings_of(doc) if "get hit ratio" in w]
    # redis got 51-53 % where sets 9 % vs deletes 1 % keep ≥ 90 % of keys; memory's 84-85 % is within 10 points
    assert len(found) == 3 and all(w.startswith("redis [value_size=") and "predicts ≥ 90%" in w for w in found)
    for run in doc["runs"]:
        if run["label"] == "redis":
            run["phases"][0]["server"]["evictions"] = 1  # evictions explain it (and are warned about instead)
    assert not any("get hit ratio" in w for w in warnings_of(doc))


def test_per_process_local_and_emulated_backends(doc):
    clean = redis_only(doc)
    assert not any("per-process" in w or "emulator" in w or "local store" in w for w in warnings_of(clean))
    assert any(w.startswith("memory: a per-process cache") for w in warnings_of(doc))
    first(clean, "redis")["server"] = {"kind": "s3", "spawned": True, "emulator": True}
    assert any(w.startswith("redis ran against an emulator") for w in warnings_of(clean))
    local = copy.deepcopy(first(doc, "redis"))
    local["label"], local["backend"]["scheme"] = "disk", "sqlite"
    assert any(w.startswith("disk (sqlite): a local store") for w in warnings_of({**doc, "runs": [local]}))


def test_the_generator_as_the_bottleneck(doc):
    clean = redis_only(doc)
    assert not any("generator" in w for w in warnings_of(clean))
    phase = first(clean, "redis")["phases"][0]
    phase["client_cpu_s"] = 0.95 * phase["wall_s"] * 2  # 2 workers on 2 cpus
    assert any(w.startswith("redis [value_size=100]: the load generator used 95% of its 2 cores")
               for w in warnings_of(clean))
    phase["client_cpu_s"] = 0.0
    sent = sum(op["count"] for op in phase["ops"].values())
    phase["missed"] = 40  # under 1 % of the schedule: the schedule's edge, listed under the table, not a warning
    assert 40 / (40 + sent) < 0.01
    assert not any("never sent" in w for w in warnings_of(clean))
    phase["missed"] = sent // 4  # a fifth of the schedule
    share = 100 * phase["missed"] / (phase["missed"] + sent)
    assert share >= 10
    assert any(f"{phase['missed']:,} open-loop ops ({share:.0f}% of the schedule) fell due but were never sent" in w
               for w in warnings_of(clean))
    # an in-process cache does its work on the client's CPU: that is not the generator's limit
    memory = first(doc, "memory")["phases"][0]
    memory["client_cpu_s"] = memory["wall_s"]
    assert not any("load generator" in w for w in warnings_of(doc))


def test_client_and_server_saturating_their_shared_host(doc):
    """A server on this host (loopback here) shares its cores with the client: together near all of
    them, the host is the limit, though neither alone is; a server elsewhere shares nothing."""
    clean = redis_only(doc)
    phase = first(clean, "redis")["phases"][0]
    phase["client_cpu_s"] = 0.6 * phase["wall_s"] * 2  # 60 % of the client's 2 cores: no generator warning
    phase["server"]["cpu_pct_mean"] = 66.0  # and 0.66 of a core for redis-server: 1.86 of the host's 2
    assert any(w.startswith("redis [value_size=100]: client and server share this host and together used 93% of "
                            "its 2 cores") for w in warnings_of(clean))
    phase["server"]["cpu_pct_mean"] = 40.0  # 1.6 of 2
    assert not any("share this host" in w for w in warnings_of(clean))
    phase["server"]["cpu_pct_mean"] = 66.0
    for run in clean["runs"]:
        run["target"] = "redis://cache.internal:6379/0"
    assert not any("share this host" in w for w in warnings_of(clean))
    first(clean, "redis")["server"] = {"kind": "redis", "spawned": True}
    assert any("share this host" in w for w in warnings_of(clean))


def test_few_samples(doc):
    assert not any("sample" in w for w in warnings_of(doc))  # the fewest is 42 deletes
    first(doc, "redis")["phases"][0]["ops"]["delete"]["count"] = 12
    assert "redis [value_size=100] delete: 12 samples: no trustworthy p99" in warnings_of(doc)
    # repeats of one run are one line
    for run, count in zip([r for r in doc["runs"] if r["label"] == "memory"], (1, 1, 1)):
        run["phases"][0]["ops"]["set"]["count"] = count
    assert "memory set: 1 sample in each of 3 runs: no percentile at all" in warnings_of(doc)
    first(doc, "memory")["phases"][0]["ops"]["set"]["count"] = 20
    assert "memory set: 1 sample (fewest of 3 runs): no percentile at all" in warnings_of(doc)


def test_an_op_budget_not_reached(doc):
    assert not any("planned" in w or "stopped" in w or "interrupted" in w for w in warnings_of(doc))
    doc["experiment"]["workload"]["ops"] = 10_000
    found = warnings_of(doc)
    assert "redis [value_size=100]: 5,297 of the 10,000 ops planned were done" in found
    doc["experiment"]["workload"]["ops"] = None
    first(doc, "redis")["phases"][0]["stopped_on_errors"] = "connection errors: 100 % of ops failed for 2 s"
    first(doc, "memory")["phases"][0]["interrupted"] = True
    found = warnings_of(doc)
    assert ("redis [value_size=100]: stopped early by the on-error policy: connection errors: 100 % of ops failed "
            "for 2 s") in found
    assert any(w.startswith("memory #1: interrupted") for w in found)


def load_sweep(doc: dict[str, Any], p50_at: dict[str, float], param: str = "workers") -> dict[str, Any]:
    runs = []
    for value, p50 in p50_at.items():
        run = copy.deepcopy(first(doc, "redis"))
        run["sweep"] = {param: value}
        if param == "rate":
            run["phases"][0]["mode"], run["backend"]["info"]["client"] = "open", "cachemark-engine"
        for op in run["phases"][0]["ops"].values():
            op["summary"]["p50_us"] = p50
        runs.append(run)
    return {**doc, "runs": runs}


def test_latency_falling_as_load_rises(doc):
    assert not any("falls as" in w for w in warnings_of(load_sweep(doc, {"1": 100.0, "4": 150.0})))
    found = warnings_of(load_sweep(doc, {"1": 200.0, "4": 120.0}))
    assert "redis get: p50 falls as workers rises (1 → 4: 200µs → 120µs)" in " ".join(found)
    assert any("p50 falls as rate rises" in w for w in warnings_of(load_sweep(doc, {"100": 300.0, "1000": 150.0},
                                                                                "rate")))
    # not a load parameter: a bigger value being slower or faster is not this artefact
    assert not any("falls as" in w for w in warnings_of(load_sweep(doc, {"100": 200.0, "1000": 120.0},
                                                                       "value_size")))


def test_python_open_loop_distorts_the_tail(doc):
    clean = redis_only(doc)
    for run in clean["runs"]:
        run["phases"][0]["mode"] = "open"
    assert any(w.startswith("redis: open loop through Python workers") for w in warnings_of(clean))
    for run in clean["runs"]:
        run["backend"]["info"]["client"] = "cachemark-engine"
    assert not any("open loop" in w for w in warnings_of(clean))
    # the engine's runs keep the preflight client's version in info: the sentence names the engine's own
    assert "redis via cachemark-engine 0.1.0, redis 7.0.15." in verdict(clean).lines[0]


def test_an_old_file_with_little_in_it_still_gets_a_verdict():
    document = {"schema": "cachemark.results/1", "runs": [
        {"label": "a", "status": "ok", "phases": [{"ops": {"get": {"count": 100, "summary": {"p50_us": 10.0}}}}]},
        {"label": "b", "status": "ok", "phases": [{"ops": {"get": {"count": 100, "summary": {"p50_us": 25.0}}}}]},
    ]}
    block = verdict(document)
    assert block.rows == [["get", "a (10µs)", "b", "2.50×", "-"]]
    assert block.lines[0].startswith("Workload:")
    assert verdict_blocks(as_model({"schema": "cachemark.results/1", "runs": []})) == []


def test_phases_with_their_own_key_distribution_say_so(doc):
    """The README's experiment: both phases draw sequential keys; the workload's zipf default is nobody's."""
    readme = copy.deepcopy(doc)
    readme["experiment"]["workload"].update({"keys": 1000, "key_dist": "zipf:0.99", "phases": [
        {"name": "set", "mix": {"set": 1}, "ops": 1000, "key_dist": "sequential"},
        {"name": "get", "mix": {"get": 1}, "ops": 1000, "key_dist": "sequential"}]})
    sentence = verdict(readme).lines[0]
    assert "1,000 keys," in sentence and "zipf" not in sentence
    assert ("phases set (set 100 %, sequential keys, 1,000 ops), get (get 100 %, sequential keys, 1,000 ops)"
            in sentence)
    readme["experiment"]["workload"]["phases"][1].pop("key_dist")  # the get phase draws the workload's
    sentence = verdict(readme).lines[0]
    assert "1,000 keys (zipf:0.99)" in sentence and "get (get 100 %, 1,000 ops)" in sentence
    for phase in readme["experiment"]["workload"]["phases"]:  # `--ops 20` over a preset whose phases set none
        phase.pop("ops")
    readme["experiment"]["workload"].update({"ops": 20, "duration": None})
    assert "set (set 100 %, sequential keys, 20 ops), get (get 100 %, 20 ops)" in verdict(readme).lines[0]


def test_a_swept_workload_field_is_what_the_run_planned(doc):
    clean = redis_only(doc)
    first(clean, "redis")["sweep"] = {"ops": "10000"}  # this point planned 10,000 ops; the others had no budget
    found = [w for w in warnings_of(clean) if "planned" in w]
    assert found == ["redis [ops=10000]: 5,297 of the 10,000 ops planned were done"]


def test_clients_of_the_same_server_are_compared_over_the_wire_floor(doc):
    """Three clients of one redis: each one's p50 over the engine's, from the summaries by hand."""
    template = next(r for r in doc["runs"] if r["label"] == "memory" and r.get("repeat") in (None, 1))
    p50 = {"cachemark-engine": 30.0, "redis-py": 59.0, "ruby-activesupport": 104.5}
    runs = []
    for client, latency in p50.items():
        run = copy.deepcopy(template)
        run.pop("repeat", None)
        run["label"] = f"redis({client})"
        run["backend"] = {"scheme": "redis", "info": {"client": client, "server": "redis", "server_version": "7.0.15"}}
        if client == "ruby-activesupport":
            run["backend"]["info"]["store"] = "ActiveSupport::Cache::RedisCacheStore"
        for op in run["phases"][0]["ops"].values():
            op["summary"] = {**op["summary"], "p50_us": latency}
        runs.append(run)
    lines = [line for line in verdict({**doc, "runs": runs}).lines if line.startswith("Client cost")]
    assert lines and all("over the engine's wire floor (30" in line for line in lines), lines
    assert "redis-py +29" in lines[0] and "(1.97×)" in lines[0]
    assert "ruby-activesupport (RedisCacheStore) +74.5" in lines[0] and "(3.48×)" in lines[0]

    without_engine = [r for r in runs if r["label"] != "redis(cachemark-engine)"]
    line = next(x for x in verdict({**doc, "runs": without_engine}).lines if x.startswith("Client cost"))
    assert "over the fastest client, redis-py (59" in line and "+45.5" in line
    assert not [x for x in verdict({**doc, "runs": runs[:1]}).lines if x.startswith("Client cost")]


# --- groups: shared backends against each other, local ones apart ----------------------------------------------


def backend(doc: dict[str, Any], label: str, scheme: str, p50: float, p99: float | None = None,
            mean: float | None = None) -> dict[str, Any]:
    """memory's first run as ``label`` on ``scheme``, its p50, p99 and mean × the factors given (one run)."""
    run = copy.deepcopy(first(doc, "memory"))
    run.pop("repeat", None)
    run["label"], run["target"] = label, f"{scheme}://"
    run["backend"] = {"scheme": scheme, "capabilities": {"shared": scheme != "memory"}, "info": {"client": scheme}}
    times = {"p50_us": p50, "p99_us": p50 if p99 is None else p99, "mean_us": p50 if mean is None else mean}
    for op in run["phases"][0]["ops"].values():
        op["summary"] = {k: v * times.get(k, p50) if k.endswith("_us") and v else v for k, v in op["summary"].items()}
    return run


def test_shared_backends_are_ranked_against_each_other_and_local_ones_apart(doc):
    runs = [backend(doc, "memory", "memory", 1.0), backend(doc, "disk", "sqlite", 1.5),
            backend(doc, "memcached", "memcached", 2.0), backend(doc, "redis", "redis", 3.0)]
    block = verdict({**doc, "runs": runs})
    p50 = first(doc, "memory")["phases"][0]["ops"]["get"]["summary"]["p50_us"]
    assert block.rows[:3] == [
        # "is redis or memcached faster here": one row, the two against each other
        ["get · shared", f"memcached ({fmt_latency(2 * p50)})", "redis", "1.50×", "1.50×"],
        # the per-process cache and the store on this host's disk apart, with the fastest shared one for scale
        ["get · local", f"memory ({fmt_latency(p50)})", "disk", "1.50×", "1.50×"],
        ["", "", "memcached (shared)", "2.00×", "2.00×"],
    ]
    assert block.rows[3][0] == "set · shared"
    assert "Shared backends (a server every app server reaches) are ranked against each other" in " ".join(block.notes)
    # the shared one faster than the local ones: said in words, not a factor under 1×
    slow_local = [backend(doc, "disk", "sqlite", 4.0), backend(doc, "memcached", "memcached", 2.0)]
    assert ranking({**doc, "runs": slow_local})[("get · local", "memcached (shared)")][3] == "2.00× faster"
    # one kind only: no groups named
    only_shared = ranking({**doc, "runs": runs[2:]})
    assert set(only_shared) == {(op, "redis") for op in ("get", "set", "delete")}
    assert "Shared backends" not in " ".join(verdict({**doc, "runs": runs[2:]}).notes)


def test_a_store_nested_in_a_target_or_django_on_disk_is_local(doc):
    """Django's file-based cache and a two-level cache with a file level keep entries on this host's disk."""
    from cachemark.report.verdict import LOCAL, PER_PROCESS, SHARED, kept

    def where(target: str, scheme: str, shared: bool = True, info: dict | None = None) -> tuple[str, str | None]:
        return kept(as_run({"label": "", "status": "ok", "target": target, "backend": {
            "scheme": scheme, "capabilities": {"shared": shared}, "info": info or {}}}))

    assert where("django://?BACKEND=filebased&LOCATION=file://&MAX_ENTRIES=1000", "django") == (LOCAL, "file")
    assert where("django://?BACKEND=diskcache&LOCATION=diskcache://&SHARDS=8", "django") == (LOCAL, "diskcache")
    assert where("django://?BACKEND=filebased&LOCATION=/var/tmp/c", "django", info={
        "framework": "django", "backend": "django.core.cache.backends.filebased.FileBasedCache"}) == (LOCAL, "file")
    assert where("twolevel://?fast=spawn:memcached&slow=file://", "twolevel") == (LOCAL, "file")
    assert where("twolevel://?fast=spawn:memcached&slow=spawn:redis", "twolevel") == (SHARED, None)
    assert where("django://?BACKEND=redis&LOCATION=spawn:redis", "django") == (SHARED, None)
    assert where("django://?BACKEND=locmem", "django", shared=False) == (PER_PROCESS, None)
    # and the warnings say so
    run = backend(doc, "filebased", "django", 2.0)
    run["target"] = "django://?BACKEND=filebased&LOCATION=file://"
    assert "filebased (file): a local store on this host's disk" in " ".join(warnings_of({**doc, "runs": [run]}))


def test_p50_and_p99_ranking_two_backends_differently_is_said(doc):
    runs = [backend(doc, "memcached", "memcached", 2.0, p99=4.0), backend(doc, "redis", "redis", 3.0)]
    notes = verdict({**doc, "runs": runs}).notes
    # memcached's p50 is 2/3 of redis's, its p99 4/3 of it
    assert "get: memcached is faster than redis at p50 (1.50×) but slower at p99 (1.33×)." in notes
    agree = [backend(doc, "memcached", "memcached", 2.0, p99=2.5), backend(doc, "redis", "redis", 3.0)]
    assert not any("but slower at p99" in n for n in verdict({**doc, "runs": agree}).notes)
    # within 5 % at p99 is no disagreement either
    tie = [backend(doc, "memcached", "memcached", 2.0, p99=3.1), backend(doc, "redis", "redis", 3.0)]
    assert not any("but slower at p99" in n for n in verdict({**doc, "runs": tie}).notes)
    # many pairs: a few sentences and a count of the rest. Five backends, p50 up and p99 down by a tenth each:
    # neighbours differ by under 5 % at p99, the 6 pairs further apart disagree, at each of 3 ops
    many = [backend(doc, f"b{i}", "redis", 1.0 + i / 10, p99=3.0 - i / 10) for i in range(5)]
    split = [n for n in verdict({**doc, "runs": many}).notes if "but slower at p99" in n or "more pair" in n]
    assert len(split) == 7 and split[-1] == "… and 12 more pairs that p50 and p99 rank differently."
    assert split[0] == "get: b0 is faster than b2 at p50 (1.20×) but slower at p99 (1.07×)."


# --- the preset's headline figure ranks ------------------------------------------------------------------------


def test_a_headline_figure_ranks_and_a_different_p50_leader_is_said(doc):
    """tag-clean: the harness's ops/s (clients ÷ mean latency) ranks; a backend fastest at p50 but with the
    longer mean (its slow tail) is behind, and a sentence says why the two orders differ."""
    tagged = {**doc, "experiment": {**doc["experiment"], "headline": "tag-clean"}}
    runs = [backend(doc, "file", "redis", 1.0, mean=4.0), backend(doc, "redis", "redis", 2.0, mean=2.0)]
    block = verdict({**tagged, "runs": runs})
    assert block.columns == ["op", "fastest (harness ops/s)", "vs", "slower by (harness ops/s)", "at p50", "at p99"]
    op = first(doc, "memory")["phases"][0]["ops"]["get"]
    workers = first(doc, "memory")["phases"][0]["workers"]
    harness = {"file": workers * 1e6 / (4 * op["summary"]["mean_us"]),
               "redis": workers * 1e6 / (2 * op["summary"]["mean_us"])}
    row = block.rows[0]
    assert row[:3] == ["get", f"redis ({fmt_rate(harness['redis'])}/s)", "file"]
    assert within_rounding(row[3], harness["redis"] / harness["file"]) and row[3] == "2.00×"
    assert row[4] == "2.00× faster"  # file is ahead at p50
    assert ("get: file is the fastest at p50 (2.00× ahead of redis), but redis leads by harness ops/s: the harness "
            "divides by Σ latency, i.e. by the mean, which carries the slow tail the p50 leaves out.") in block.notes
    assert "Ranked by the headline's figure" in " ".join(block.notes)
    # without a headline figure: the p50 ranks, file first
    assert verdict({**doc, "runs": runs}).rows[0][:3] == ["get", f"file ({fmt_latency(op['summary']['p50_us'])})",
                                                          "redis"]


def rate(text: str) -> float:
    number, unit = re.match(r"^([0-9.,]+)(k|M)?\*?(?:/s)?$", text).groups()
    return float(number.replace(",", "")) * {None: 1, "k": 1e3, "M": 1e6}[unit]


def sigma_latency_s(op: dict[str, Any]) -> float:
    total = Histogram()
    for outcome in ("hit", "miss", "ok"):
        if outcome in op.get("histograms", {}):
            total.add(Histogram.decode(op["histograms"][outcome]))
    return total.mean * total.total / 1e9


def test_magento_verdict_and_headline_agree_at_every_op(tmp_path):
    """Reference 002's figure is the harness's ops/s: the verdict ranks by it, so at every op the backend
    it names fastest has the highest rate the headline prints, and each factor is the ratio of those rates."""
    result = run_cli("run", "magento-clean-by-tag", "--ops", "2000", "--keys", "300", "--no-calibrate",
                     "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "out.json").read_text())
    (head,) = headline_blocks(as_model(document))
    columns = {"get": "read ops/s (harness)", "set": "write ops/s (harness)", "clean": "clean ops/s (harness)"}
    printed = {(row[0], op): row[head.columns.index(column)] for row in head.rows for op, column in columns.items()}
    by_hand = {}
    for run in document["runs"]:
        (phase,) = run["phases"]
        for op in columns:
            by_hand[(run["label"], op)] = phase["ops"][op]["count"] / sigma_latency_s(phase["ops"][op]) \
                * phase["workers"]
    block = verdict(document)
    assert block.columns[1] == "fastest (harness ops/s)"
    seen: set[str] = set()
    rows = ranking(document)
    for (cell, other), row in rows.items():
        op = cell.split(" · ")[0]
        best = row[1].rsplit(" (", 1)[0]
        rival = other.removesuffix(" (shared)")
        seen.add(op)
        # the fastest's figure is the headline's, as printed there
        assert row[1].endswith(f"({printed[(best, op)].rstrip('*')}/s)"), (row, printed[(best, op)])
        ratio = by_hand[(best, op)] / by_hand[(rival, op)]
        if 1 / TIE_WITHOUT_REPEATS < ratio < TIE_WITHOUT_REPEATS:  # measured once: under 5 % is a tie
            assert row[3].startswith("tie (") and within_rounding(row[3], ratio), (row, ratio)
        elif other.endswith(" (shared)") and ratio < 1:  # the fastest shared one ahead of the local ones
            assert row[3].endswith("× faster") and within_rounding(row[3], 1 / ratio), (row, ratio)
        else:
            assert ratio >= 1 and within_rounding(row[3], ratio), (row, ratio)
            assert rate(printed[(best, op)]) >= rate(printed[(rival, op)])  # the headline's order too
    assert seen == {"get", "set", "clean"}
    assert any(cell.endswith("· shared") for cell, _ in rows) and any(cell.endswith("· local") for cell, _ in rows)


def test_django_s3_factor_is_the_same_in_the_headline_and_the_verdict(tmp_path):
    """Reference 000's figure is timeit's seconds per 1000 ops: the S3 factor the headline prints (its
    × fastest) is the one the verdict prints, both the ratio of the medians over the repeats."""
    result = run_cli("run", "django-s3-vs-memcached", "--ops", "20", "--no-calibrate", "-o", "out.json",
                     cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # the dummy cache drops writes, by design
    document = json.loads((tmp_path / "out.json").read_text())
    (head,) = headline_blocks(as_model(document))
    block = verdict(document)
    assert block.columns[1] == "fastest (s/1000 ops)"
    rows = ranking(document)
    for phase in ("set", "get"):
        per_1000: dict[str, list[float]] = {}
        for run in document["runs"]:
            if run.get("dropped_writes"):
                continue
            (p,) = [p for p in run["phases"] if p["name"] == phase]
            per_1000.setdefault(run["label"], []).append(p["wall_s"] / sum(o["count"] for o in p["ops"].values())
                                                         * 1000)
        medians = {label: statistics.median(values) for label, values in per_1000.items()}
        best = min(medians, key=medians.__getitem__)
        s3 = next(label for label in medians if label.startswith("s3"))
        for label, median in medians.items():
            if label == best:
                continue
            factor = median / medians[best]
            (verdict_row,) = [row for (cell, other), row in rows.items() if cell == phase and other == label]
            assert verdict_row[1].startswith(f"{best} (")
            (head_row,) = [row for row in head.rows if row[0].startswith(label) and row[1] == phase]
            assert within_rounding(verdict_row[3], factor), (verdict_row, factor)
            assert within_rounding(head_row[-1], factor), (head_row, factor)
            if label == s3:
                assert factor > 5  # the S3 round trip: far from a tie
                assert verdict_row[3] in result.stdout and head_row[-1] in result.stdout


# --- the reference's clients -----------------------------------------------------------------------------------


def django_run(doc: dict[str, Any], label: str, client: str, backend_class: str) -> dict[str, Any]:
    run = backend(doc, label, "django", 2.0)
    run["backend"]["info"] = {"framework": "django", "client": client,
                              "backend": f"django.core.cache.backends.{backend_class}"}
    return run


def test_a_client_other_than_the_references_is_flagged(doc):
    from cachemark.report.verdict import Kind, findings

    reference = {"name": "reference 003", "clients": {"memcached": "pylibmc", "redis": "django-redis"}}
    runs = [django_run(doc, "memcached", "pymemcache", "memcached.PyMemcacheCache"),
            django_run(doc, "redis", "redis-py", "redis.RedisCache")]
    document = {**doc, "experiment": {**doc["experiment"], "reference": reference}, "runs": runs}
    found = [f for f in findings(as_model(document), [as_run(r) for r in runs]) if f.kind == Kind.CLIENT]
    assert [f.text for f in found] == [
        "memcached: measured through pymemcache (Django's PyMemcacheCache) where reference 003 used pylibmc: the "
        "client library's own cost is in every figure, so these are not the figures of the "
        "reference's client",
        "redis: measured through redis-py (Django's RedisCache) where reference 003 used django-redis: the client "
        "library's own cost is in every figure, so these are not the figures of the "
        "reference's client"]
    assert all(f.text in warnings_of(document) for f in found)
    # the reference's own clients: nothing to flag
    runs[0]["backend"]["info"].update(client="pylibmc", backend="django.core.cache.backends.memcached.PyLibMCCache")
    runs[1]["backend"]["info"].update(client="django-redis", backend="django_redis.cache.RedisCache")
    assert not any("measured through" in w for w in warnings_of(document))
    # no reference named: nothing to compare with
    assert not any("measured through" in w for w in warnings_of({**doc, "runs": runs}))


def test_the_reference_table_of_an_experiment_file_reaches_the_verdict(tmp_path):
    (tmp_path / "exp.toml").write_text(
        'targets = ["django://?BACKEND=pymemcache&LOCATION=spawn:memcached", "memory://"]\n'
        'labels = ["memcached", "memory"]\n'
        '[reference]\nname = "reference 003"\nclients = { memcached = "pylibmc", memory = "cachemark.memory" }\n'
        '[workload]\nops = 300\nwarmup = 0\nkeys = 100\n')
    result = run_cli("run", "exp.toml", "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "out.json").read_text())
    assert document["experiment"]["reference"] == {"name": "reference 003",
                                                   "clients": {"memcached": "pylibmc", "memory": "cachemark.memory"}}
    flagged = [w for w in warnings_of(document) if "measured through" in w]
    assert flagged == ["memcached: measured through pymemcache (Django's PyMemcacheCache) where reference 003 used "
                       "pylibmc: the client library's own cost is in every figure, so these are not the figures of the "
                       "reference's client"]
    assert " ".join(flagged[0].split()[:6]) in " ".join(result.stdout.split())
    (tmp_path / "bad.toml").write_text('targets = ["memory://"]\n[reference]\nclients = { memory = "x" }\n')
    bad = run_cli("run", "bad.toml", "--no-calibrate", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "reference.name" in bad.stderr
