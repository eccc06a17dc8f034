"""The ``cachemark`` console script. It imports the command itself, so that a Ctrl-C while
the (heavy) imports still run ends like one during a run: one line, exit code 130."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        print("cachemark: interrupted", file=sys.stderr)
        sys.exit(130)
    cli_main()
