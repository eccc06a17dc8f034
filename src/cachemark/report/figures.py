"""How a figure is written: a latency, a rate, a factor, a percentage, the same in every output.

Every table, headline, verdict and export prints its numbers through these, so one latency
reads the same in the terminal, the Markdown and the HTML. Pure functions of a number,
importing nothing of the report: any module may use them.
"""

from __future__ import annotations


def fmt_latency(us: float | None) -> str:
    if us is None:
        return "-"
    if us < 1:
        return f"{us * 1000:.0f}ns"
    if us < 1000:
        return f"{us:.3g}µs"
    if us < 1_000_000:
        return f"{us / 1000:.3g}ms"
    return f"{us / 1_000_000:.3g}s"


def fmt_factor(x: float) -> str:
    """A factor's digits, wherever one is printed (the verdict, a headline's "× fastest"): 2 decimals
    under 10×, 1 under 100×, none above (``3.14``, ``31.4``, ``1,314``), so one factor reads the same
    in both places."""
    if x < 10:
        return f"{x:.2f}"
    if x < 100:
        return f"{x:.1f}"
    return f"{x:,.0f}"


def fmt_rate(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.2f}M"
    if value >= 10_000:
        return f"{value / 1000:.1f}k"
    return f"{value:,.0f}"


def fmt_percent(pct: float) -> str:
    """A percentage with enough digits to tell 0.4 % from 0.04 % (memory vs a network hop)."""
    if pct >= 10:
        return f"{pct:.0f}%"
    if pct >= 1:
        return f"{pct:.1f}%"
    return f"{pct:.2g}%"


def fmt_memory(value: float | None) -> str:
    """A byte count as every report prints a server's memory: ``25.1 MiB`` (binary units), ``-`` when unknown."""
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(value)
