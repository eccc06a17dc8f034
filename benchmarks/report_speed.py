"""How long ``cachemark report`` takes on a 50-run results file (target: under 3 s).

Builds the file from real runs: ``memory://`` and ``spawn:redis`` (when redis-server is
installed) are run here for ``--seconds`` each, and their run entries are replicated —
relabelled ``memory-07`` and so on — until there are ``--runs`` runs. Then it times the
report command in-process (``cachemark.cli.report_commands.report``) for every format and,
if the installed ``cachemark`` CLI has a ``report`` command, the CLI as a subprocess too
(which includes interpreter start-up). Prints the configuration, the size of the file
and the best of ``--repeat`` timings; exits 1 if the HTML report takes 3 s or more.

Example:  python benchmarks/report_speed.py --runs 50 --seconds 1
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cachemark.cli.report_commands import report
from cachemark.measure.fingerprint import fingerprint
from cachemark.results import new_document, write_atomic
from cachemark.run.runner import run_target
from cachemark.spec import Experiment, Workload

LIMIT_S = 3.0


def build(runs: int, seconds: float, path: Path) -> dict:
    workload = Workload(duration=seconds, warmup=0, workers=2, keys=10_000)
    real = []
    for url in ("memory://", "spawn:redis"):
        outcome = run_target(url, workload)
        if outcome.status == "ok":
            real.append(outcome.to_json())
        else:
            print(f"  {url}: {outcome.status} ({outcome.reason})")
    if not real:
        sys.exit("no real run succeeded")
    targets = ["memory://", "spawn:redis"]
    document = new_document(Experiment(name="report-speed", targets=targets, workload=workload)
                            .model_dump(mode="json"), fingerprint(None))
    for i in range(runs):
        run = copy.deepcopy(real[i % len(real)])
        run["label"] = f"{run['label']}-{i:02d}"
        document["runs"].append(run)
    write_atomic(path, document)
    return document


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of each real run")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cachemark-report-speed-") as tmp:
        results = Path(tmp) / "results.json"
        document = build(args.runs, args.seconds, results)
        ops = sum(len(p["ops"]) for r in document["runs"] for p in r["phases"])
        print(f"config: {args.runs} runs ({ops} run×phase×op rows) replicated from real runs of "
              f"{args.seconds:g} s; results file {results.stat().st_size / 1e6:.1f} MB; best of {args.repeat}")
        worst = 0.0
        for fmt, suffix in (("html", ".html"), ("markdown", ".md"), ("csv", ".csv"), ("json", ".summary.json")):
            out = Path(tmp) / f"out{suffix}"
            with contextlib.redirect_stderr(io.StringIO()):  # the "wrote <path>" notes
                seconds = best_of(args.repeat, lambda fmt=fmt, out=out: report(results, out, fmt, None))
            print(f"  report --format {fmt:<8} in-process: {seconds:6.3f} s  ({out.stat().st_size / 1e3:.0f} kB)")
            if fmt == "html":
                worst = seconds
        cli = shutil.which("cachemark") or str(Path(sys.executable).parent / "cachemark")
        help_text = subprocess.run([cli, "--help"], capture_output=True, text=True).stdout
        if " report " in help_text:
            out = Path(tmp) / "cli.html"
            seconds = best_of(args.repeat, lambda: subprocess.run([cli, "report", str(results), "-o", str(out)],
                                                                  check=True, capture_output=True))
            print(f"  cachemark report (CLI, html, incl. start-up): {seconds:6.3f} s")
            worst = max(worst, seconds)
        else:
            print("  (the cachemark CLI has no report command registered yet: timed in-process only)")
    verdict = "ok" if worst < LIMIT_S else "TOO SLOW"
    print(f"html report: {worst:.3f} s vs limit {LIMIT_S:.0f} s — {verdict}")
    return 0 if worst < LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
