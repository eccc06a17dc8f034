"""The errors a user can cause, and how they reach the terminal.

Anything raised as a :class:`UserError` (or subclass) is printed by the CLI as one
line and ends the process with exit code 2; everything else is a bug and keeps its
traceback. Subclasses exist so callers can react to a kind (e.g. skip a backend
whose server is not installed) without parsing messages.
"""


class UserError(Exception):
    """A problem with the user's input or environment, explained in one line."""


class SpecError(UserError):
    """An experiment, workload or target that does not validate."""


class BackendUnavailable(UserError):
    """A backend that cannot be reached, authenticated to, or opened."""


class BackendMissing(UserError):
    """A backend whose client library or server binary is not installed (skippable)."""


class UnsupportedOp(UserError):
    """A workload asks for an operation the backend can neither do nor emulate."""


# Exit codes of the ``cachemark`` command (docs/architecture.md lists them for users).
EXIT_OK = 0
EXIT_RUN_FAILED = 1  # the experiment ran, but a run failed (server died, errors, dropped writes)
EXIT_REGRESSION = 1  # compare --fail-on: a figure moved beyond its rule and the noise
EXIT_USAGE = 2  # bad input or environment: one line on stderr (UserError)
EXIT_CRASH = 70  # a bug of ours (sysexits EX_SOFTWARE): one line, the traceback saved to a file
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM or SIGHUP: partial results saved, servers stopped


class PrefillFailed(UserError):
    """The server refused the prefill (value too large, out of memory, disk full): one line."""


class Crash(Exception):
    """A bug of ours, in a worker process or in the CLI: reported as a crash (exit 70).

    ``details`` is the traceback (from the process where it happened), which the CLI
    saves to a file rather than printing: the user gets one line and a path to report.
    """

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


# Exceptions that mean our code is wrong, not that a server or the input is: a client
# library's failure (ConnectionError, OSError, its own error classes) is something to
# measure or to explain to the user; these are bugs, wherever they are raised.
BUG_TYPES = (AssertionError, AttributeError, IndexError, KeyError, NameError, TypeError, ZeroDivisionError,
             RecursionError, NotImplementedError)


def is_bug(exc: BaseException) -> bool:
    return isinstance(exc, BUG_TYPES)
