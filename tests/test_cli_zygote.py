"""The tests' command line (cli_zygote.py): a command forked from the zygote prints, exits and fails as the
same command in a fresh ``python -m cachemark`` does, with the environment of its own call."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

import cli_zygote
from conftest import run_cli


@pytest.mark.parametrize("args", [("--version",), ("targets",), ("run", "-t", "nosuch://x"),
                                  ("report", "missing.json"), ("run", "--duration", "soon")])
def test_a_forked_command_is_the_fresh_one(tmp_path, args) -> None:
    forked, fresh = run_cli(*args, cwd=tmp_path), run_cli(*args, cwd=tmp_path, fresh=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_a_run_writes_where_it_was_started_and_exits_as_it_should(tmp_path) -> None:
    result = run_cli("run", "-t", "memory://", "--duration", "0.2s", "--warmup", "0", "--no-calibrate",
                     "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.json").exists() and "results: out.json" in " ".join(result.stdout.split())


def test_each_command_has_the_environment_of_its_call(tmp_path) -> None:
    """The width of a table follows the COLUMNS each call gives, not the one the zygote was started with."""
    def widest(columns: str) -> int:
        done = cli_zygote.run(["presets"], cwd=str(tmp_path), env={**os.environ, "COLUMNS": columns}, timeout=60)
        assert done.returncode == 0, done.stderr
        return max(len(line) for line in done.stdout.splitlines())

    assert widest("60") <= 60 < widest("200")
    assert widest("60") <= 60  # and back


def test_a_command_past_its_timeout_is_killed_as_subprocess_run_does(tmp_path) -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli("run", "-t", "memory://", "--duration", "60s", "--warmup", "0", "--no-calibrate", cwd=tmp_path,
                timeout=3)
    assert time.monotonic() - started < 30
    assert run_cli("--version", cwd=tmp_path).returncode == 0  # the zygote serves the next one
