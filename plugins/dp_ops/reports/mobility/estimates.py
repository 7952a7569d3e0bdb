r"""Published metrics, their confidence intervals, and the reliability rule.

Everything here is post-processing of stored noisy cells and public parameters, so it
costs no privacy budget.

Intervals (the derivation the suppression rule rests on)
--------------------------------------------------------
Each noisy cell is ``x + Z`` with ``Z`` discrete Laplace (``dp_ops.privacy.noise``). For a
confidence level ``1 - alpha`` the exact margin ``m(alpha)`` satisfies
``P(|Z| > m) <= alpha``.

*Metric of one day.* A published count is a sum of ``d`` noisy cells (3 for retail and
recreation, 2 for grocery and pharmacy, 1 otherwise). If every ``|Z_i| <= m(alpha/d)``
then the sum is within ``sum_i m(alpha/d)`` of the truth; by the union bound this holds
with probability ``>= 1 - alpha``. Residential hours are ``S / (g C) + 12`` from a noisy
sum ``S`` of offsets (grid ``g`` units an hour) and a noisy count ``C``: with
``S`` and ``C`` each in their ``alpha/2`` interval (joint probability ``>= 1 - alpha``)
and ``C - m_C > 0``, the true ratio lies between the smallest and largest corner
``(S +/- m_S) / (C +/- m_C)`` (``S/C`` is monotone in each argument when ``C > 0``), then
``/g + 12`` and clamping to [0, 24] (monotone). If ``C - m_C <= 0`` the interval is
[0, 24], uninformative, and the value is suppressed.

*Baseline.* The baseline is the median of five noisy daily values
``y_1..y_5`` with intervals ``[l_i, h_i]`` computed as above at level ``alpha/5`` each.
By the union bound, all five intervals hold at once with probability ``>= 1 - alpha``.
The median is monotone in each argument, so when every true ``t_i`` lies in
``[l_i, h_i]``, the true median ``median(t)`` lies in ``[median(l), median(h)]``. That
is the baseline's ``1 - alpha`` interval: it costs a factor 5 in ``alpha``, which for
Laplace tails only widens the margin by ``b ln 5``.

*Ratio.* With the metric in ``[v_l, v_h]`` and the baseline in ``[b_l, b_h]`` (each at
``alpha = 2.5%``, jointly ``>= 95%``) and ``b_l > 0``, the true ratio lies in
``[max(v_l, 0) / b_h, v_h / b_l]`` (true values are non-negative). The change is
published only if both ends are within ``max_error_points`` (10) percentage points of
the noisy ratio ``max(v, 0) / b``; then, with probability ``>= 95%``, the published
change is within 10 points of the true change (the paper's rule).
``tests/unit/reports/mobility/test_estimates.py`` checks the coverage by simulation.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from dp_ops.privacy.noise import discrete_laplace_margin
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
RESIDENTIAL_SUM = "residential_sum_units"
RESIDENTIAL_COUNT = "residential_users"
CONTRIBUTORS = "contributors"


@lru_cache(maxsize=4096)
def _margin(alpha: float, epsilon: float, sensitivity: int) -> int:
    return discrete_laplace_margin(alpha, epsilon=epsilon, sensitivity=sensitivity)


def cell_margins(cells: pd.DataFrame, alpha: pd.Series | float) -> np.ndarray:
    """Margin m with P(|Z| > m) <= alpha for each noisy cell (vectorised over rows)."""
    alphas = np.broadcast_to(np.asarray(alpha, dtype=float), (len(cells),))
    keys = zip(alphas, cells["cell_epsilon"].to_numpy(), cells["sensitivity"].to_numpy(),
               strict=True)
    return np.fromiter((_margin(float(a), float(e), int(s)) for a, e, s in keys),
                       dtype=np.int64, count=len(cells))


def _wide(cells: pd.DataFrame, column: str) -> pd.DataFrame:
    return cells.pivot_table(index=["level", "region_id"], columns="metric", values=column,
                             aggfunc="first")


def metric_estimates(cells: pd.DataFrame, *, alpha: float, grid_per_hour: int) -> pd.DataFrame:
    """Per (level, region_id): each published category's noisy value and ``1 - alpha``
    interval (columns ``<cat>``, ``<cat>_lo``, ``<cat>_hi``), plus ``contributors``.

    ``cells`` is the long table of noisy cells (level, region_id, metric, noisy_value,
    cell_epsilon, sensitivity) of one day.
    """
    cells = cells.copy()
    components = {m: len(cs) for cs in COUNT_CATEGORY_CELLS.values() for m in cs}
    components[RESIDENTIAL_SUM] = 2
    components[RESIDENTIAL_COUNT] = 2
    components[CONTRIBUTORS] = 1
    cell_alpha = alpha / cells["metric"].map(components).fillna(1.0)
    cells["margin"] = cell_margins(cells, cell_alpha)
    value = _wide(cells, "noisy_value").astype(float)
    margin = _wide(cells, "margin").astype(float)
    out = pd.DataFrame(index=value.index)
    for cat, parts in COUNT_CATEGORY_CELLS.items():
        v = value[list(parts)].sum(axis=1)
        m = margin[list(parts)].sum(axis=1)
        out[cat] = v
        out[f"{cat}_lo"] = (v - m).clip(lower=0)
        out[f"{cat}_hi"] = v + m
    res, lo, hi = residential_hours(
        value[RESIDENTIAL_SUM].to_numpy(), margin[RESIDENTIAL_SUM].to_numpy(),
        value[RESIDENTIAL_COUNT].to_numpy(), margin[RESIDENTIAL_COUNT].to_numpy(),
        grid_per_hour)
    out["residential"] = res
    out["residential_lo"] = lo
    out["residential_hi"] = hi
    out["contributors"] = value[CONTRIBUTORS].astype("int64")
    return out.reset_index()


def residential_hours(s: np.ndarray, m_s: np.ndarray, c: np.ndarray, m_c: np.ndarray,
                      grid_per_hour: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimate of average hours at home and its interval from the noisy offset sum and
    count (see the module docstring). NaN estimate when the noisy count is <= 0."""
    s, m_s, c, m_c = (np.asarray(x, dtype=float) for x in (s, m_s, c, m_c))
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.where(c > 0, np.clip(s / c / grid_per_hour + 12, 0, 24), np.nan)
        c_lo, c_hi = c - m_c, c + m_c
        corners = np.stack([(s - m_s) / c_lo, (s - m_s) / c_hi,
                            (s + m_s) / c_lo, (s + m_s) / c_hi])
        informative = c_lo > 0
        lo = np.where(informative, np.clip(corners.min(axis=0) / grid_per_hour + 12, 0, 24), 0.0)
        hi = np.where(informative, np.clip(corners.max(axis=0) / grid_per_hour + 12, 0, 24), 24.0)
    return est, lo, hi


def percent_change(value: np.ndarray, value_lo: np.ndarray, value_hi: np.ndarray,
                   base: np.ndarray, base_lo: np.ndarray, base_hi: np.ndarray, *,
                   max_error_points: float) -> tuple[np.ndarray, np.ndarray]:
    """Integer percent change and whether it is reliable enough to publish.

    Publish only when the baseline's interval is strictly positive and both ends of the
    ratio interval are within ``max_error_points`` of the noisy ratio.
    """
    v, vl, vh, b, bl, bh = (np.asarray(x, dtype=float)
                            for x in (value, value_lo, value_hi, base, base_lo, base_hi))
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (b > 0) & (bl > 0) & np.isfinite(v) & np.isfinite(b) & np.isfinite(vh)
        ratio = np.where(ok, np.maximum(v, 0) / b, np.nan)
        r_lo = np.where(ok, np.maximum(vl, 0) / bh, np.nan)
        r_hi = np.where(ok, vh / bl, np.nan)
        error = 100 * np.maximum(r_hi - ratio, ratio - r_lo)
        publish = ok & (error <= max_error_points)
        change = np.floor(100 * (ratio - 1) + 0.5)
    return change, publish
