"""What the workers' fork server imports before it forks any: Ctrl-C, SIGTERM and SIGHUP
ignored first, then the worker module (the run's adapters follow: forkserver.py).

A terminal's Ctrl-C reaches the fork server too (same process group). The fork server
ignores it once it is up, but only after its imports; one arriving while it imports numpy
and the backends would end it with a traceback. Each worker restores the default handler
for itself (`worker_main`), and the parent forwards Ctrl-C to the workers it started.
SIGTERM and SIGHUP (``timeout``, a CI cancel, a closed terminal: often sent to the whole
process group) stay ignored in workers: the parent turns them into the Ctrl-C path, so
the workers report what they measured instead of dying with it.
"""

import signal

for _name in ("SIGINT", "SIGTERM", "SIGHUP"):
    signal.signal(getattr(signal, _name), signal.SIG_IGN)

import cachemark.run.worker  # noqa: E402, F401 — the point of this module
