r"""The evaluation's oracle: what a release could publish if it knew the true values.

The oracle knows the true (bounded, pre-noise) aggregates and the exact noise law of the
pipeline, and publishes a value exactly when the report's promise holds for that value
(docs/design.md, Evaluation). It is a yardstick for the reliability rules, which must
decide from noisy values only; it is never part of the pipeline and reads no file.

Noise law. Every noisy cell is ``x + Z`` with ``Z`` discrete Laplace,
``P(Z = k) = (1 - q) / (1 + q) q^|k|``, ``q = exp(-epsilon / sensitivity)``, independent
across cells and days (:mod:`dp_ops.privacy.noise`). A :class:`NoiseLaw` is the exact law
of a sum of such draws (the cells of a mobility category, the seven days of a symptoms
week) on a table that leaves out at most ``LAW_TAIL`` of the mass, obtained by
convolution.

Mobility (:func:`count_change_miss_probability`, :func:`change_miss_probability`). The
published change is ``C = round-half-up(100 (max(V, 0) / B - 1))`` with ``V = v + Z`` and
``B = median_j(b_j + W_j)`` over the five same-weekday days of the baseline window
(undefined if ``B <= 0``); the true change is ``c = 100 (v / median(b) - 1)``. The oracle
publishes iff ``P(|C - c| > max_error_points or C undefined) < 5%``. The baseline's
median is simulated (``draws`` per cell, numpy's ``default_rng`` with a fixed seed); for
count categories the probability over ``V`` given each simulated ``B`` is exact (the
values of ``V`` with ``|C - c| <= T`` form an interval), which is the simulation's
expectation with less variance. Residential hours (a ratio of two noisy cells) are
simulated in both today's value and the baseline.

Symptoms (:func:`ratio_cover_probability`, :func:`oracle_publishes_ratio`). With
``A = a + Z_A`` and ``B = b + Z_B`` (daily cells, or weekly sums of seven daily cells) and
the true ratio ``r = a / b``, the oracle publishes iff
``P((1 - t) A / B <= r <= (1 + t) A / B, B > 0) >= p`` (``t`` = 25%, ``p`` = 50%). The
probability is exact: ``sum_z P(Z_B = z) P(A in [r (b + z) / (1 + t), r (b + z) / (1 - t)])``
over the law of ``Z_B`` less a ``1e-6`` tail (counted as not covering), after a
screen that decides most values from two bounds of one term each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dp_ops.privacy.noise import (
    discrete_laplace_a,
    discrete_laplace_margin,
    sample_discrete_laplace,
)

# (epsilon, sensitivity) of one discrete Laplace draw: one noisy cell.
CellNoise = tuple[float, int]

# Mass a law's table leaves out (both tails together).
LAW_TAIL = 1e-12
# The promise of the mobility report: P(|C - c| > max_error_points) < 5%.
MOBILITY_MAX_MISS_PROBABILITY = 0.05
# Mass of Z_B's tails left out of the symptoms oracle's exact sum (counted as a miss):
# only decisions with P within 1e-6 of the threshold can change.
B_TAIL_OUTSIDE = 1e-6
# The screen's central interval of Z_B leaves this much mass outside.
SCREEN_OUTSIDE = 0.01
# Elements per vectorised block (rows x draws or rows x support): ~16 MB per float array.
BLOCK_ELEMENTS = 2_000_000


@dataclass(frozen=True, eq=False)
class NoiseLaw:
    """The law of an integer noise: ``pmf[i] = P(Z = low + i)``, summing to 1 less at
    most ``LAW_TAIL`` (left out of the tails, and put back by normalising the CDF)."""

    low: int
    pmf: NDArray[np.float64]

    @cached_property
    def _cdf(self) -> NDArray[np.float64]:
        # _cdf[i] = P(Z <= low + i - 1): 0 below the table, 1 above it
        cdf = np.concatenate(([0.0], np.cumsum(self.pmf)))
        return np.asarray(cdf / cdf[-1], dtype=np.float64)

    @property
    def support(self) -> NDArray[np.int64]:
        return np.arange(self.low, self.low + len(self.pmf), dtype=np.int64)

    def cdf(self, k: ArrayLike) -> NDArray[np.float64]:
        """``P(Z <= k)`` for integer ``k`` (any shape)."""
        index = np.clip(np.asarray(k, dtype=np.int64) - self.low + 1, 0, len(self.pmf))
        return np.asarray(self._cdf[index], dtype=np.float64)

    def mass_between(self, lo: ArrayLike, hi: ArrayLike) -> NDArray[np.float64]:
        """``P(lo <= Z <= hi)`` (0 where ``hi < lo``); arguments broadcast."""
        lo_, hi_ = np.broadcast_arrays(np.asarray(lo, dtype=np.int64),
                                       np.asarray(hi, dtype=np.int64))
        return np.where(hi_ >= lo_, self.cdf(hi_) - self.cdf(lo_ - 1), 0.0)

    def plus(self, other: NoiseLaw) -> NoiseLaw:
        """The law of the sum of independent draws of ``self`` and ``other``."""
        return _trimmed(self.low + other.low, np.convolve(self.pmf, other.pmf))

    def central(self, outside: float) -> tuple[int, int]:
        """``(lo, hi)``: the narrowest ends with ``P(Z < lo) <= outside / 2`` and
        ``P(Z > hi) <= outside / 2``."""
        cdf = self._cdf
        lo = int(np.searchsorted(cdf, outside / 2, side="right")) - 1
        hi = int(np.searchsorted(cdf, 1 - outside / 2, side="left")) - 1
        return self.low + max(lo, 0), self.low + min(hi, len(self.pmf) - 1)

    def sample(self, shape: tuple[int, ...], rng: np.random.Generator) -> NDArray[np.int64]:
        """Draws from the law (inverse CDF of the table)."""
        u = rng.random(shape)
        return np.searchsorted(self._cdf[1:], u, side="right").astype(np.int64) + self.low


def _trimmed(low: int, pmf: NDArray[np.float64]) -> NoiseLaw:
    """Drop the ends of a table whose mass is below ``LAW_TAIL / 2`` on each side."""
    cumulative = np.cumsum(pmf)
    first = int(np.searchsorted(cumulative, LAW_TAIL / 2, side="right"))
    tail = np.cumsum(pmf[::-1])
    last = len(pmf) - int(np.searchsorted(tail, LAW_TAIL / 2, side="right"))
    return NoiseLaw(low + first, np.ascontiguousarray(pmf[first:last]))


@lru_cache(maxsize=64)
def discrete_laplace_law(cell: CellNoise) -> NoiseLaw:
    """The exact law of one noisy cell's noise (:mod:`dp_ops.privacy.noise`)."""
    epsilon, sensitivity = cell
    q = discrete_laplace_a(epsilon, sensitivity)
    m = discrete_laplace_margin(LAW_TAIL, epsilon=epsilon, sensitivity=sensitivity)
    k = np.arange(-m, m + 1)
    # q^|k| as exp(-|k| epsilon / sensitivity): no rounding error growing with |k|
    pmf = (1 - q) / (1 + q) * np.exp(-np.abs(k) * (epsilon / sensitivity))
    return NoiseLaw(-m, pmf)


