"""Fresh figures for docs/presets/<name>.md: run each preset here and print its Markdown report.

The pages themselves are written by hand — the reference's own table beside cachemark's
headline, and a paragraph on whether the conclusion holds here — so this never overwrites
them: it writes results/preset-<name>.md (the exact command, with any scale-down used so
the whole set runs in minutes on a 2-core machine, and the Markdown report of that run) to
paste from. Numbers are this machine's, on the day it ran.

    python scripts/preset_docs.py [name ...]
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Flags that keep a preset short here; an empty list runs it exactly as shipped.
SCALE = {
    "default": [],
    "rails-local-vs-remote": [],
    "django-s3-vs-memcached": [],
    "magento-clean-by-tag": ["--ops", "20000"],
    "diskcache-django": ["--ops", "40000", "--warmup-ops", "8008"],
    "redis-bandwidth-sweep": ["--duration", "4s"],
}


def run(name: str) -> Path:
    from cachemark.presets import load_preset

    preset = load_preset(name)
    results = ROOT / "results" / f"preset-{name}.json"
    command = ["cachemark", "run", name, *SCALE.get(name, []), "-o", str(results.relative_to(ROOT))]
    subprocess.run([sys.executable, "-m", "cachemark", *command[1:]], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
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
        "Absolute figures are this machine's; compare backends within one table, and re-run it "
        "where your application runs.\n\n" + tables
    )
    return page


def main() -> None:
    from cachemark.presets import preset_names

    for name in sys.argv[1:] or preset_names():
        print(f"{name}: {run(name).relative_to(ROOT)}", flush=True)


if __name__ == "__main__":
    main()
