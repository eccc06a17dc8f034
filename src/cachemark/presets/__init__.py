"""Named experiments: one TOML file per preset in this directory.

Each preset reproduces a published cache benchmark (see docs/presets/) or a common
question; ``cachemark run <name>`` runs it and flags override any of its fields.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).iterdir() if p.name.endswith(".toml"))


def load_preset(name: str) -> dict[str, Any]:
    with resources.files(__package__).joinpath(f"{name}.toml").open("rb") as f:
        return tomllib.load(f)


def describe_presets() -> list[tuple[str, str]]:
    return [(name, load_preset(name).get("description", "")) for name in preset_names()]
