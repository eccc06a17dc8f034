"""From results to a decision: needs judged from measured figures, costs from the shipped price table."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from cachemark.analysis.advise import advise
from cachemark.analysis.cost import cost_of, load_prices
from cachemark.errors import UserError
from cachemark.needs import parse_needs
from cachemark.report.advice_report import advice_block, judged
from cachemark.results import as_model, write_atomic


def _run(label: str, scheme: str, p99_us: float, ops_per_s: float = 10_000, shared: bool = True,
         repeat: int | None = None, reads: float = 0.9) -> dict:
    wall = 2.0
    total = int(ops_per_s * wall)
    get, setn = int(total * reads), total - int(total * reads)
    return {"label": label, "status": "ok", "repeat": repeat,
            "backend": {"scheme": scheme, "capabilities": {"shared": shared}},
            "phases": [{"name": "main", "wall_s": wall, "ops": {
                "get": {"count": get, "summary": {"p99_us": p99_us}},
                "set": {"count": setn, "summary": {"p99_us": p99_us * 1.2}}}}]}


def test_prices_are_priced_as_stated() -> None:
    prices = load_prices()
    node = prices.offering("cache.m7g.large")
    assert node.hourly == 0.158 and "2024-11" in node.source
    run = _run("redis", "redis", 300, ops_per_s=20_000)
    cost = cost_of(run, node, prices, load=50_000, data_gb=10)
    # per million ops: 0.158 $/h ÷ (20,000 ops/s × 3,600 s/h) × 10⁶
    assert cost.per_million == pytest.approx(0.158 / (20_000 * 3600) * 1e6)
    # a month: ⌈50,000 / 20,000⌉ = 3 nodes by load, ⌈10 / 6.38⌉ = 2 by data → 3 × 0.158 × 730
    assert cost.nodes == 3 and cost.monthly == pytest.approx(3 * 0.158 * 730)
    s3 = cost_of(run, prices.offering("s3-standard"), prices, load=1000, data_gb=5)
    # 90 % reads at 0.40 $/M, 10 % writes at 5.00 $/M
    assert s3.per_million == pytest.approx(0.9 * 0.40 + 0.1 * 5.00)
    assert s3.monthly == pytest.approx(1000 * 730 * 3600 / 1e6 * s3.per_million + 5 * 0.023)


def test_needs_rank_shared_caches_first_and_say_why_the_others_fail() -> None:
    document = {"runs": [_run("memory", "memory", 1.0, shared=False), _run("sqlite", "sqlite", 40.0),
                         _run("memcached", "memcached", 400.0), _run("redis", "redis", 900.0),
                         _run("slow", "redis", 1500.0)]}
    needs = parse_needs({"app_servers": 4, "p99_ms": {"get": 1.0}}, "test")
    ranked = advise(as_model(document), needs)
    assert [a.label for a in ranked] == ["memcached", "redis", "memory", "sqlite", "slow"]
    reasons = {a.label: {c.need: (c.result, c.why) for c in a.checks} for a in ranked}
    assert reasons["memory"]["shared across 4 app servers"][0] == "fail"
    assert "per-process" in reasons["memory"]["shared across 4 app servers"][1]
    assert "one host's disk" in reasons["sqlite"]["shared across 4 app servers"][1]
    assert reasons["slow"]["get p99 ≤ 1 ms"] == ("fail", "1.5 ms (closed loop)")
    assert reasons["redis"]["get p99 ≤ 1 ms"] == ("pass", "900 µs (closed loop)")


def test_a_budget_met_at_the_median_but_not_in_every_repeat_fails_and_says_so() -> None:
    runs = [_run("redis", "redis", p99, repeat=i) for i, p99 in enumerate((800.0, 900.0, 1200.0))]
    (advice,) = advise(as_model({"runs": runs}), parse_needs({"p99_ms": {"get": 1.0}}, "test"))
    (check,) = advice.checks
    assert check.result == "fail"
    assert "worst of 3 repeats 1.2 ms" in check.why and "not in every repeat" in check.why


def test_a_target_that_dropped_writes_fails_first() -> None:
    run = _run("dummy", "django", 1.0)
    run["dropped_writes"] = "a 100-byte value written without error was not there when read back"
    (advice,) = advise(as_model({"runs": [run]}), parse_needs({}, "test"))
    assert advice.checks[0].result == "fail" and "read back" in advice.checks[0].why


@pytest.mark.parametrize(("needs", "message"), [
    ({"p99": 1}, "unknown need 'p99'"), ({"p99_ms": 1}, "table of op budgets"),
    ({"app_servers": 0}, "whole number from 1"), ({"persistent": "yes"}, "true or false"),
    ({"app_servers": math.inf}, "whole number from 1"), ({"app_servers": 2.5}, "whole number from 1"),
    ({"ops_per_s": math.inf}, "finite number > 0"), ({"data_gb": math.nan}, "finite number > 0"),
    ([{"p99_ms": {"get": 1.0}}], "not an array of tables"),
])
def test_bad_needs_are_one_line(needs, message) -> None:
    with pytest.raises(UserError, match=message):
        parse_needs(needs, "needs.toml")


def test_bad_numbers_and_price_tables_through_the_cli_are_one_line(tmp_path, cachemark) -> None:
    results = str(Path(__file__).parent / "data" / "results-closed-server.json")
    (tmp_path / "aot.toml").write_text("[[needs]]\np99_ms = { get = 1.0 }\n")
    (tmp_path / "inf.toml").write_text("[needs]\napp_servers = 1e400\n")
    (tmp_path / "p-str.toml").write_text('[offerings.x]\nkind = "instance"\nhourly = "1.5"\n')
    (tmp_path / "p-hours.toml").write_text('hours_per_month = "lots"\n')
    (tmp_path / "p-table.toml").write_text("offerings = 3\n")
    cases = [
        (("advise", results, "--needs", "aot.toml"), "not an array of tables"),
        (("advise", results, "--needs", "inf.toml"), "app_servers must be a whole number"),
        (("cost", results, "--price", "redis=cache.t4g.micro", "--load", "inf"), "--load inf: must be a finite"),
        (("cost", results, "--price", "redis=cache.t4g.micro", "--load", "1e400"), "must be a finite"),
        (("cost", results, "--price", "redis=cache.t4g.micro", "--data-gb", "inf"), "--data-gb inf"),
        (("cost", results, "--price", "redis=x", "--prices", "p-str.toml"), "hourly must be a finite number"),
        (("cost", results, "--price", "redis=x", "--prices", "p-hours.toml"), "hours_per_month must be"),
        (("cost", results, "--price", "redis=x", "--prices", "p-table.toml"), "offerings is a table"),
    ]
    for argv, message in cases:
        result = cachemark(*argv, cwd=tmp_path)
        assert result.returncode == 2 and message in result.stderr, (argv, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "crash" not in result.stderr


def test_advise_and_cost_through_the_cli_on_real_runs(tmp_path, cachemark) -> None:
    run = cachemark("run", "-t", "memory://", "-t", "sqlite://", "-t", "spawn:redis", "-t", "spawn:memcached",
                    "--duration", "1s", "--warmup", "0", "--no-calibrate", "-o", "r.json", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    (tmp_path / "needs.toml").write_text('[needs]\napp_servers = 4\np99_ms = { get = 1000.0 }\n')
    result = cachemark("advise", "r.json", "--needs", "needs.toml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "Meets every stated need: " in result.stdout
    first = next(line for line in lines if line.strip().startswith("1 "))
    assert "redis" in first or "memcached" in first  # the shared servers rank above the local caches
    assert "per-process cache" in result.stdout and "one host's disk" in result.stdout
    document = json.loads((tmp_path / "r.json").read_text())
    redis = next(r for r in document["runs"] if r["label"] == "redis")
    phase = redis["phases"][-1]
    ops_per_s = sum(op["count"] for op in phase["ops"].values()) / phase["wall_s"]
    cost = cachemark("cost", "r.json", "--price", "redis=cache.t4g.micro", "--load", "1000", cwd=tmp_path)
    assert cost.returncode == 0, cost.stderr
    per_million = 0.016 / (ops_per_s * 3600) * 1e6
    assert f"{per_million:.4g}" in cost.stdout
    nodes = max(math.ceil(1000 / ops_per_s), 1)
    assert f"{nodes} × {nodes * 0.016 * 730:,.2f}" in cost.stdout
    bad = cachemark("cost", "r.json", "--price", "redis=cache.x1.huge", cwd=tmp_path)
    assert bad.returncode == 2 and "no offering named 'cache.x1.huge'" in bad.stderr


def test_an_experiment_with_needs_ends_with_the_advice(tmp_path, cachemark) -> None:
    (tmp_path / "e.toml").write_text('targets = ["memory://", "spawn:redis"]\n[workload]\nduration = "0.5s"\n'
                                     'warmup = 0\n[needs]\napp_servers = 2\n')
    result = cachemark("run", "e.toml", "--no-calibrate", "-o", "r.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Which cache, for these needs" in result.stdout and "Meets every stated need: redis." in result.stdout
    html = cachemark("report", "r.json", "-f", "html", "-o", "r.html", cwd=tmp_path)
    assert html.returncode == 0 and "Which cache, for these needs" in (tmp_path / "r.html").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text('targets = ["memory://"]\n[needs]\nshared = true\n')
    refused = cachemark("run", "bad.toml", "--no-calibrate", cwd=tmp_path)
    assert refused.returncode == 2 and "unknown need 'shared'" in refused.stderr


# --- the run's own warnings beside the figures (report/verdict.py QUALIFY_FIGURES) -------------------------------

DATA = Path(__file__).parent / "data"
NEEDS = {"p99_ms": {"get": 1000.0, "delete": 1000.0}, "ops_per_s": 100, "app_servers": 2}


def real_doc() -> dict:
    """Checked-in real runs: three repeats of memory:// (per-process: a warning, not about figures) and redis
    over loopback at three value sizes (no warning)."""
    return json.loads((DATA / "report-doc.json").read_text())


def checks_of(document: dict, label: str = "redis") -> dict[str, Any]:
    advice = next(a for a in judged(as_model(document), parse_needs(NEEDS, "test"), None) if a.label == label)
    return {c.need: c for c in advice.checks} | {"warnings": advice.warnings}


def saturate(document: dict) -> dict:
    """The first redis run's client and server together at 93 % of the host's 2 cores."""
    phase = next(r for r in document["runs"] if r["label"] == "redis")["phases"][0]
    phase["client_cpu_s"] = 0.6 * phase["wall_s"] * 2
    phase["server"]["cpu_pct_mean"] = 66.0
    return document


def test_figures_without_warnings_that_change_them_pass_plainly() -> None:
    for label in ("redis", "memory"):
        checks = checks_of(real_doc(), label)
        assert checks["warnings"] == [], label  # memory's per-process line is about what it is, not its figures
        assert all(not c.caveats and "warnings" not in c.why for n, c in checks.items() if n != "warnings")


def test_a_pass_on_a_saturated_host_says_it_passes_only_on_those_figures() -> None:
    checks = checks_of(saturate(real_doc()))
    (line,) = checks["warnings"]
    assert line.startswith("redis [value_size=100]: client and server share this host and together used 93% of its")
    for need in ("get p99 ≤ 1000 ms", "serves 100 ops/s"):
        assert checks[need].result == "pass" and checks[need].caveats == ("host saturated",)
        assert checks[need].why.endswith("; passes only on figures with warnings: host saturated (below)")
    assert not checks["shared across 2 app servers"].caveats  # what the backend is, not a figure
    block = advice_block(judged(as_model(saturate(real_doc())), parse_needs(NEEDS, "test"), None))
    assert "redis meets them only on figures with warnings (below)." in block.lines
    assert block.notes[-2:] == ["Warnings that change how these figures read (from the run's own report):",
                                f"- {line}"]


def test_too_few_samples_of_one_op_bear_on_its_budget_only_and_a_fail_names_its_warnings() -> None:
    document = real_doc()
    delete = next(r for r in document["runs"] if r["label"] == "redis")["phases"][0]["ops"]["delete"]
    delete["count"], delete["summary"]["p99_us"] = 12, 2_000_000.0
    checks = checks_of(document)
    assert checks["delete p99 ≤ 1000 ms"].result == "fail"
    assert checks["delete p99 ≤ 1000 ms"].why.endswith("; figures with warnings: too few samples (below)")
    assert not checks["get p99 ≤ 1000 ms"].caveats and not checks["serves 100 ops/s"].caveats
    assert checks["warnings"] == ["redis [value_size=100] delete: 12 samples: no trustworthy p99"]


def test_an_emulator_bears_on_every_figure() -> None:
    document = real_doc()
    for run in document["runs"]:
        if run["label"] == "redis":
            run["backend"]["info"]["emulator"] = "fakeredis"
    checks = checks_of(document)
    assert checks["get p99 ≤ 1000 ms"].caveats == ("an emulator",) == checks["serves 100 ops/s"].caveats


def test_cost_names_the_warnings_of_the_throughput_it_prices(tmp_path, cachemark) -> None:
    write_atomic(tmp_path / "clean.json", real_doc())
    write_atomic(tmp_path / "saturated.json", saturate(real_doc()))
    clean = cachemark("cost", "clean.json", "--price", "redis=cache.t4g.micro", "--markdown", cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert "warnings" not in clean.stdout
    warned = cachemark("cost", "saturated.json", "--price", "redis=cache.t4g.micro", "--markdown", cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    row = next(line for line in warned.stdout.splitlines() if line.startswith("| redis |"))
    assert "| figures with warnings |" in warned.stdout and row.endswith("| host saturated |")
    assert any(line.startswith("- redis [value_size=100]: client and server share this host")
               for line in warned.stdout.splitlines())


# --- budgets on the tail the run trusts; a label's price whatever client measured it -----------------------------

def open_loop_doc(engine_twin: bool) -> dict:
    """redis measured in open loop through Python workers (the verdict calls that tail overstated), its get p99
    2 s against a 1 s budget; with ``engine_twin``, the same server through the engine too, p99 0.5 s."""
    document = real_doc()
    redis = [r for r in document["runs"] if r["label"] == "redis"]
    for run in redis:
        for phase in run["phases"]:
            phase["mode"], phase["rate"] = "open", 500.0
            phase["ops"]["get"]["summary"]["p99_us"] = 2_000_000.0
    if engine_twin:
        twin = json.loads(json.dumps(redis[0]))
        twin["label"], twin["target"] = "redis(engine)", twin["target"] + "?client=engine"
        twin["backend"]["info"]["client"] = "cachemark-engine"
        twin["phases"][0]["ops"]["get"]["summary"]["p99_us"] = 500_000.0
        document["runs"].append(twin)
    return document


def test_an_overstated_open_loop_tail_cannot_fail_a_budget() -> None:
    from cachemark.report.verdict import warnings

    document = open_loop_doc(engine_twin=False)
    assert any("redis: open loop through Python workers" in line and "overstated" in line
               for line in warnings(as_model(document), as_model(document).runs))  # the run's own word
    check = checks_of(document)["get p99 ≤ 1000 ms"]
    assert check.result == "check", check.why  # it was a FAIL on a tail the same run calls overstated
    assert "2 s (worst of 3 repeats 2 s) through redis-py, open loop: overstated" in check.why
    assert "?client=engine" in check.why
    # the figure the run trusts: closed loop, or the engine's open loop, is judged as it is
    closed = checks_of(real_doc())["get p99 ≤ 1000 ms"]
    assert closed.result == "pass" and closed.why.endswith("(redis-py, closed loop)")


def test_a_budget_is_judged_on_the_engine_twin_and_says_so() -> None:
    document = open_loop_doc(engine_twin=True)
    check = checks_of(document)["get p99 ≤ 1000 ms"]
    assert check.result == "pass", check.why
    assert check.why.startswith("500 ms (engine, open loop), measured as redis(engine): the tail this run trusts")
    assert "through redis-py, open loop: overstated" in check.why
    # (its 500-ms p99 over a sub-ms p50 is an extreme tail: the verdict's warning is named beside it)
    assert checks_of(document, "redis(engine)")["get p99 ≤ 1000 ms"].why.startswith("500 ms (engine, open loop)")


def test_a_label_keeps_its_price_whatever_client_measures_it(tmp_path, cachemark) -> None:
    document = real_doc()
    for run in document["runs"]:
        if run["label"] == "redis":  # the same server, switched to the engine: the label becomes redis(engine)
            run["label"], run["target"] = "redis(engine)", run["target"] + "?client=engine"
            run["backend"]["info"]["client"] = "cachemark-engine"
    needs = parse_needs({"monthly_budget": 100, "ops_per_s": 100, "prices": {"redis": "cache.t4g.micro"}}, "test")
    advice = next(a for a in judged(as_model(document), needs, load_prices()) if a.label == "redis(engine)")
    budget = next(c for c in advice.checks if c.need.startswith("costs"))
    assert budget.result == "pass" and "cache.t4g.micro" in budget.why, budget.why  # was "check: no price"
    write_atomic(tmp_path / "r.json", document)
    cost = cachemark("cost", "r.json", "--price", "redis=cache.t4g.micro", "--markdown", cwd=tmp_path)
    assert cost.returncode == 0, cost.stderr
    assert any(line.startswith("| redis(engine) | cache.t4g.micro |") for line in cost.stdout.splitlines())
    wrong = cachemark("cost", "r.json", "--price", "valkey=cache.t4g.micro", cwd=tmp_path)
    assert wrong.returncode == 2 and "no measured run labelled 'valkey'" in wrong.stderr


def test_nodes_are_the_larger_of_memory_and_load() -> None:
    from cachemark.analysis.cost import GIB, nodes_needed

    prices = load_prices()
    node = prices.offering("cache.m7g.large")  # 6.38 GiB, 0.158 an hour
    # 20 GiB of verified size → ⌈20 / 6.38⌉ = 4 by memory; 50,000 ops/s at 20,000 each → 3 by load
    count = nodes_needed(node, 20 * GIB, 50_000, 20_000)
    assert (count.memory_nodes, count.load_nodes, count.nodes, count.by_memory) == (4, 3, 4, True)
    assert count.monthly_cost == pytest.approx(4 * 0.158 * 730)
    count = nodes_needed(node, 1 * GIB, 100_001, 20_000)  # ⌈100,001 / 20,000⌉ = 6 by load
    assert (count.memory_nodes, count.load_nodes, count.nodes, count.by_memory) == (1, 6, 6, False)
    assert nodes_needed(node, None, None, None).nodes == 1
    with pytest.raises(UserError, match="billed per request"):
        nodes_needed(prices.offering("s3-standard"), GIB, 10, 10)
    with pytest.raises(UserError, match="capacity to count nodes by"):
        nodes_needed(node, GIB, 1000, None)
    # cost on the capacity within the budget, not the closed-loop throughput: 50,000 ÷ 12,500 = 4 nodes
    run = _run("redis", "redis", 300, ops_per_s=20_000)
    cost = cost_of(run, node, prices, load=50_000, capacity=12_500)
    assert cost.nodes == 4 and any("within the p99 budget" in n for n in cost.notes)


def test_prices_lists_the_offerings(tmp_path, cachemark) -> None:
    shipped = load_prices()
    table = cachemark("prices", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert all(name in table.stdout for name in shipped.offerings) and "11.68" in table.stdout  # t4g.micro a month
    data = json.loads(cachemark("prices", "--json", cwd=tmp_path).stdout)
    micro = next(o for o in data["offerings"] if o["name"] == "cache.t4g.micro")
    assert micro["memory_gb"] == 0.5 and micro["monthly"] == pytest.approx(0.016 * 730)
    (tmp_path / "mine.toml").write_text('currency = "EUR"\n[offerings.box]\nkind = "instance"\nhourly = 0.5\n'
                                        'memory_gb = 64\nsource = "our own rack"\n')
    mine = cachemark("prices", "--prices", "mine.toml", "--markdown", cwd=tmp_path)
    assert mine.returncode == 0 and "| box | instance | 64 | 0.5 | 365.00 | our own rack |" in mine.stdout, mine.stdout
    assert "in EUR" in mine.stdout


def test_cost_counts_nodes_on_the_capacity_file(tmp_path, cachemark) -> None:
    """`cost --capacity` (what `cachemark capacity -o` wrote): the load's nodes on the capacity within the budget,
    found by the label without its client as prices are."""
    write_atomic(tmp_path / "r.json", real_doc())
    (tmp_path / "cap.json").write_text(json.dumps({"capacity_ops_per_s": {"redis(engine)": 25_000.0}, "targets": [
        {"label": "redis(engine)", "target": "spawn:redis?client=engine"}]}))
    priced = cachemark("cost", "r.json", "--price", "redis=cache.t4g.micro", "--load", "100000", "--capacity",
                       "cap.json", "--markdown", cwd=tmp_path)
    assert priced.returncode == 0, priced.stderr
    row = next(line for line in priced.stdout.splitlines() if line.startswith("| redis |"))
    assert "| 4 × 46.72 |" in row, row  # ⌈100,000 ÷ 25,000⌉ = 4 nodes × 0.016 × 730
    assert "one node serves 25,000 ops/s within the p99 budget" in priced.stdout
    (tmp_path / "bad.json").write_text('{"targets": []}')
    bad = cachemark("cost", "r.json", "--price", "redis=cache.t4g.micro", "--capacity", "bad.json", cwd=tmp_path)
    assert bad.returncode == 2 and "not a capacity file" in bad.stderr
