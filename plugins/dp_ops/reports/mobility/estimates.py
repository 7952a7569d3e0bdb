"""Published metrics and the reliability rule of the mobility report.

Post-processing of stored noisy cells, the frozen baseline and public parameters, so it
costs no privacy budget. A change ``C`` (the published integer) is published only if, for
any true values, ``P(C is published and |C - c| > max_error_points) <=
max_error_probability``: count categories by joint test inversion of today's value against
the median-of-five baseline (exact laws, :mod:`dp_ops.privacy.inference`), residential
hours by test inversion of the offset sum over the count with order statistics for the
baseline, scaled categories with their factor's own hull. The derivation is in
docs/design.md, Derivations; ``tests/unit/reports/mobility/test_reliability_search.py``
searches adversarial true values and checks the promise by simulation."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import pandas as pd

from dp_ops.privacy.inference import (
    RatioTest,
    discrete_laplace_sum,
    median_shift_magnitude,
    ratio_edges,
    ratio_test,
    scaled,
    uniform_edges,
)
from dp_ops.reports.mobility.config import PUBLISHED_CATEGORIES

# Published category -> noisy cells summed to form it (residential is a ratio, below).
COUNT_CATEGORY_CELLS: dict[str, tuple[str, ...]] = {
    "retail_and_recreation": ("places_retail", "places_recreation", "places_eateries"),
    "grocery_and_pharmacy": ("places_groceries", "places_pharmacies"),
    "parks": ("places_parks",),
    "transit_stations": ("places_transit",),
    "workplaces": ("workplaces",),
}
CATEGORIES: tuple[str, ...] = tuple(PUBLISHED_CATEGORIES)
RESIDENTIAL = "residential"
RESIDENTIAL_SUM = "residential_sum_units"
RESIDENTIAL_COUNT = "residential_users"
CONTRIBUTORS = "contributors"
BASELINE_DAYS_LOWEST = 3  # the median of five: three days on each side of it

# The ratio grid of count categories: 0, then 0.01 .. 20 (change -99% .. +1900%) in
# relative steps of 1% (the default CELL_STEP); above 20 the test's tail bound applies.
RATIO_START, RATIO_HIGHEST = 0.01, 20.0
# Residential offsets (hours from 12) lie in [-12, 12]; cells of 0.05 hour (three
# minutes: the threshold's slack from a cell is ~0.05 x g x a count margin, under 1% of
# the sum's margin).
OFFSET_CELL_HOURS = 0.05

# A noise key: (cells summed, smallest epsilon, largest sensitivity) of a category.
NoiseKey = tuple[int, float, int]


def noise_law_cells(key: NoiseKey) -> tuple[tuple[float, int], ...]:
    cells, epsilon, sensitivity = key
    return ((float(epsilon), int(sensitivity)),) * int(cells)


@lru_cache(maxsize=64)
def count_test(today: NoiseKey, baseline: NoiseKey, alpha: float) -> RatioTest:
    """The level-``alpha`` test of a count category's ratio (module docstring)."""
    x = discrete_laplace_sum(noise_law_cells(today))
    e_abs = median_shift_magnitude(discrete_laplace_sum(noise_law_cells(baseline)))
    return ratio_test(x, e_abs, alpha=alpha, edges=ratio_edges(0.0, RATIO_START, RATIO_HIGHEST),
                      bounded=False, magnitude=True)


@lru_cache(maxsize=64)
def offset_test(sum_key: tuple[float, int], count_key: tuple[float, int], grid_per_hour: int,
                alpha: float) -> RatioTest:
    """The level-``alpha`` test of residential offset hours ``s / (g c)`` in [-12, 12]."""
    x = discrete_laplace_sum((sum_key,))
    y = scaled(discrete_laplace_sum((count_key,)), float(grid_per_hour))
    return ratio_test(x, y, alpha=alpha, edges=uniform_edges(-12.0, 12.0, OFFSET_CELL_HOURS),
                      bounded=True)


def _wide(cells: pd.DataFrame, column: str) -> pd.DataFrame:
    return cells.pivot_table(index=["level", "region_id"], columns="metric", values=column,
                             aggfunc="first")


