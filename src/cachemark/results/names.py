"""How a run is named wherever it is shown: one function, for the terminal, the progress
line, Markdown, HTML and CSV alike (they used to name the same run differently)."""

from __future__ import annotations

from typing import Any


def sweep_key(run: dict[str, Any]) -> str:
    """``value_size=1024`` (several swept fields joined by ``,``); empty when not a sweep."""
    sweep = run.get("sweep") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(sweep.items()))


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
