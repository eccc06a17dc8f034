"""Where a value enters, the range its final consumer accepts: one check, one line, exit 2.

A value that passes a parser can still fail deeper (the proxy's 600 s delay limit, a
u64 field in the engine, a float product that overflows). The limits live here, beside
the check that applies them, so every command refuses the same value the same way
before any work starts.
"""

from __future__ import annotations

import math

from .errors import SpecError

# The network proxy (engine/proxy/src/config.rs) refuses a delay beyond 600 s per direction.
PROXY_MAX_DELAY_US = 600e6
# A bandwidth the proxy holds in a u64 of bits/s; beyond 10 Tbit/s is no cap at all in practice.
MAX_BANDWIDTH_BPS = 10**13
# Smallest and largest rates (ops/s) that stay finite through every division and product.
MIN_RATE = 1e-6
MAX_RATE = 1e12


def check_range(what: str, value: float, lo: float, hi: float, *, lo_open: bool = False, text: str = "") -> float:
    """``value`` itself when finite and within [lo, hi] (or (lo, hi] with ``lo_open``), else SpecError."""
    shown = text or repr(value)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise SpecError(f"bad {what} {shown}: must be a finite number")
    if value < lo or (lo_open and value == lo) or value > hi:
        low = f"more than {lo:g}" if lo_open else f"at least {lo:g}"
        raise SpecError(f"bad {what} {shown}: must be {low} and at most {hi:g}")
    return value


__all__ = ["MAX_BANDWIDTH_BPS", "MAX_RATE", "MIN_RATE", "PROXY_MAX_DELAY_US", "check_range"]
