"""Faults end a run the way a user needs: a dead server stops it (failed, exit 1), a refused
prefill is one line (exit 2), a bug of ours is a crash (exit 70, traceback in a file), and
SIGTERM/SIGHUP clean up like Ctrl-C (exit 130). Real servers, killed for real.

Serial (run alone) are the cases that race a signal against start-up (Ctrl-C at any moment, in a
finalizer, during a worker's crash) or check what a killed run leaves in /dev/shm and the scratch
directory, which a test beside them would add to; the rest act once the timed phase is under way and
allow seconds where a second is needed, so they hold on a busy host."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachemark import procs

TESTS = Path(__file__).parent


def _start(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """cachemark in its own process group, as a terminal or CI would start it."""
    return subprocess.Popen([sys.executable, "-m", "cachemark", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "COLUMNS": "200", **(env or {})})


def _wait_for_ops(server, minimum: int = 2000, timeout: float = 30) -> None:
    """Until the server has served ``minimum`` commands: the timed phase is under way. The default
    is past the prefill of the tests' 1,000 keys: at 1,000 a kill could land in its last batch."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=server.port)
    deadline = time.monotonic() + timeout
    while True:
        try:  # a server found by its process may not listen yet: refused until it does
            if client.info("stats")["total_commands_processed"] >= minimum:
                break
        except redis.ConnectionError:
            pass
        assert time.monotonic() < deadline, "the run never got going"
        time.sleep(0.1)
    client.close()


class LocalPort:
    """The port a spawned server (found by its pid) listens on, for :func:`_wait_for_ops`."""

    def __init__(self, pid: int) -> None:
        args = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(pid)], capture_output=True, text=True).stdout
        # "redis-server --port N …" as spawn:redis starts it, "redis-server 127.0.0.1:N" once it runs
        found = re.search(r"--port (\d+)", args) or re.search(r":(\d+)\b", args)
        assert found, f"no port in {args!r}"
        self.port = int(found[1])


