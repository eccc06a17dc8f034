"""Reporting a crash (a bug of ours): one line for the user, the traceback kept in a file.

A traceback is noise to someone benchmarking a cache, but it is what we need to fix the
bug; so it goes to a private file (mode 0600: it may hold paths and arguments) and the
user is told where it is and that it is ours, with exit code 70.
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from pathlib import Path

from .target import redact_text
from .textfile import one_line


def save_traceback(details: str) -> Path | None:
    """Write ``details`` to a new file in the temp directory; None if we cannot. The whole traceback,
    line by line as Python printed it (the frames in its middle are where a bug is), each line with
    its secrets redacted and its control characters escaped."""
    try:
        fd, name = tempfile.mkstemp(prefix=f"cachemark-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(redact_text(details, limit=None, lines=True) + "\n")
        return Path(name)
    except OSError:
        return None


def crash_line(message: str, details: str | None = None) -> str:
    """``cachemark: crash (a bug in cachemark): …; traceback saved to …`` for stderr."""
    saved = save_traceback(details if details is not None else traceback.format_exc())
    where = f"traceback saved to {saved}" if saved else "the traceback could not be saved"
    return f"cachemark: crash (a bug in cachemark, please report it): {one_line(redact_text(message))}; {where}"
