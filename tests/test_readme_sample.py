"""The README's quick-start sample is `make run`'s output as it is now: a short real run must have the
sample's shape (scripts/readme_sample.py regenerates the sample when it does not); and the README lists
every package `make run` installs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_sample_has_the_shape_of_a_run_s_output():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_sample.py"), "--check"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr or done.stdout


def test_the_shape_tells_a_regrouped_ranking_apart():
    sys.path.insert(0, str(ROOT / "scripts"))
    from readme_sample import readme_sample, shape

    sample = readme_sample()
    assert "columns: backend | op | count | hit % | ops/s | p50 | p90 | p99 | p99.9 | max | errors" in shape(sample)
    regrouped = sample.replace(" get · shared ", " get          ", 1)
    assert regrouped != sample and shape(regrouped) != shape(sample)


def test_the_readme_lists_every_package_make_run_installs():
    makefile = (ROOT / "Makefile").read_text()
    block = makefile[makefile.index("RUN_PACKAGES  :="):makefile.index("TEST_PACKAGES")]
    packages = block.replace("RUN_PACKAGES  :=", "").replace("\\", " ").split()
    readme = (ROOT / "README.md").read_text()
    assert packages and [p for p in packages if f"`{p}`" not in readme] == []


def test_every_preset_has_a_docs_page():
    from cachemark.presets import preset_names

    missing = [name for name in preset_names() if not (ROOT / "docs" / "presets" / f"{name}.md").exists()]
    assert missing == []
