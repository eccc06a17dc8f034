"""Named experiments: one TOML file per preset in this directory.

Each preset reproduces a published cache benchmark (see docs/presets/) or a common
question; ``cachemark run <name>`` runs it and flags override any of its fields. Presets
are read like any experiment file (:func:`cachemark.spec.parse_toml`), so they meet the
same rules: UTF-8, not empty, only the experiment's fields.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from ..errors import SpecError


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).iterdir() if p.name.endswith(".toml"))


def load_preset(name: str) -> dict[str, Any]:
    from ..spec import parse_toml

    if name not in preset_names():  # never a path: "../x" must not reach the package's files
        raise SpecError(f"no preset named {name!r}; presets: {', '.join(preset_names())}")
    text = resources.files(__package__).joinpath(f"{name}.toml").read_bytes().decode("utf-8")
    return parse_toml(text, f"preset {name}")


def describe_presets() -> list[tuple[str, str]]:
    return [(name, str(load_preset(name).get("description", ""))) for name in preset_names()]
