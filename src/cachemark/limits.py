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


# `cachemark size` on a drawn stream: peak memory measured on this machine (2×10⁶ keys and requests:
# 159 MB with lru alone, 479 MB with lru,fifo,sieve; 115 MB at 2×10⁵), as a base plus bytes per
# object of the larger of keys and requests, for the exact LRU pass and for each simulated policy.
SIZE_BASE_BYTES = 130e6
SIZE_LRU_BYTES_PER = 30.0
SIZE_SIMULATED_BYTES_PER = 85.0


def size_memory_estimate(keys: int, requests: int, simulated: int) -> float:
    """Peak bytes ``size`` needs for a drawn stream (``simulated``: policies other than LRU)."""
    n = max(keys, requests)
    return SIZE_BASE_BYTES + n * (SIZE_LRU_BYTES_PER + simulated * SIZE_SIMULATED_BYTES_PER)


def available_memory() -> float | None:
    """Bytes this process can still take: the least of the kernel's MemAvailable, its address-space
    limit (``ulimit -v``) and its cgroup's ``memory.max`` less what the cgroup uses; None if unknown."""
    import resource

    limits: list[float] = []
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    limits.append(float(line.split()[1]) * 1024)
    except OSError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(float(soft))
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as cap, \
                open("/sys/fs/cgroup/memory.current", encoding="ascii") as used:
            top = cap.read().strip()
            if top != "max":
                limits.append(float(top) - float(used.read().strip()))
    except (OSError, ValueError):
        pass
    return min(limits) if limits else None


def check_memory(what: str, estimate: float, hint: str) -> None:
    """One line (exit 2) before the work when ``estimate`` exceeds 80 % of the memory available."""
    free = available_memory()
    if free is not None and estimate > 0.8 * free:
        raise SpecError(f"{what} needs about {estimate / 1e9:,.1f} GB of memory, more than the "
                        f"{free / 1e9:,.1f} GB available; {hint}")
