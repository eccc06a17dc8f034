"""Processes we start die with us: the parent-death signal through setpriv (``procs.dying_with_us``),
checked by killing their parent outright, as ``kill -9`` or the OOM killer would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachemark import procs

pytestmark = pytest.mark.skipif(procs._setpriv() is None, reason="no setpriv with --pdeathsig")

# A parent of our own that starts ``argv`` as dying_with_us makes it, says its pid, and waits to be killed.
_PARENT = """
import json, subprocess, sys, time
from cachemark import procs
child = subprocess.Popen(procs.dying_with_us(json.loads(sys.argv[1]), 15))
print(child.pid, flush=True)
time.sleep(60)
"""


def _child_of_a_killed_parent(argv: list[str]) -> int:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, json.dumps(argv)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}/comm").read_text().strip() != "sleep":  # past setpriv and the check
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.01)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    while procs.running(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    return child


def test_a_child_gets_its_signal_when_its_parent_is_killed_outright() -> None:
    child = _child_of_a_killed_parent(["sleep", "30"])
    assert not procs.running(child), "the child outlived its parent"


@pytest.mark.skipif(os.geteuid() != 0, reason="changing user needs root")
def test_a_child_that_changes_user_gets_its_signal_too() -> None:
    """As spawn:postgresql runs as root: a server started as nobody through setpriv. A signal set
    before the change of user would be cleared by it (the child would outlive us)."""
    child = _child_of_a_killed_parent(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "30"])
    assert not procs.running(child), "the child outlived its parent"


def test_a_child_whose_parent_is_not_the_one_that_made_it_does_not_run(tmp_path) -> None:
    """Our death between the fork and setpriv setting the signal leaves the child with another parent
    (init): it must not start what it was given, which nobody would ever stop."""
    marker = tmp_path / "ran"
    argv = procs.dying_with_us(["touch", str(marker)], signal.SIGTERM)
    through_another = subprocess.run([sys.executable, "-c", "import subprocess, sys; "
                                      "sys.exit(subprocess.run(sys.argv[1:]).returncode)", *argv])
    assert through_another.returncode == 125 and not marker.exists()
    assert subprocess.run(argv).returncode == 0 and marker.exists()
