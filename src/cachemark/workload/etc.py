"""Facebook's ETC memcached pool as a workload (Atikoglu et al., "Workload Analysis of a Large-Scale
Key-Value Store", SIGMETRICS 2012), with the fitted parameters mutilate uses.

Owns the three distributions and their analytic means and quantiles (the tests' ground truth):
key sizes, generalised extreme value GEV(μ 30.7984, σ 8.20449, ξ 0.078688), mean 36.2 B;
value sizes, a discrete head for 0–14 bytes (the paper's measured probabilities, 44 % of
values in all) and above it a generalised Pareto GP(15, 214.476, 0.348238), tail mean 344 B;
inter-arrival gaps GP(0, 16.0292 µs, 0.154971), mean 18.97 µs — and GET:SET 30:1.

Value sizes are drawn from one table (the head, then the tail at 4,096 evenly spaced
quantiles, rounded to whole bytes and merged): the Python workers and the native engine draw
from the very same weighted list (``value_size = "etc"``), whose tail mean is within 0.25 % of
the analytic one. Gaps keep the shape and take their mean from the run's rate
(``arrival = "etc"``): ETC's own mean, 18.97 µs per connection, is ``--rate`` 52,718 per worker.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

KEY_GEV = (30.7984, 8.20449, 0.078688)  # location, scale, shape
VALUE_HEAD = (0.00536, 0.00047, 0.17820, 0.09239, 0.00018, 0.02740, 0.00065, 0.00606, 0.00023, 0.00837,
              0.00837, 0.08989, 0.00092, 0.00326, 0.01980)  # P(size = 0 … 14 bytes)
VALUE_TAIL_GP = (15.0, 214.476, 0.348238)
GAP_GP_US = (0.0, 16.0292, 0.154971)
MIX = {"get": 30.0, "set": 1.0}
TAIL_POINTS = 4096
MAX_VALUE = 1_000_000  # memcached's default item size limit (1 MiB with its overhead)
MAX_KEY = 250  # memcached's key length limit


def gev_quantile(p: np.ndarray | float, mu: float, sigma: float, xi: float) -> np.ndarray | float:
    return mu + sigma * ((-np.log(p)) ** (-xi) - 1) / xi


def gev_mean(mu: float, sigma: float, xi: float) -> float:
    return mu + sigma * (math.gamma(1 - xi) - 1) / xi


def gp_quantile(p: np.ndarray | float, mu: float, sigma: float, xi: float) -> np.ndarray | float:
    return mu + sigma * ((1 - np.asarray(p)) ** (-xi) - 1) / xi


def gp_mean(mu: float, sigma: float, xi: float) -> float:
    return mu + sigma / (1 - xi)


def key_sizes(rng: np.random.Generator, n: int) -> np.ndarray:
    """Key lengths in bytes (whole, 1 … 250)."""
    return np.clip(np.rint(gev_quantile(rng.random(n), *KEY_GEV)), 1, MAX_KEY).astype(np.int64)


@cache
def key_length_table(points: int) -> tuple[int, ...]:
    """Key lengths at ``points`` evenly spaced quantiles of the GEV: what key i's length is drawn
    from (workload/keys.py), the same table in the Python workers and the engine."""
    p = (np.arange(points) + 0.5) / points
    return tuple(np.clip(np.rint(gev_quantile(p, *KEY_GEV)), 1, MAX_KEY).astype(np.int64).tolist())


@cache
def value_table() -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(sizes, weights): the head's sizes with their probabilities, then the tail's quantiles."""
    head = sum(VALUE_HEAD)
    p = (np.arange(TAIL_POINTS) + 0.5) / TAIL_POINTS
    tail = np.clip(np.rint(gp_quantile(p, *VALUE_TAIL_GP)), VALUE_TAIL_GP[0], MAX_VALUE).astype(np.int64)
    sizes, counts = np.unique(tail, return_counts=True)
    weights = counts * (1 - head) / TAIL_POINTS
    return (tuple(range(len(VALUE_HEAD))) + tuple(sizes.tolist()),
            tuple(VALUE_HEAD) + tuple(weights.tolist()))


def value_mean() -> float:
    """The analytic mean value size: the head's, plus the tail's (GP) weighted by its share."""
    head = sum(VALUE_HEAD)
    return sum(i * p for i, p in enumerate(VALUE_HEAD)) + (1 - head) * gp_mean(*VALUE_TAIL_GP)


def gaps_ns(rng: np.random.Generator, n: int, mean_ns: float) -> np.ndarray:
    """Inter-arrival gaps with ETC's shape (GP, ξ 0.154971), scaled to ``mean_ns``."""
    _, _, xi = GAP_GP_US
    sigma = mean_ns * (1 - xi)  # a GP(0, σ, ξ) has mean σ / (1 − ξ)
    return np.rint(gp_quantile(rng.random(n), 0.0, sigma, xi)).astype(np.int64)
