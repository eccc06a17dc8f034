"""How a run, and an op of a phase, are named wherever they are shown: one function each, for
the terminal, the progress line, Markdown, HTML and CSV alike (they used to name the same run
differently)."""

from __future__ import annotations

from typing import Any


def sweep_key(run: dict[str, Any]) -> str:
    """``value_size=1024`` (several swept fields joined by ``,``); empty when not a sweep."""
    sweep = run.get("sweep") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(sweep.items()))


def op_label(phase: str, op: str, many_phases: bool = True) -> str:
    """An op as every table names it: ``write:set`` where phases need telling apart, but ``set``, not
    ``set:set``, in a phase named after its op (a bare name is never ambiguous: others hold a colon)."""
    return f"{phase}:{op}" if many_phases and phase != op else op


def run_name(run: dict[str, Any]) -> str:
    """The name of a run wherever it is shown (terminal, progress, Markdown, HTML, CSV):
    label, network profile, sweep point, repeat (counted from 1), and "(emulator)" for a
    server whose absolute latency says nothing about the real service."""
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
