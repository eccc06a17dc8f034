"""The ``cachemark`` console script. It imports the command itself, so that a Ctrl-C while
the (heavy) imports still run ends like one during a run: one line, exit code 130.

Nothing has started yet during the imports (no server, no file), so a Ctrl-C then ends the
process at once: the handler below exits directly, rather than raising KeyboardInterrupt
inside whatever module was being imported (whose unwinding could end in a signal death).
"""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_importing(signum: int, frame: object) -> None:
    sys.stderr.write("cachemark: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def main() -> None:
    previous = signal.signal(signal.SIGINT, _interrupted_while_importing)
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:  # one that came before the handler was in place
        print("cachemark: interrupted", file=sys.stderr)
        sys.exit(130)
    finally:
        signal.signal(signal.SIGINT, previous)
    cli_main()