def metric_estimates(cells: pd.DataFrame, *, grid_per_hour: int,
                     residential_alpha: float) -> pd.DataFrame:
    """Per (level, region_id): each published category's noisy value (``<cat>``), each
    count category's noise key (``<cat>_cells``, ``<cat>_epsilon``,
    ``<cat>_sensitivity``), residential hours with their level-``residential_alpha``
    interval (``residential_lo``, ``residential_hi``), and ``contributors``.

    ``cells`` is the long table of noisy cells (level, region_id, metric, noisy_value,
    cell_epsilon, sensitivity) of one day.
    """
    value = _wide(cells, "noisy_value").astype(float)
    epsilon = _wide(cells, "cell_epsilon").astype(float)
    sensitivity = _wide(cells, "sensitivity").astype(float)
    out = pd.DataFrame(index=value.index)
    for cat, parts in COUNT_CATEGORY_CELLS.items():
        out[cat] = value[list(parts)].sum(axis=1)
        out[f"{cat}_cells"] = len(parts)
        out[f"{cat}_epsilon"] = epsilon[list(parts)].min(axis=1)
        out[f"{cat}_sensitivity"] = sensitivity[list(parts)].max(axis=1).astype("int64")
    hours, lo, hi = residential_hours(
        value[RESIDENTIAL_SUM].to_numpy(), value[RESIDENTIAL_COUNT].to_numpy(),
        epsilon[RESIDENTIAL_SUM].to_numpy(), sensitivity[RESIDENTIAL_SUM].to_numpy(),
        epsilon[RESIDENTIAL_COUNT].to_numpy(), sensitivity[RESIDENTIAL_COUNT].to_numpy(),
        grid_per_hour=grid_per_hour, alpha=residential_alpha)
    out[RESIDENTIAL] = hours
    out[f"{RESIDENTIAL}_lo"] = lo
    out[f"{RESIDENTIAL}_hi"] = hi
    out[CONTRIBUTORS] = value[CONTRIBUTORS].astype("int64")
    return out.reset_index()


