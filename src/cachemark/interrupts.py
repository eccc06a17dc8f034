"""Ctrl-C that Python swallows: a KeyboardInterrupt raised while a destructor or a weakref
callback runs (redis-py's ``Pipeline.__del__``, Dask's futures, importlib dropping a module
lock) is printed as "Exception ignored in …" with a traceback, and lost. The CLI and every
worker process install :func:`redeliver_interrupts` as ``sys.unraisablehook``."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any


def redeliver_interrupts(default: Any, rearm: Callable[[], None] | None = None) -> Any:
    """A hook that delivers a swallowed Ctrl-C again, a moment later, and passes anything else
    to ``default``. Not from the hook itself: a signal raised there is handled before the hook
    returns, and Python swallows an exception of the hook as well. ``rearm`` runs first: a
    handler that acts on the first Ctrl-C only must take the next one as that first."""

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            if rearm is not None:
                rearm()
            again = threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGINT))
            again.daemon = True
            again.start()
            return
        default(unraisable)

    return hook
