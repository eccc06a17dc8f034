"""Each preset's own figure: the table its reference's author printed, computed from the results."""

from __future__ import annotations

from typing import Any

from .blocks import Block


def headline_blocks(document: dict[str, Any]) -> list[Block]:
    return []
