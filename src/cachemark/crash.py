"""Reporting a crash (a bug of ours): one line for the user, the traceback kept in a file.

A traceback is noise to someone benchmarking a cache, but it is what we need to fix the
bug; so it goes to a private file (mode 0600: it may hold paths and arguments), written as
every file cachemark writes is (outfile.py: whole or not at all), and the user is told where
it is and that it is ours, with exit code 70.
"""

from __future__ import annotations

import secrets
import tempfile
import time
import traceback
from pathlib import Path

from .errors import UserError
from .outfile import write_text
from .target import redact_text
from .textfile import one_line


def save_traceback(details: str) -> Path | None:
    """Write ``details`` to a new file in the temp directory; None if we cannot. The whole traceback,
    line by line as Python printed it (the frames in its middle are where a bug is), each line with
    its secrets redacted and its control characters escaped. The name is new (a time and a random
    part) and the writer's temp file is 0600, which the renamed file keeps."""
    name = f"cachemark-crash-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}.txt"
    try:
        return write_text(Path(tempfile.gettempdir()) / name, redact_text(details, limit=None, lines=True) + "\n",
                          "a crash report")
    except (UserError, OSError):
        return None


def crash_line(message: str, details: str | None = None) -> str:
    """``cachemark: crash (a bug in cachemark): …; traceback saved to …`` for stderr."""
    saved = save_traceback(details if details is not None else traceback.format_exc())
    where = f"traceback saved to {saved}" if saved else "the traceback could not be saved"
    return f"cachemark: crash (a bug in cachemark, please report it): {one_line(redact_text(message))}; {where}"
