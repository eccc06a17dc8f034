"""The README's quick-start sample is `make run`'s output as it is now: a short real run must have the
sample's shape (scripts/readme_sample.py regenerates the sample when it does not)."""

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
    assert shape(regrouped) != shape(sample)
