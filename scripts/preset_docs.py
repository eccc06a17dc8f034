"""Fresh figures for docs/presets/<name>.md: run each preset at its defaults and print its Markdown report.

The pages themselves are written by hand — the reference's own table beside cachemark's
headline, and a paragraph on whether the conclusion holds here — so this never overwrites
them: it writes results/preset-<name>.md (the exact command, the wall time it took, and the
Markdown report of that run) to paste from. Every preset's defaults finish in at most three
minutes on a 2-core machine; a preset's `full_scale` names the command for the reference's own
scale. Numbers are this machine's, on the day it ran.

    python scripts/preset_docs.py [name ...]
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(name: str) -> Path:
    from cachemark.presets import load_preset

    preset = load_preset(name)
    results = ROOT / "results" / f"preset-{name}.json"
    command = ["cachemark", "run", name, "-o", str(results.relative_to(ROOT))]
    started = time.monotonic()
    ran = subprocess.run([sys.executable, "-m", "cachemark", *command[1:]], cwd=ROOT, stdout=subprocess.DEVNULL)
    took = time.monotonic() - started
    if ran.returncode not in (0, 1):  # 1: a run's figures are not a working cache's (the dummy cache): shown
        raise SystemExit(f"{name}: cachemark exited {ran.returncode}")
    tables = subprocess.run([sys.executable, "-m", "cachemark", "report", str(results), "-f", "markdown", "-o", "-"],
                            cwd=ROOT, capture_output=True, text=True).stdout
    if preset.get("sweep"):  # reference 001's end product: alarm thresholds from the sweep
        thresholds = subprocess.run(
            [sys.executable, "-m", "cachemark", "thresholds", str(results), "--levels", "100,90,80",
             "--metric", "bandwidth", "--format", "cloudformation", "-o", "-"],
            cwd=ROOT, check=True, capture_output=True, text=True).stdout
        tables += ("\n### Thresholds\n\n`cachemark thresholds results/preset-" + name + ".json --levels 100,90,80 "
                   "--metric bandwidth --format cloudformation`:\n\n```yaml\n" + thresholds + "```\n")
    page = ROOT / "results" / f"preset-{name}.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(
        f"# Preset `{name}`\n\n{preset.get('description', '')}\n\n"
        f"Produced on {dt.date.today().isoformat()} on this project's 2-core VM with:\n\n"
        f"```sh\n{' '.join(command)}\n```\n\n"
        f"It took {took:.0f} s (wall time, the whole command).\n\n"
        "Absolute figures are this machine's; compare backends within one table, and re-run it "
        "where your application runs.\n\n" + tables
    )
    return page


def main() -> None:
    from cachemark.presets import preset_names

    for name in sys.argv[1:] or preset_names():
        started = time.monotonic()
        page = run(name)
        print(f"{name}: {page.relative_to(ROOT)} ({time.monotonic() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
