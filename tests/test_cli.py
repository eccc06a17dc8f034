"""The command line: a small real run, and one clear line with exit 2 for bad input."""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from cachemark import entry
from conftest import run_cli


def test_run_prints_the_table_and_saves_results(tmp_path, cachemark):
    result = cachemark("run", "-t", "memory://", "-t", "sqlite://", "--duration", "1", "--warmup", "0",
                       "--no-calibrate", "-o", "out.json", "--html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "memory" in result.stdout and "sqlite" in result.stdout and "p99.9" in result.stdout
    document = json.loads((tmp_path / "out.json").read_text())
    assert document["schema"] == "cachemark.results/1"
    assert [r["status"] for r in document["runs"]] == ["ok", "ok"]
    assert document["experiment"]["workload"]["duration"] == 1.0
    # an ad-hoc run is named after its targets, not "default" (the default comparison's name)
    assert "cachemark: memory vs sqlite" in result.stdout and "cachemark: default" not in result.stdout
    assert document["experiment"]["name"] == "memory vs sqlite"
    html = (tmp_path / "out.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "sqlite" in html and "<svg" in html
    assert "<title>cachemark: memory vs sqlite</title>" in html


@pytest.mark.parametrize(("args", "message"), [
    (["run", "-t", "nosuch://x", "--no-calibrate"], "unknown backend scheme"),
    (["run", "-t", "redis://127.0.0.1:1/0", "--no-calibrate"], "127.0.0.1:1"),
    (["run", "-t", "memory://", "--keys", "0", "--no-calibrate"], "keys"),
    (["run", "-t", "memory://", "--mix", "get=0", "--no-calibrate"], "sum to 0"),
    (["run", "bad.toml", "--no-calibrate"], "malformed TOML"),
    (["run", "no-such-preset", "--no-calibrate"], "neither an experiment file nor a preset"),
    (["show", "bad.toml"], "not a results file"),
    # typer's own usage errors: a box of five lines, now the same one line as every other error
    (["run", "--duratoin", "1s"], "cachemark: error: no such option --duratoin (did you mean --duration?)"),
    (["rnu", "-t", "memory://"], "cachemark: error: no such command rnu (did you mean run?)"),
    (["trace", "statz", "t.csv"], "cachemark: error: no such command statz (did you mean stats?)"),
    (["run", "--workers", "many"], "invalid value for '--workers'"),
    (["report"], "missing argument 'results'; see cachemark report --help"),
    # an experiment file without targets would run the six default ones
    (["run", "no-targets.toml", "--no-calibrate"], "no-targets.toml: no targets: add e.g. targets"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message, cachemark):
    (tmp_path / "bad.toml").write_text("[workload\nkeys = ")
    (tmp_path / "no-targets.toml").write_text("[workload]\nkeys = 100\n")
    result = cachemark(*args, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(tmp_path, cachemark):
    result = cachemark("--debug", "run", "-t", "nosuch://x", "--no-calibrate", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" in result.stderr


@pytest.mark.serial
def test_ctrl_c_keeps_what_was_measured(tmp_path):
    """Ctrl-C in the timed phase saves what was measured so far. On a slow machine the
    signal can land before that phase (start-up: no results file; prefill: a run saved as
    interrupted with nothing measured), so the wait doubles until it lands inside it."""
    argv = [sys.executable, "-m", "cachemark", "run", "-t", "memory://", "--duration", "60", "--warmup", "0",
            "--no-calibrate", "-o", "out.json"]
    run = None
    for wait in (4, 8, 16):
        (tmp_path / "out.json").unlink(missing_ok=True)
        proc = subprocess.Popen(argv, cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(wait)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "Traceback" not in stderr, stderr
        if not (tmp_path / "out.json").exists():
            continue  # interrupted while still starting up
        run = json.loads((tmp_path / "out.json").read_text())["runs"][0]
        assert run["status"] == "interrupted"
        if run["phases"]:
            break
    assert run and run["phases"], "never reached the timed phase"
    assert run["phases"][0]["ops"]["get"]["count"] > 0
    assert 0 < run["phases"][0]["wall_s"] < 60  # the Ctrl-C comes within 16 s of start: well before the 60-s deadline


@pytest.mark.serial
def test_ctrl_c_while_the_command_still_imports_ends_quietly(monkeypatch, capsys):
    class Interrupting:  # a Ctrl-C in the middle of importing the command's modules
        def find_spec(self, name, path=None, target=None):
            if name == "cachemark.cli":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "cachemark.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    with pytest.raises(SystemExit) as ended:
        entry.main()
    assert ended.value.code == 130
    assert capsys.readouterr().err == "cachemark: interrupted\n"


@pytest.fixture
def cli_in_process(monkeypatch):
    """cachemark's main in this process, its signal handlers, hooks and title put back afterwards."""
    from cachemark import cli, proctitle

    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setattr(cli._Signals, "received", False)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    monkeypatch.setattr(proctitle, "hide_secrets", lambda: None)
    yield cli
    for number, handler in handlers.items():
        signal.signal(number, handler)


def test_a_ctrl_c_a_library_raised_as_its_own_error_ends_as_an_interrupt(cli_in_process, monkeypatch, capsys,
                                                                        tmp_path):
    """pydantic, building a model's validator when a Ctrl-C lands, raises a SchemaError that only names the
    KeyboardInterrupt: that is the user's Ctrl-C (one line, exit 130), not a crash of ours. The same error
    without a signal received is one."""
    def building_a_model() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            pass
        raise ValueError('Error building "model" validator:\n  KeyboardInterrupt: ')

    monkeypatch.setattr(cli_in_process, "_app", building_a_model)
    with pytest.raises(SystemExit) as ended:
        cli_in_process.main()
    assert ended.value.code == 130 and capsys.readouterr().err == "cachemark: interrupted\n"

    monkeypatch.setattr(cli_in_process._Signals, "received", False)
    def a_bug() -> None:
        raise ValueError("KeyboardInterrupt")

    monkeypatch.setattr(cli_in_process, "_app", a_bug)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the crash report lands here, not in /tmp
    with pytest.raises(SystemExit) as ended:
        cli_in_process.main()
    assert ended.value.code == 70 and "crash (a bug in cachemark" in capsys.readouterr().err
    assert len(list(tmp_path.glob("cachemark-crash-*.txt"))) == 1


@pytest.mark.alone
def test_network_profiles_print_the_percent_of_baseline_table(tmp_path, cachemark):
    result = cachemark("run", "-t", "spawn:redis", "-t", "spawn:memcached", "--network", "same-host,cross-region",
                       "--keys", "50", "--duration", "1", "--warmup", "0", "--no-calibrate", "-o", "net.json",
                       cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "% of baseline" in result.stdout and "cross-region" in result.stdout
    document = json.loads((tmp_path / "net.json").read_text())
    # µs: the proxy adds far less than 5 ms (21.5 µs beside a busy loop at load 8: 230x)
    assert document["environment"]["proxy_overhead"]["added_p50"] < 5000
    far = [r for r in document["runs"] if r["network"]["profile"] == "cross-region"]
    # the profile's delay is a floor the proxy sets (70-71 ms p50 beside a busy loop): load only raises it
    assert far and all(r["phases"][0]["ops"]["get"]["summary"]["p50_us"] > 60_000 for r in far)


@pytest.mark.alone
def test_the_proxy_overhead_is_measured_and_reported_beside_every_network_figure(tmp_path, cachemark):
    # The emulated network's figures include the proxy's own cost: a run behind a profile measures it
    # once (direct vs through a no-delay proxy) and states it in the result and in every report.
    for _ in range(2):
        result = cachemark("run", "-t", "spawn:redis", "--network", "same-host,lan", "--keys", "20", "--ops", "300",
                           "--warmup", "0", "--no-calibrate", "-o", "net.json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        document = json.loads((tmp_path / "net.json").read_text())
        overhead = document["environment"]["proxy_overhead"]
        if overhead["direct_p50"] < overhead["proxied_p50"]:
            break
        # Beside a busy loop the direct round trip's p50 once came out above the proxied one's (30.5 against
        # 22.4 µs); a proxy that cost nothing, or a measurement that swapped them, would do it every time.
    # 21.6 against 42.7 µs beside a busy loop at load 8 (the proxied round trip ~2x the direct one); two
    # medians of 1,000+ samples each, taken twice, where one try came out the wrong way once
    assert overhead["samples"] >= 1000 and 0 < overhead["direct_p50"] < overhead["proxied_p50"]
    # idle CPUs polled for the whole experiment where this host lets us ask (root: /dev/cpu_dma_latency)
    assert overhead["fast_wakeups"] is os.access("/dev/cpu_dma_latency", os.W_OK)
    shown = f"network proxy: adds {max(overhead['added_p50'], 0):.0f} µs p50"
    assert "% of baseline" in result.stdout and shown in result.stdout.replace("\n", " ")
    for fmt in ("markdown", "html"):
        report = cachemark("report", "net.json", "-f", fmt, "-o", "-", cwd=tmp_path)
        assert report.returncode == 0, report.stderr
        assert "% of baseline" in report.stdout and shown in report.stdout, fmt
    same_host = cachemark("run", "-t", "spawn:redis", "--network", "same-host", "--ops", "50", "--warmup", "0",
                          "--no-calibrate", "-o", "local.json", cwd=tmp_path)
    assert same_host.returncode == 0, same_host.stderr
    assert "network proxy" not in same_host.stdout  # no proxy in the path: nothing to subtract
    assert "proxy_overhead" not in json.loads((tmp_path / "local.json").read_text())["environment"]


def test_a_wrong_password_is_one_line_and_exit_2(tmp_path, redis_server_auth, cachemark):
    url = f"redis://:hunter2@127.0.0.1:{redis_server_auth.port}/0"
    result = cachemark("run", "-t", url, "--no-calibrate", "--duration", "1", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "authentication" in lines[0], result.stderr
    assert "hunter2" not in result.stderr + result.stdout


def test_version_and_short_help(tmp_path, cachemark):
    version = cachemark("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("cachemark ")
    for args in (["-h"], ["run", "-h"]):
        result = cachemark(*args, cwd=tmp_path)
        assert result.returncode == 0 and "Usage" in result.stdout, args


def test_positional_targets_count_as_dash_t(tmp_path, cachemark):
    result = cachemark("run", "memory://", "null://", "--duration", "0.2s", "--warmup", "0", "--no-calibrate",
                       "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    runs = json.loads((tmp_path / "out.json").read_text())["runs"]
    assert [r["target"] for r in runs] == ["memory://", "null://"]
    two = cachemark("run", "a.toml", "b.toml", cwd=tmp_path)
    assert two.returncode == 2 and "one experiment file or preset at a time" in two.stderr


README_EXPERIMENT = """name = "set-then-get"

[workload]
keys = 1000
value_size = 150
workers = 1
warmup = 0
prefill = false

[[workload.phases]]
name = "set"
mix = { set = 1 }
ops = 1000
key_dist = "sequential"

[[workload.phases]]
name = "get"
mix = { get = 1 }
ops = 1000
key_dist = "sequential"
"""


def test_the_readme_experiment_reads_as_written(tmp_path, cachemark):
    """The README's experiment.toml (its targets given with -t): its phases' sequential keys in the
    workload sentence, not the default zipf; its ops named set and get, not set:set and get:get."""
    (tmp_path / "experiment.toml").write_text(README_EXPERIMENT)
    result = cachemark("run", "experiment.toml", "-t", "memory://", "-t", "null://", "--no-calibrate",
                       "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "cachemark: set-then-get" in text  # its own name
    assert ("Workload: 1,000 keys, values 150 B, phases set (set 100 %, sequential keys, 1,000 ops), "
            "get (get 100 %, sequential keys, 1,000 ops)") in text
    assert "zipf" not in text and "set:set" not in text and "get:get" not in text
    assert re.search(r"│ memory\s+│ set\s+│\s+1,000 │", result.stdout), result.stdout


def test_the_starting_line_cuts_and_escapes_a_label(tmp_path, cachemark):
    """A label (or a URL parameter in one) is the user's text: 100 KB of it, or an escape sequence,
    is printed cut and escaped, as in an error line."""
    label = "\x1b[2J" + "x" * 100_000
    result = cachemark("run", "-t", "memory://", "--label", label, "--duration", "0.2s", "--warmup", "0",
                       "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("\\x1b[2Jxxx") and first.endswith("xxx: starting") and "…" in first
    assert len(first) < 200
    title = next(line for line in result.stdout.splitlines() if line.startswith("cachemark: "))
    assert len(title.rstrip()) < 200
    assert "\x1b" not in result.stdout


def test_every_target_skipped_is_not_a_success(tmp_path):
    env = {**os.environ, "PATH": "/nonexistent", "COLUMNS": "200"}
    result = run_cli("run", "-t", "spawn:memcached", "--duration", "0.2s", "--no-calibrate", "-o", "out.json",
                     cwd=tmp_path, env=env, timeout=120)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "every target was skipped" in result.stdout
    assert json.loads((tmp_path / "out.json").read_text())["runs"][0]["status"] == "skipped"


def test_ops_that_would_change_nothing_is_refused(tmp_path, cachemark):
    (tmp_path / "p.toml").write_text('targets = ["memory://"]\n[workload]\nwarmup = 0\n'
                                     '[[workload.phases]]\nname = "a"\nmix = { set = 1 }\nops = 10\n')
    result = cachemark("run", "p.toml", "--ops", "100", "--no-calibrate", cwd=tmp_path)
    assert result.returncode == 2
    assert "the phases a of p.toml set their own op counts" in result.stderr
