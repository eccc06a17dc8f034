"""What a run means: the workload in a sentence, the ranking per op, and the warnings."""

from __future__ import annotations

from typing import Any

from .blocks import Block


def verdict_blocks(document: dict[str, Any]) -> list[Block]:
    return []
