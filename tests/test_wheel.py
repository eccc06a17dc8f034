"""The wheel: built as `make dist` builds it, installed into a clean virtualenv with no Rust toolchain on
PATH, and run — the way a user who never cloned the repository gets cachemark (`pipx install`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# a PATH with the system's tools and none of the Rust toolchain's (rustup puts cargo in ~/.cargo/bin)
NO_RUST_PATH = "/usr/local/bin:/usr/bin:/bin"


def test_the_wheel_installs_and_runs_without_a_rust_toolchain(tmp_path):
    maturin = Path(sys.executable).with_name("maturin")
    if not maturin.exists():
        pytest.skip("maturin is not installed here (make test installs it)")
    # for this interpreter, as `make setup` built the engine (`python -m pip install -e .`): pyo3's build
    # script reruns when the interpreter's path changes, and the whole engine with it (~2 min)
    built = subprocess.run([str(maturin), "build", "--release", "-i", sys.executable, "--out", str(tmp_path / "dist")],
                           cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("cachemark-*.whl")
    assert "abi3" in wheel.name and "linux" in wheel.name  # one wheel for every CPython ≥ 3.11

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARGO", "RUST", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = NO_RUST_PATH
    assert shutil.which("cargo", path=NO_RUST_PATH) is None and shutil.which("rustc", path=NO_RUST_PATH) is None
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=300)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                                str(wheel)], capture_output=True, text=True, env=env, timeout=600)
    assert installed.returncode == 0, installed.stderr[-3000:]
    cachemark = str(venv / "bin" / "cachemark")
    work = tmp_path / "work"
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([cachemark, *args], cwd=work, capture_output=True, text=True, env=env, timeout=300)

    version = run("--version")
    assert version.returncode == 0 and version.stdout.split()[-1] == "0.1.0", version.stdout + version.stderr
    targets = run("targets")
    assert targets.returncode == 0 and "memory://" in targets.stdout, targets.stderr
    measured = run("run", "-t", "memory://", "--duration", "1s", "--warmup", "0", "--no-calibrate", "-o", "out.json")
    assert measured.returncode == 0, measured.stderr
    document = json.loads((work / "out.json").read_text())
    assert document["runs"][0]["phases"][0]["ops"]["get"]["count"] > 1000
    # the native engine came in the wheel: imported from the virtualenv, not from this checkout
    engine = subprocess.run([str(venv / "bin" / "python"), "-c", "import cachemark._engine as e; print(e.__file__)"],
                            cwd=work, capture_output=True, text=True, env=env, timeout=60)
    assert engine.returncode == 0 and str(venv) in engine.stdout, engine.stderr