def residential_hours(s: np.ndarray, c: np.ndarray, s_epsilon: np.ndarray,
                      s_sensitivity: np.ndarray, c_epsilon: np.ndarray,
                      c_sensitivity: np.ndarray, *, grid_per_hour: int, alpha: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hours at home, clamp(S / (g C) + 12, 0, 24), and the level-``alpha`` interval of the
    true hours (module docstring); NaN estimate when ``C <= 0``. Where the test rejects
    every offset (the truth was rejected, probability <= alpha) the interval is the whole
    [0, 24]."""
    s, c = np.asarray(s, dtype=float), np.asarray(c, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.where(c > 0, np.clip(s / c / grid_per_hour + 12, 0, 24), np.nan)
    lo = np.zeros(s.shape)
    hi = np.full(s.shape, 24.0)
    keys = pd.DataFrame({"se": s_epsilon, "ss": s_sensitivity, "ce": c_epsilon,
                         "cs": c_sensitivity})
    for key, idx in keys.groupby(["se", "ss", "ce", "cs"], sort=False).indices.items():
        se, ss, ce, cs = key
        test = offset_test((float(se), int(ss)), (float(ce), int(cs)), grid_per_hour, alpha)
        o_lo, o_hi = test.hull(s[idx], grid_per_hour * c[idx])
        empty = ~(o_lo <= o_hi)
        lo[idx] = np.where(empty, 0.0, np.clip(12 + o_lo, 0, 24))
        hi[idx] = np.where(empty, 24.0, np.clip(12 + o_hi, 0, 24))
    return est, lo, hi


def integer_change(ratio: np.ndarray) -> np.ndarray:
    """The published integer ``round(100 (ratio - 1))`` (halves up)."""
    return np.floor(100 * (np.asarray(ratio, dtype=float) - 1) + 0.5)


def within_promise(change: np.ndarray, ratio_lo: np.ndarray, ratio_hi: np.ndarray,
                   max_error_points: float) -> np.ndarray:
    """Whether every true ratio of ``[ratio_lo, ratio_hi]`` has a true change within
    ``max_error_points`` of the integer ``change``."""
    with np.errstate(invalid="ignore"):
        return ((100 * (np.asarray(ratio_lo) - 1) >= change - max_error_points)
                & (100 * (np.asarray(ratio_hi) - 1) <= change + max_error_points))


class ChangeEstimates(NamedTuple):
    """A category's integer changes, publish flags and the changes' interval: ``low`` and
    ``high`` in points, rounded outwards to integers (NaN where no interval was made),
    holding the true change with probability at least ``1 - alpha`` whatever the true
    values are (the hull of the test the publish decision uses; module docstring)."""

    change: np.ndarray
    publish: np.ndarray
    low: np.ndarray
    high: np.ndarray


def change_interval(ratio_lo: np.ndarray, ratio_hi: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The true change's interval in points from the true ratio's, rounded outwards (so it
    holds the true change whenever the ratio's holds the true ratio)."""
    with np.errstate(invalid="ignore"):
        return (np.floor(100 * (np.asarray(ratio_lo, dtype=float) - 1)),
                np.ceil(100 * (np.asarray(ratio_hi, dtype=float) - 1)))


def count_changes(frame: pd.DataFrame, *, alpha: float, max_error_points: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Integer changes and publish flags for a count category (:func:`count_estimates`)."""
    est = count_estimates(frame, alpha=alpha, max_error_points=max_error_points)
    return est.change, est.publish


def count_estimates(frame: pd.DataFrame, *, alpha: float, max_error_points: float
                    ) -> ChangeEstimates:
    """Integer changes, publish flags and intervals for a count category.

    ``frame`` columns: ``value``, ``cells``, ``epsilon``, ``sensitivity`` (today), and
    ``baseline``, ``noise_cells``, ``noise_epsilon``, ``noise_sensitivity`` (the frozen
    baseline), ``factor``, ``factor_lo``, ``factor_hi``, ``factor_alpha`` (1, 1, 1, 0
    without a method update).
    """
    v = frame["value"].to_numpy(dtype=float)
    b = frame["baseline"].to_numpy(dtype=float)
    f = frame["factor"].to_numpy(dtype=float)
    scaled_base = b * f
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = np.isfinite(v) & np.isfinite(scaled_base) & (scaled_base > 0) & (b > 0)
        ratio = np.where(ok, np.maximum(v, 0) / scaled_base, np.nan)
    change = integer_change(ratio)
    r_lo = np.full(len(frame), np.nan)
    r_hi = np.full(len(frame), np.nan)
    keys = frame[["cells", "epsilon", "sensitivity", "noise_cells", "noise_epsilon",
                  "noise_sensitivity", "factor_alpha"]]
    live = np.flatnonzero(ok)
    for key, idx in keys.iloc[live].groupby(list(keys.columns), sort=False).indices.items():
        rows = live[idx]
        cells, eps, sens, b_cells, b_eps, b_sens, f_alpha = key
        rest = alpha - float(f_alpha)
        if not rest > 0:
            continue
        test = count_test((int(cells), float(eps), int(sens)),
                          (int(b_cells), float(b_eps), int(b_sens)), rest)
        lo, hi = test.hull(v[rows], b[rows])
        with np.errstate(divide="ignore", invalid="ignore"):
            r_lo[rows] = lo / frame["factor_hi"].to_numpy(dtype=float)[rows]
            r_hi[rows] = hi / frame["factor_lo"].to_numpy(dtype=float)[rows]
    publish = ok & within_promise(change, r_lo, r_hi, max_error_points)
    low, high = change_interval(r_lo, r_hi)
    return ChangeEstimates(change, publish, low, high)


def residential_changes(hours: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                        baseline: np.ndarray, baseline_lo: np.ndarray,
                        baseline_hi: np.ndarray, *, max_error_points: float
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Integer changes and publish flags for residential hours
    (:func:`residential_estimates`)."""
    est = residential_estimates(hours, lo, hi, baseline, baseline_lo, baseline_hi,
                                max_error_points=max_error_points)
    return est.change, est.publish


def residential_estimates(hours: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                          baseline: np.ndarray, baseline_lo: np.ndarray,
                          baseline_hi: np.ndarray, *, max_error_points: float
                          ) -> ChangeEstimates:
    """Integer changes, publish flags and intervals for residential hours, from today's
    interval and the baseline's (module docstring: their miss probabilities add up to the
    rule's)."""
    h, h_lo, h_hi, b, bl, bu = (np.asarray(x, dtype=float)
                                for x in (hours, lo, hi, baseline, baseline_lo, baseline_hi))
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = np.isfinite(h) & np.isfinite(b) & (b > 0) & (bl > 0)
        ratio = np.where(ok, h / b, np.nan)
        change = integer_change(ratio)
        r_lo, r_hi = np.where(ok, h_lo / bu, np.nan), np.where(ok, h_hi / bl, np.nan)
        publish = ok & within_promise(change, r_lo, r_hi, max_error_points)
    low, high = change_interval(r_lo, r_hi)
    return ChangeEstimates(change, publish, low, high)


def residential_day_alpha(alpha: float, baseline_miss: float) -> float:
    """Today's share of the rule's probability once the baseline took ``baseline_miss`` on
    each side."""
    rest = alpha - 2 * baseline_miss
    if not rest > 0:
        raise ValueError(f"baseline_miss={baseline_miss!r} leaves nothing of alpha={alpha!r}")
    return rest


def strictly_below(probability: float) -> float:
    """The largest float below ``probability``: "under 5%" as a bound ``<= alpha``."""
    return math.nextafter(probability, 0.0)
