"""How a run, and an op of a phase, are named wherever they are shown: one function each, for
the terminal, the progress line, Markdown, HTML and CSV alike (they used to name the same run
differently). They take the typed :class:`~.schema.Run` (``run.name``) or a run's dict as saved."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .schema import Run

ENGINE_CLIENT = "cachemark-engine"  # the client a run through cachemark's own engine names


def sweep_key(run: Run | dict[str, Any]) -> str:
    """``value_size=1024`` (several swept fields joined by ``,``); empty when not a sweep."""
    sweep = (run.get("sweep") if isinstance(run, dict) else run.sweep) or {}
    return ",".join(f"{k}={v}" for k, v in sorted(sweep.items()))


def op_label(phase: str, op: str, many_phases: bool = True) -> str:
    """An op as every table names it: ``write:set`` where phases need telling apart, but ``set``, not
    ``set:set``, in a phase named after its op (a bare name is never ambiguous: others hold a colon)."""
    return f"{phase}:{op}" if many_phases and phase != op else op


def run_name(run: Run | dict[str, Any]) -> str:
    """The name of a run wherever it is shown (terminal, progress, Markdown, HTML, CSV):
    label, network profile, sweep point, repeat (counted from 1), and "(emulator)" for a
    server whose absolute latency says nothing about the real service."""
    if not isinstance(run, dict):
        return _typed_name(run)
    name = run["label"]
    profile = (run.get("network") or {}).get("profile")
    if profile:
        name += f" [{profile}]"
    if run.get("sweep"):
        name += f" [{sweep_key(run)}]"
    if run.get("repeat") is not None:
        name += f" #{run['repeat'] + 1}"
    server = run.get("server") or {}
    if any(s.get("emulator") for s in server.get("servers", [server])):
        name += " (emulator)"
    return name


def _typed_name(run: Run) -> str:
    name = run.label
    if run.profile:
        name += f" [{run.profile}]"
    if run.sweep:
        name += f" [{sweep_key(run)}]"
    if run.repeat is not None:
        name += f" #{run.repeat + 1}"
    if run.server is not None and is_emulator(run):
        name += " (emulator)"
    return name


def is_emulator(run: Run) -> bool:
    """The run's server (or one of its servers) is an emulator: its absolute latency says little."""
    server = run.server
    if server is None:
        return False
    if server.servers is not None:
        return any(s.get("emulator") for s in server.servers)
    return bool(server.emulator)
