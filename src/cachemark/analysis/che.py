"""Che's approximation of an LRU cache's hit ratio under independent requests.

An LRU cache of ``C`` objects keeps an object for about a "characteristic time" ``T``,
the time in which ``C`` distinct objects are requested: ``Σ (1 - exp(-p_i T)) = C``.
The hit ratio is then ``Σ p_i (1 - exp(-p_i T))`` (Che, Tung and Wang, 2002; Fricker et
al. 2012 on why it is so accurate). It is the ground truth the simulated curves and live
runs are checked against, and an instant answer for a synthetic Zipf workload.
"""

from __future__ import annotations

import numpy as np


def zipf_popularity(keys: int, alpha: float) -> np.ndarray:
    """Request probabilities of ``keys`` objects under Zipf(α), most popular first."""
    weights = np.arange(1, keys + 1, dtype=np.float64) ** -alpha
    return weights / weights.sum()


def characteristic_time(popularity: np.ndarray, cache_size: float) -> float:
    """``T`` with ``Σ (1 - exp(-p_i T)) = cache_size``, by bisection (monotone in T)."""
    if cache_size >= len(popularity):
        return float("inf")
    lo, hi = 0.0, 1.0
    while np.sum(-np.expm1(-popularity * hi)) < cache_size:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if np.sum(-np.expm1(-popularity * mid)) < cache_size:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2


def lru_hit_ratio(popularity: np.ndarray, cache_size: float) -> float:
    """The hit ratio of an LRU cache of ``cache_size`` objects (steady state, no cold misses)."""
    if cache_size <= 0:
        return 0.0
    t = characteristic_time(popularity, cache_size)
    if t == float("inf"):
        return 1.0
    return float(np.sum(popularity * -np.expm1(-popularity * t)))
