"""How cachemark says a span of time and a number of bytes, wherever it says them."""

from __future__ import annotations


def fmt_span(seconds: float) -> str:
    """``45 s``, ``3 min 20 s``, ``1 h 5 min``: as a person says it (never to the tenth)."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {rest} s" if rest and minutes < 10 else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def fmt_bytes(value: float) -> str:
    """``25.1 MiB``: binary units, as ``maxmemory`` and ``-m`` count them."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f} B"
