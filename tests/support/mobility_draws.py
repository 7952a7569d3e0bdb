"""What the mobility report's two adversarial searches share (``test_reliability_search.py``
checks the promise, ``test_interval_coverage.py`` the intervals): the configuration, the
true baseline shapes and ratios they search, the two-stage draw counts with their
confirmation threshold, and the noise and residential-hours draws.

Simulation only: the noise comes from the production sampler
(:func:`dp_ops.privacy.noise.sample_discrete_laplace`) with the test's fixed-key generator,
so each search is deterministic."""

from __future__ import annotations

import numpy as np

from dp_ops.privacy.noise import sample_discrete_laplace
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.mobility.estimates import residential_hours, strictly_below

CFG = MobilityConfig()
ALPHA = strictly_below(CFG.max_error_probability)
EPS = CFG.place_epsilon
DRAWS = 1000
CONFIRM_DRAWS = 20_000
PROMISE = 0.05
# 5% plus 3.5 standard errors of a 5% rate estimated from CONFIRM_DRAWS draws
CONFIRMED = PROMISE + 3.5 * np.sqrt(PROMISE * (1 - PROMISE) / CONFIRM_DRAWS)
RATIOS = (0.2, 0.5, 0.9, 1.0, 1.1, 1.5, 2.0, 3.0)
# true baseline-window values as multiples of b: the median is b in every shape
SHAPES: dict[str, tuple[float, ...]] = {
    "equal": (1, 1, 1, 1, 1),
    "two far above": (1, 1, 1, 10, 10),      # the baseline error is a maximum of three
    "two far below": (0.1, 0.1, 1, 1, 1),    # ... a minimum of three
    "spread": (0.5, 0.8, 1, 1.25, 2),
}

GRID = CFG.residential_grid_per_hour
RES_SUM = (CFG.residential_sum_epsilon, 12 * GRID)
RES_COUNT = (CFG.residential_count_epsilon, 1)


def noise(rng: np.random.Generator, shape: tuple[int, ...], cells: int,
          epsilon: float = EPS, sensitivity: int = 1) -> np.ndarray:
    """The summed noise of ``cells`` cells, for each entry of an array of ``shape``."""
    total = np.zeros(shape, dtype=np.int64)
    for _ in range(cells):
        total += sample_discrete_laplace(int(np.prod(shape)), epsilon=epsilon,
                                         sensitivity=sensitivity, rng=rng).reshape(shape)
    return total


def noisy_hours(rng: np.random.Generator, hours: np.ndarray, users: int, alpha: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimates and intervals of true ``hours`` at home (any shape) for ``users`` users."""
    s = np.round((hours - 12) * GRID * users).astype(np.int64)
    s_noisy = s + noise(rng, hours.shape, 1, *RES_SUM)
    c_noisy = users + noise(rng, hours.shape, 1, *RES_COUNT)
    est, lo, hi = residential_hours(
        s_noisy.ravel().astype(float), c_noisy.ravel().astype(float),
        np.full(hours.size, RES_SUM[0]), np.full(hours.size, RES_SUM[1]),
        np.full(hours.size, RES_COUNT[0]), np.full(hours.size, RES_COUNT[1]),
        grid_per_hour=GRID, alpha=alpha)
    return est.reshape(hours.shape), lo.reshape(hours.shape), hi.reshape(hours.shape)