@lru_cache(maxsize=64)
def sum_law(cells: tuple[CellNoise, ...]) -> NoiseLaw:
    """The law of the sum of one independent draw per cell (e.g. a category's cells, or
    seven days of one cell)."""
    if not cells:
        raise ValueError("sum_law: no cells")
    law = discrete_laplace_law(cells[0])
    for cell in cells[1:]:
        law = law.plus(discrete_laplace_law(cell))
    return law


def simulate_noise(cells: Sequence[CellNoise], shape: tuple[int, ...],
                   rng: np.random.Generator) -> NDArray[np.int64]:
    """Draws of the sum of one independent discrete Laplace draw per cell."""
    size = math.prod(shape)
    total = np.zeros(size, dtype=np.int64)
    for epsilon, sensitivity in cells:
        total += sample_discrete_laplace(size, epsilon=epsilon, sensitivity=sensitivity,
                                         rng=rng)
    return total.reshape(shape)


# -- mobility ----------------------------------------------------------------------------

def published_change(value: ArrayLike, base: ArrayLike) -> NDArray[np.float64]:
    """The pipeline's integer change ``round-half-up(100 (max(V, 0) / B - 1))``, NaN where
    ``B <= 0`` or either is not finite (such a change is never published)."""
    v = np.asarray(value, dtype=np.float64)
    b = np.asarray(base, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (b > 0) & np.isfinite(v) & np.isfinite(b)
        return np.where(ok, np.floor(100 * (np.maximum(v, 0) / b - 1) + 0.5), np.nan)


def true_change(value: ArrayLike, base: ArrayLike) -> NDArray[np.float64]:
    """``100 (v / b - 1)``; NaN where ``b <= 0`` (no change is close to an undefined one)."""
    v = np.asarray(value, dtype=np.float64)
    b = np.asarray(base, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, 100 * (v / b - 1), np.nan)


def true_hours(sums: ArrayLike, counts: ArrayLike, grid_per_hour: int) -> NDArray[np.float64]:
    """Average hours at home, ``clamp(s / (g c) + 12, 0, 24)``; NaN where ``c <= 0``."""
    s = np.asarray(sums, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(c > 0, np.clip(s / c / grid_per_hour + 12, 0, 24), np.nan)


def simulate_baselines(days: NDArray[np.int64], cells: Sequence[CellNoise], draws: int,
                       rng: np.random.Generator) -> NDArray[np.float64]:
    """``(groups, draws)`` draws of ``B = median_j(b_j + W_j)`` for the true values ``days``
    ``(groups, 5)``, each ``W_j`` the sum of one draw per cell."""
    groups = days.shape[0]
    out = np.empty((groups, draws), dtype=np.float64)
    step = max(1, BLOCK_ELEMENTS // (days.shape[1] * draws))
    for start in range(0, groups, step):
        block = days[start:start + step]
        noisy = block[:, :, None] + simulate_noise(cells, (*block.shape, draws), rng)
        out[start:start + step] = np.median(noisy, axis=1)
    return out


def simulate_hours(sums: NDArray[np.int64], counts: NDArray[np.int64], sum_cell: CellNoise,
                   count_cell: CellNoise, draws: int, grid_per_hour: int,
                   rng: np.random.Generator) -> NDArray[np.float64]:
    """Draws (a last axis of ``draws``) of the pipeline's hours at home from the noisy
    offset sum and count of true ``sums`` and ``counts`` (any shape): NaN where the noisy
    count is <= 0."""
    shape = (*sums.shape, draws)
    s = sums[..., None] + simulate_noise([sum_cell], shape, rng)
    c = counts[..., None] + simulate_noise([count_cell], shape, rng)
    return true_hours(s, c, grid_per_hour)


def simulate_baseline_hours(sums: NDArray[np.int64], counts: NDArray[np.int64],
                            sum_cell: CellNoise, count_cell: CellNoise, draws: int,
                            grid_per_hour: int, rng: np.random.Generator
                            ) -> NDArray[np.float64]:
    """``(groups, draws)`` draws of the baseline hours, the median of the five days'
    noisy hours (``sums``, ``counts``: ``(groups, 5)`` true values); NaN if a day's noisy
    count is <= 0, as in the pipeline."""
    groups = sums.shape[0]
    out = np.empty((groups, draws), dtype=np.float64)
    step = max(1, BLOCK_ELEMENTS // (sums.shape[1] * draws))
    for start in range(0, groups, step):
        rows = slice(start, start + step)
        hours = simulate_hours(sums[rows], counts[rows], sum_cell, count_cell, draws,
                               grid_per_hour, rng)
        out[rows] = np.median(hours, axis=1)  # a NaN day makes the median NaN
    return out


def residential_miss_probability(sums: NDArray[np.int64], counts: NDArray[np.int64],
                                 change: NDArray[np.float64], baselines: NDArray[np.float64],
                                 group: NDArray[np.intp], sum_cell: CellNoise,
                                 count_cell: CellNoise, grid_per_hour: int,
                                 max_error_points: float, rng: np.random.Generator
                                 ) -> NDArray[np.float64]:
    """``P(|C - c| > max_error_points or C undefined)`` for residential cells of true
    offset ``sums`` and ``counts``, by simulation of today's hours against the simulated
    baselines ``baselines[group[i]]`` (one draw of today per baseline draw)."""
    draws = baselines.shape[1]
    out = np.empty(len(sums), dtype=np.float64)
    step = max(1, BLOCK_ELEMENTS // draws)
    for start in range(0, len(sums), step):
        rows = slice(start, start + step)
        hours = simulate_hours(sums[rows], counts[rows], sum_cell, count_cell, draws,
                               grid_per_hour, rng)
        out[rows] = change_miss_probability(hours, baselines[group[rows]], change[rows],
                                            max_error_points)
    return out


def change_miss_probability(values: NDArray[np.float64], baselines: NDArray[np.float64],
                            change: NDArray[np.float64],
                            max_error_points: float) -> NDArray[np.float64]:
    """Per row, the share of simulated ``(V, B)`` (``(rows, draws)`` each) whose published
    change is undefined or more than ``max_error_points`` from the true ``change``."""
    published = published_change(values, baselines)
    close = np.abs(published - change[:, None]) <= max_error_points  # NaN: False
    return np.asarray(1.0 - close.mean(axis=1), dtype=np.float64)


def count_change_miss_probability(value: NDArray[np.int64], change: NDArray[np.float64],
                                  baselines: NDArray[np.float64], group: NDArray[np.intp],
                                  law: NoiseLaw, max_error_points: float
                                  ) -> NDArray[np.float64]:
    """``P(|C - c| > max_error_points or C undefined)`` for each cell of a count category.

    ``value`` and ``change`` are each cell's true value ``v`` and true change ``c``;
    ``baselines[group[i]]`` the simulated baselines of cell ``i`` and ``law`` the law of
    ``V - v``. Given ``B > 0``, ``C`` is non-decreasing in ``V``, so the ``V`` with ``C`` in
    ``[ceil(c - T), floor(c + T)]`` form an interval whose probability is exact; the
    result is its complement averaged over the simulated baselines (``B <= 0``: a miss).
    """
    out = np.empty(len(value), dtype=np.float64)
    draws = baselines.shape[1]
    step = max(1, BLOCK_ELEMENTS // draws)
    for start in range(0, len(value), step):
        rows = slice(start, start + step)
        b = baselines[group[rows]]
        c = change[rows][:, None]
        v = value[rows][:, None]
        defined = (b > 0) & np.isfinite(c)
        with np.errstate(invalid="ignore"):
            lowest = np.where(np.isfinite(c), np.ceil(c - max_error_points), 0.0)
            highest = np.where(np.isfinite(c), np.floor(c + max_error_points), -1.0)
            # C >= lowest iff y >= b (lowest + 99.5) / 100; C <= highest iff
            # y < b (highest + 100.5) / 100 (y = max(V, 0)), then fixed to the integer
            # the pipeline's own arithmetic gives at the boundary
            y_lo = np.maximum(np.ceil(b * (lowest + 99.5) / 100), 0.0)
            y_hi = np.ceil(b * (highest + 100.5) / 100) - 1
        y_lo = np.where(defined, y_lo, 0.0)
        y_hi = np.where(defined, y_hi, -1.0)
        y_lo -= (y_lo > 0) & (published_change(y_lo - 1, b) >= lowest)
        y_lo += published_change(y_lo, b) < lowest
        y_hi += published_change(y_hi + 1, b) <= highest
        y_hi -= (y_hi >= 0) & (published_change(y_hi, b) > highest)
        lo_v = (y_lo - v).astype(np.int64)
        hi_v = (y_hi - v).astype(np.int64)
        # y = 0 stands for every V <= 0
        p_in = np.where(y_lo <= 0, law.cdf(hi_v), law.cdf(hi_v) - law.cdf(lo_v - 1))
        p_in = np.where(defined & (y_hi >= y_lo) & (y_hi >= 0), p_in, 0.0)
        out[rows] = 1.0 - p_in.mean(axis=1)
    return out


# -- symptoms ----------------------------------------------------------------------------

def covering_counts(a: NDArray[np.int64], b: NDArray[np.int64], noisy_b: NDArray[np.int64],
                    tolerance: float) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``(lo, hi)``: the integers ``A`` with ``(1 - t) A / B <= a / b <= (1 + t) A / B``,
    i.e. ``a B / ((1 + t) b) <= A <= a B / ((1 - t) b)``, for ``B = noisy_b > 0`` and
    ``b > 0`` (arrays broadcast; ``hi < lo`` when there is none). The ends are fixed by
    the products themselves, so they are exact when ``1 +/- t`` are exact in binary."""
    up, down = 1 + tolerance, 1 - tolerance
    num = (a * noisy_b).astype(np.float64)
    bf = b.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.ceil(num / (up * bf))
        hi = np.floor(num / (down * bf))
    lo -= (lo - 1) * up * bf >= num
    lo += lo * up * bf < num
    hi += (hi + 1) * down * bf <= num
    hi -= hi * down * bf > num
    return lo.astype(np.int64), hi.astype(np.int64)


def ratio_cover_probability(a: ArrayLike, b: ArrayLike, law_a: NoiseLaw, law_b: NoiseLaw,
                            tolerance: float, *, b_outside: float = B_TAIL_OUTSIDE
                            ) -> NDArray[np.float64]:
    """``P((1 - t) A / B <= a / b <= (1 + t) A / B and B > 0)`` for ``A = a + Z_A``,
    ``B = b + Z_B`` (independent, of laws ``law_a``, ``law_b``), exact but for ``Z_B``'s
    tails of mass ``b_outside``, counted as not covering (so the result is at most
    ``b_outside`` low). 0 where ``b <= 0`` (no true ratio)."""
    a_ = np.atleast_1d(np.asarray(a, dtype=np.int64))
    b_ = np.atleast_1d(np.asarray(b, dtype=np.int64))
    lo_z, hi_z = law_b.central(b_outside)
    z = np.arange(lo_z, hi_z + 1, dtype=np.int64)
    w = law_b.pmf[z - law_b.low]
    out = np.zeros(len(a_), dtype=np.float64)
    step = max(1, BLOCK_ELEMENTS // len(z))
    for start in range(0, len(a_), step):
        rows = slice(start, start + step)
        av, bv = a_[rows][:, None], b_[rows][:, None]
        noisy_b = bv + z[None, :]
        lo, hi = covering_counts(av, np.maximum(bv, 1), noisy_b, tolerance)
        p_a = law_a.mass_between(lo - av, hi - av)
        p_a = np.where((noisy_b > 0) & (bv > 0), p_a, 0.0)
        out[rows] = p_a @ w
    return out


def oracle_publishes_ratio(a: ArrayLike, b: ArrayLike, law_a: NoiseLaw, law_b: NoiseLaw, *,
                           tolerance: float, probability: float,
                           screen_outside: float = SCREEN_OUTSIDE) -> NDArray[np.bool_]:
    """Whether the oracle publishes each value: ``ratio_cover_probability >= probability``.

    A screen decides most values first. With ``[B_l, B_h]`` the central interval of ``B``
    leaving ``screen_outside`` outside, the covering ``A`` for any ``B`` in it lie in
    ``[lo(B_l), hi(B_h)]`` and include ``[lo(B_h), hi(B_l)]`` (both ends grow with ``B``),
    so ``(1 - s) P(A in [lo(B_h), hi(B_l)]) <= P <= P(A in [lo(B_l), hi(B_h)]) + s``; only
    values whose bounds straddle ``probability`` get the exact sum.
    """
    a_ = np.atleast_1d(np.asarray(a, dtype=np.int64))
    b_ = np.atleast_1d(np.asarray(b, dtype=np.int64))
    zl, zh = law_b.central(screen_outside)
    b_lo, b_hi = b_ + zl, b_ + zh
    safe_b = np.maximum(b_, 1)
    wide_lo, _ = covering_counts(a_, safe_b, np.maximum(b_lo, 1), tolerance)
    _, wide_hi = covering_counts(a_, safe_b, b_hi, tolerance)
    upper = np.where(b_hi > 0, law_a.mass_between(wide_lo - a_, wide_hi - a_), 0.0)
    upper += screen_outside
    narrow_lo, _ = covering_counts(a_, safe_b, b_hi, tolerance)
    _, narrow_hi = covering_counts(a_, safe_b, np.maximum(b_lo, 1), tolerance)
    lower = np.where(b_lo > 0, (1 - screen_outside)
                     * law_a.mass_between(narrow_lo - a_, narrow_hi - a_), 0.0)
    publish = (lower >= probability) & (b_ > 0)
    undecided = (b_ > 0) & (upper >= probability) & ~publish
    if undecided.any():
        exact = ratio_cover_probability(a_[undecided], b_[undecided], law_a, law_b, tolerance)
        publish[undecided] = exact >= probability
    return np.asarray(publish, dtype=bool)