def _results(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("workers", [1, 2])
def test_a_killed_server_stops_the_run_and_fails_it(tmp_path, spawn, workers) -> None:
    server = spawn("redis")
    proc = _start(["run", "-t", server.url(), "--duration", "30s", "--warmup", "0", "--no-calibrate",
                   "--workers", str(workers), "--keys", "1000", "-o", "out.json"], tmp_path)
    _wait_for_ops(server)
    time.sleep(0.5)
    os.kill(server.pid(), signal.SIGKILL)
    killed = time.monotonic()
    stdout, stderr = proc.communicate(timeout=60)
    took = time.monotonic() - killed
    assert proc.returncode == 1, stderr
    # the 2-s grace of failures, then the results written: 2.5-2.9 s beside a busy loop against 10 s (3.5x);
    # without the stop the run goes on to its 30-s deadline
    assert took < 10, f"the run went on for {took:.1f} s after the server died"
    run = _results(tmp_path / "out.json")["runs"][0]
    assert run["status"] == "failed"
    assert "connection errors from" in run["reason"] and "100 % of ops failed for 2 s" in run["reason"]
    phase = run["phases"][0]
    assert phase["stopped_on_errors"] == run["reason"]
    assert phase["ops"]["get"]["hits"] + phase["ops"]["get"]["misses"] > 0  # what was measured is kept
    assert "Traceback" not in stderr
    assert "failed: connection errors from" in stdout.replace("\n", " ")


@pytest.mark.serial
def test_a_hung_server_stops_the_run_after_its_timeouts(tmp_path, spawn) -> None:
    server = spawn("redis")
    proc = _start(["run", "-t", f"{server.url()}?socket_timeout=1", "--duration", "30s", "--warmup", "0",
                   "--no-calibrate", "--workers", "2", "--keys", "1000", "-o", "out.json"], tmp_path)
    _wait_for_ops(server)
    os.kill(server.pid(), signal.SIGSTOP)  # alive, connected, silent
    stopped = time.monotonic()
    try:
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        os.kill(server.pid(), signal.SIGCONT)
    assert proc.returncode == 1, stderr
    # the 1-s timeouts, the 2-s grace, then cleanup's and the server sampler's own timeouts against the hung
    # server: 8.0 s beside a busy loop. The bound was 15 s (1.9x); 20 s is 2.5x, and the bug (no stop) runs
    # to the 30-s deadline
    assert time.monotonic() - stopped < 20
    run = _results(tmp_path / "out.json")["runs"][0]
    assert run["status"] == "failed" and run["reason"].startswith("timeout errors from")
    assert "cleanup failed" in run["backend"].get("cleanup_error", "")  # said, not hidden


@pytest.mark.parametrize("allow_errors", [True, False])
def test_on_error_continue_runs_to_the_deadline_with_errors_in_the_series(tmp_path, spawn, allow_errors) -> None:
    server = spawn("redis")
    proc = _start(["run", "-t", server.url(), "--duration", "3s", "--warmup", "0", "--no-calibrate",
                   "--workers", "1", "--keys", "1000", "--on-error", "continue", "-o", "out.json",
                   *(["--allow-errors"] if allow_errors else [])], tmp_path)
    _wait_for_ops(server)
    os.kill(server.pid(), signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=60)
    # failed ops make the figures untrustworthy: exit 1 unless the user said errors are expected
    assert proc.returncode == (0 if allow_errors else 1), stderr
    assert ("ops failed" in stdout) != allow_errors
    phase = _results(tmp_path / "out.json")["runs"][0]["phases"][0]
    # to the deadline (3.00 s observed), not stopped at the errors (2 s of grace otherwise): a phase runs to
    # its deadline or past it, so load cannot bring it under the floor
    assert phase["wall_s"] > 2.7
    assert not phase["stopped_on_errors"]
    seconds = phase["timeseries"]
    # after the kill: every op of a second failed (7,800-10,500 refused ops in it beside a busy loop: > 100
    # is 78x below)
    assert seconds[-1]["errors"] == seconds[-1]["ops"] > 100


def test_a_refused_prefill_is_one_line(tmp_path, cachemark) -> None:
    result = cachemark("run", "-t", "spawn:memcached?max_item_size=1k", "--value-size", "2048", "--duration", "1s",
                       "--warmup", "0", "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "memcached refused 2,048-byte values during prefill" in lines[0]
    assert "object too large for cache" in lines[0]


def test_a_full_redis_refuses_the_prefill_in_one_line(tmp_path, cachemark) -> None:
    result = cachemark("run", "-t", "spawn:redis?maxmemory=1mb&maxmemory_policy=noeviction", "--keys", "5000",
                       "--value-size", "2048", "--duration", "1s", "--warmup", "0", "--no-calibrate", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "redis refused 2,048-byte values during prefill" in lines[0], result.stderr
    assert "maxmemory" in lines[0]


def _run_buggy_cache(tmp_path, set_many_body: str) -> subprocess.CompletedProcess:
    """Run against a Django cache class whose set_many is ``set_many_body`` (a bug of the user's code
    or ours: the worker's prefill raises)."""
    (tmp_path / "buggy_cache.py").write_text(
        "import os, signal\n"
        "from django.core.cache.backends.locmem import LocMemCache\n"
        "class BuggyCache(LocMemCache):\n"
        "    def set_many(self, data, timeout=None, version=None):\n"
        f"        {set_many_body}\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "cachemark", "run", "-t", "django://?BACKEND=buggy_cache.BuggyCache",
                           "--duration", "1s", "--warmup", "0", "--no-calibrate", "--workers", "2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)


def _assert_one_crash_line(result: subprocess.CompletedProcess, exception: str) -> Path:
    assert result.returncode == 70, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cachemark: crash (a bug in cachemark")
    assert exception in lines[0]
    return Path(lines[0].rsplit("traceback saved to ", 1)[1])


def test_a_bug_in_a_worker_is_a_crash_with_its_traceback_saved(tmp_path) -> None:
    saved = _assert_one_crash_line(_run_buggy_cache(tmp_path, "return len(None)"), "TypeError")
    try:
        assert "Traceback (most recent call last)" in saved.read_text() and "set_many" in saved.read_text()
        assert saved.stat().st_mode & 0o077 == 0  # private: it may hold paths and arguments
    finally:
        saved.unlink()


@pytest.mark.serial
def test_a_ctrl_c_while_a_worker_reports_its_crash_cuts_nothing_short(tmp_path) -> None:
    # The parent answers one worker's crash with SIGINT to every worker; one that is itself
    # crashing may get it while its report is being written. Here the exception's own text
    # sends that SIGINT, so it lands exactly there, every time.
    body = ("raise type('Boom', (TypeError,), {'__str__': "
            "lambda self: (os.kill(os.getpid(), signal.SIGINT), 'boom')[1]})()")
    saved = _assert_one_crash_line(_run_buggy_cache(tmp_path, body), "Boom: boom")
    saved.unlink()


def test_a_bug_in_the_cli_is_a_crash(tmp_path, monkeypatch, capsys) -> None:
    from cachemark import cli
    from cachemark.cli import session

    def broken(*args, **kwargs):
        raise KeyError("phases")

    monkeypatch.setattr(session, "run_experiment", broken)
    monkeypatch.setattr(sys, "argv", ["cachemark", "run", "-t", "memory://", "--no-calibrate"])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 70
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "crash (a bug in cachemark" in err and "KeyError" in err
    Path(err.rsplit("traceback saved to ", 1)[1]).unlink()


def test_a_saved_crash_report_is_the_whole_traceback_line_by_line(tmp_path, monkeypatch) -> None:
    """The traceback as Python printed it: newlines intact (not one line of literal ``\\n``), nothing cut
    from its middle however deep the stack (the frames there are where the bug is), secrets still hidden."""
    import tempfile

    from cachemark.crash import save_traceback

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    frames = "".join(f'  File "/app/module{i}.py", line {i}, in step{i}\n    step{i + 1}(url)\n' for i in range(100))
    details = ("Traceback (most recent call last):\n" + frames
               + "KeyError: 'redis://:hunter2secret@db.example:6379/0 \x1b[31m'\n")
    assert len(details) > 5000
    saved = save_traceback(details)
    assert saved is not None and saved.parent == tmp_path
    text = saved.read_text()
    lines = text.splitlines()
    assert len(lines) == len(details.splitlines()) == 202
    assert lines[0] == "Traceback (most recent call last):" and "…" not in text
    assert [line for line in lines if "in step" in line] == [line for line in details.splitlines() if "in step" in line]
    assert lines[-1].startswith("KeyError: 'redis://") and "db.example" in lines[-1]
    assert "hunter2secret" not in text and "\x1b" not in text and "\\x1b[31m" in lines[-1]  # escaped, as printed


@pytest.mark.parametrize("client", [None, "ruby-activesupport"])
@pytest.mark.alone
def test_a_run_killed_outright_takes_its_workers_with_it(tmp_path, spawn, client) -> None:
    """``kill -9`` of cachemark itself (the OOM killer, a user): its workers — Python clients, or the
    drivers of another stack's — stop loading the user's server at once, and nothing of the run
    stays — no process, no name in /dev/shm. (The workers used to run out their phase and then wait at
    the barrier: each held the fork server's "alive" pipe open, so the fork server, whose death was
    what they followed, never died.)"""
    import redis

    server = spawn("redis")
    url = server.url()
    if client:
        from driver_kit import needs_driver, with_client

        url = with_client(url, needs_driver(client))
    names_before = {name for name in os.listdir("/dev/shm") if name.startswith("sem.mp-")}
    proc = _start(["run", "-t", url, "--duration", "30s", "--warmup", "0", "--no-calibrate",
                   "--workers", "2", "--keys", "1000", "-o", "out.json"], tmp_path)
    _wait_for_ops(server)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    try:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        deadline = time.monotonic() + 5
        while client.info("clients")["connected_clients"] > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.info("clients")["connected_clients"] == 1, "the workers still hold their connections"
        served = client.info("stats")["total_commands_processed"]
        time.sleep(0.5)
        assert client.info("stats")["total_commands_processed"] - served < 10  # our own INFOs only
        client.close()
        while time.monotonic() < deadline:  # the fork server and resource tracker go once the workers have
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("processes of the killed run were still there after 5 s")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    left = {name for name in os.listdir("/dev/shm") if name.startswith("sem.mp-")} - names_before
    assert not left, f"left in /dev/shm: {sorted(left)}"


def _spawned_server(proc: subprocess.Popen, program: str = "redis-server") -> tuple[int, str]:
    """The pid and directory of the server (redis-server unless said) the run ``proc`` spawned."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listing = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
        for line in listing.splitlines():
            pid, ppid, args = line.split(None, 2)
            # setpriv and a shell start it (procs.dying_with_us): only once they became the server is it ours
            if int(ppid) == proc.pid and Path(args.split()[0]).name == program and "--version" not in args:
                with contextlib.suppress(FileNotFoundError):
                    cwd = Path(os.readlink(f"/proc/{pid}/cwd"))  # postgres works in <its dir>/data
                    server_dir = next(d for d in [cwd, *cwd.parents] if d.name.startswith("cachemark-"))
                    return int(pid), str(server_dir)
        time.sleep(0.1)
    raise AssertionError(f"no spawned {program} was seen")


@pytest.mark.parametrize(("kind", "program"), [("redis", "redis-server"), ("postgresql", "postgres")])
@pytest.mark.alone
def test_a_server_spawned_by_a_run_killed_outright_stops_too(tmp_path, kind, program) -> None:
    """``kill -9`` of cachemark: the server it spawned gets the SIGTERM cachemark can no longer
    send (a parent-death signal), instead of running on, unowned, on the user's machine — also
    postgres, which runs as nobody when we are root (a change of user clears a signal set before
    it); the directory it leaves is removed by the next cachemark process that makes one."""
    from cachemark import scratch

    proc = _start(["run", "-t", f"spawn:{kind}", "--duration", "30s", "--warmup", "0", "--no-calibrate",
                   "--workers", "1", "-o", "out.json"], tmp_path)
    try:
        server_pid, server_dir = _spawned_server(proc, program)
        assert f"cachemark-{kind}-" in server_dir
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 20
        while procs.running(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not procs.running(server_pid), f"the spawned {program} still runs"
        assert server_dir in scratch.sweep() and not Path(server_dir).exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_spawned_servers_and_save_partial_results(tmp_path, sig) -> None:
    proc = _start(["run", "-t", "spawn:redis", "--duration", "30s", "--warmup", "0", "--no-calibrate",
                   "--workers", "2", "-o", "out.json"], tmp_path)
    server_pid, server_dir = _spawned_server(proc)
    _wait_for_ops(LocalPort(server_pid), minimum=15_000)  # prefill (10,000 SETs) done, the timed phase on
    time.sleep(0.5)
    os.killpg(proc.pid, sig)  # the whole group, as a closed terminal or a CI cancel does
    sent = time.monotonic()
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert time.monotonic() - sent < 15  # 0.5-0.7 s beside a busy loop (21x); the 30-s run otherwise
    assert "Traceback" not in stderr
    assert not Path(f"/proc/{server_pid}").exists()  # stopped (and reaped) by cachemark
    assert not Path(server_dir).exists()
    run = _results(tmp_path / "out.json")["runs"][0]
    assert run["status"] == "interrupted"
    assert run["phases"] and run["phases"][0]["ops"]["get"]["count"] > 0


@pytest.mark.parametrize("scheme", ["file", "sqlite"])
def test_a_full_disk_is_one_line_and_earlier_results_are_kept(tmp_path, tiny_disk, cachemark, scheme) -> None:
    target = f"{scheme}://{tiny_disk}/cache" + (".db" if scheme == "sqlite" else "")
    result = cachemark("run", "-t", "memory://", "-t", target, "--value-size", "2000", "--duration", "1s",
                       "--warmup", "0", "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{scheme} ran out of space storing 2,000-byte values during prefill" in lines[0]
    assert "No space left on device" in lines[0] or "database or disk is full" in lines[0]
    runs = _results(tmp_path / "out.json")["runs"]
    assert [r["target"] for r in runs] == ["memory://"]  # the run before the full disk, saved
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.serial
def test_ctrl_c_at_any_moment_ends_in_one_line_and_130(tmp_path) -> None:
    """Start-up, calibration, server spawn, worker start, prefill, warm-up, timed phase:
    a Ctrl-C to the process group at each moment exits 130 promptly, never a traceback."""
    outcomes = []
    for delay in (0.3, 0.9, 1.4, 1.8, 1.9, 2.0, 2.2, 3.0):
        proc = _start(["run", "-t", "spawn:redis", "--duration", "3s", "--warmup", "1s", "--workers", "2",
                       "-o", "out.json"], tmp_path)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        sent = time.monotonic()
        _, stderr = proc.communicate(timeout=60)
        before_us = proc.returncode == 1 and "Traceback" in stderr and not re.search(r'File ".*/cachemark/', stderr)
        outcomes.append((delay, -signal.SIGINT if before_us else proc.returncode, round(time.monotonic() - sent, 1),
                         "Traceback" in stderr and not before_us))
        if "Traceback" in stderr:
            outcomes.append(stderr[-600:])  # shown by the assertion below
    # Known, rare (about 1 in 40 tries, on a loaded machine): the first moment can land while the
    # interpreter itself still starts, before any code of cachemark's runs: before Python's own
    # handler is in place the signal ends the process (-2, nothing printed), during runpy's imports
    # their traceback does (exit 1, counted as the same). Nothing exists yet to leave behind.
    ended = [o for o in outcomes if isinstance(o, tuple)]
    # each exit within 5 s of its Ctrl-C: 0.0-1.4 s beside a busy loop (3.6x)
    assert all(o[1] in (130, -signal.SIGINT) and o[2] < 5 and not o[3] for o in ended), str(outcomes)
    assert sum(o[1] == 130 for o in ended) >= len(ended) - 1, str(outcomes)


@pytest.mark.parametrize("url", ["spawn:memcached?max_item_size=1k&client=engine",
                                 "spawn:redis?maxmemory=1mb&maxmemory_policy=noeviction&client=engine"])
def test_a_refused_prefill_on_the_engine_is_one_line_too(tmp_path, cachemark, url) -> None:
    result = cachemark("run", "-t", url, "--value-size", "2048", "--duration", "1s", "--warmup", "0",
                       "--no-calibrate", "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused 2,048-byte values during prefill" in lines[0], result.stderr
    assert lines[0].startswith(f"cachemark: error: {url}: ")


CTRL_C_IN_A_DESTRUCTOR = """
import os, signal, sys, threading, time
from cachemark.interrupts import redeliver_interrupts
from cachemark.run import worker
if sys.argv[1] == "cli":
    sys.unraisablehook = redeliver_interrupts(sys.unraisablehook)
else:  # a worker process: its handler stops the work on the first Ctrl-C only
    worker._listen_for_interrupts()

class Slow:
    def __del__(self):  # as a library's finalizer, run by the garbage collector
        until = time.monotonic() + 0.5
        while time.monotonic() < until:
            pass

threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()  # lands in the __del__
try:
    doomed = [Slow(), Slow()]
    del doomed
    until = time.monotonic() + 3
    while time.monotonic() < until:
        time.sleep(0.01)
    print("lost")
except KeyboardInterrupt:
    print("interrupted")
"""


@pytest.mark.parametrize("where", ["cli", "worker"])
@pytest.mark.serial
def test_a_ctrl_c_swallowed_by_a_destructor_still_stops_the_run(where) -> None:
    """Python swallows an exception raised in a finalizer; cachemark delivers the Ctrl-C again
    (it was lost in a distributed run once: Dask's objects have finalizers). In a worker the
    parent's SIGINT landed once in importlib's weakref callback: a traceback on the terminal."""
    proc = subprocess.run([sys.executable, "-c", CTRL_C_IN_A_DESTRUCTOR, where], capture_output=True, text=True,
                          timeout=30, cwd=Path(__file__).resolve().parents[1])
    assert proc.stdout.strip() == "interrupted", proc.stdout + proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
