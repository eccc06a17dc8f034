"""The README's quick-start sample: `make run`'s output, regenerated from a real run, and its shape checked.

    python scripts/readme_sample.py           # run `cachemark run` at its defaults, write its output into README.md
    python scripts/readme_sample.py --check   # a short run; fail when its shape is not the README sample's

The shape is what does not change from run to run — the sections, the table's columns, its backends and ops
in order, the ranking's columns and groups — so the check fails when the output changes shape (a new column,
a section renamed or added, the ranking regrouped) and the sample is then due to be regenerated, never on
figures alone (tests/test_readme_sample.py runs the check).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START = "```text\ncalibration:"
WIDTH = "120"
PROGRESS = re.compile(r"^\S[^:]*: starting$|^\S.* · \w+: [\d,]+ ops · |^\S[^:]*: ok · [\d,]+ ops in |"
                      r"^\d+ of \d+ runs done")  # the sample's terminal width: every table row whole


def readme_sample(text: str | None = None) -> str:
    """The sample block of the README (without its fences)."""
    text = README.read_text() if text is None else text
    start = text.index(START) + len("```text\n")
    return text[start:text.index("\n```", start) + 1]


def run(*args: str) -> str:
    """`cachemark run` with ``args``, in a scratch directory: its standard output (progress goes to stderr)."""
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([sys.executable, "-m", "cachemark", "run", *args], cwd=scratch, capture_output=True,
                              text=True, env={**os.environ, "COLUMNS": WIDTH}, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"cachemark run exited {done.returncode}: {done.stderr.strip()[-500:]}")
    # a terminal's progress lines are redrawn in place: the sample keeps what stays on the screen
    kept = [line.rstrip() for line in done.stdout.splitlines() if not PROGRESS.search(line)]
    return "\n".join(kept) + "\n"


def shape(text: str) -> list[str]:
    """What a run's output keeps from run to run: section lines, table columns, (backend, op) rows, the ranking's
    columns and op groups."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[┃│]", line) if c.strip()]
        if line.startswith("calibration:"):
            out.append("calibration")
        elif line.startswith(("cachemark: ", "What this means", "Warnings that change", "Factor:")):
            out.append(line.split(":")[0] if ":" in line else line.strip())
        elif line.startswith("Workload:"):
            out.append("Workload")
        elif line.startswith("results: "):
            out.append("results")
        elif line.startswith("┃"):
            out.append("columns: " + " | ".join(cells))
        elif line.startswith("│") and len(cells) > 2:
            out.append(f"row: {cells[0]} {cells[1]}")
        elif line.startswith(" op ") and "fastest" in line:
            out.append("ranking: " + " | ".join(re.split(r"\s{2,}", line.strip())))
        elif re.match(r"^ \w+( · \w+)?\s{2,}\S", line):
            out.append("group: " + re.split(r"\s{2,}", line.strip())[0])
    return out


def main() -> None:
    if "--check" in sys.argv[1:]:
        fresh, sample = shape(run("--duration", "0.5s", "--warmup", "0")), shape(readme_sample())
        if fresh != sample:
            missing = [s for s in sample if s not in fresh]
            new = [s for s in fresh if s not in sample]
            raise SystemExit("the README's sample is not the output's shape any more (run "
                             f"`python scripts/readme_sample.py`): only in the README {missing}; only now {new}")
        print("README sample: same shape as a run's output")
        return
    output = run()
    text = README.read_text()
    README.write_text(text.replace(readme_sample(text), output, 1))
    print(f"README.md: sample regenerated ({len(output.splitlines())} lines)")


if __name__ == "__main__":
    main()
