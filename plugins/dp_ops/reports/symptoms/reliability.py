"""The reliability rule of the symptoms dataset: a confidence set for the true ratio a / b
by inverting an exact test, and the verdict drawn from it.

Post-processing of noisy counts and public parameters (epsilons, sensitivities, the
configured probability and tolerance), so it costs no privacy budget. Under "true ratio
``rho``", ``A - rho B = Z_A - rho Z_B`` has an exact law (a weekly value's: the
convolution of its days'), the true ratio lies in ``[0, 1]`` (the bounding counts a user in
A only where it is counted in B), and a value is published when the ratios the test does
not reject lie within the tolerance of ``A / B``. The noise laws, the range and the
rule's guarantee are derived in docs/design.md, Derivations."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from dp_ops.privacy.inference import RatioTest, discrete_laplace, ratio_edges, ratio_test
from dp_ops.reports.symptoms.config import SYMPTOM_METRIC, VOLUME_METRIC, SymptomsConfig

# Cells of the ratio range [0, 1]: [0, RATIO_START], then geometric with relative step
# CELL_STEP (dp_ops.privacy.inference.CELL_STEP) up to MAX_RATIO. A true ratio below
# 1e-4 (one searcher in 10,000) shares the first cell.
RATIO_START = 1e-4
MAX_RATIO = 1.0  # a <= b (module docstring)
# Relative slack of the cheap pre-test (floating rounding of A - (1 -/+ t) R B vs t A).
_SLACK = 1e-9

VERDICT_COLUMNS: tuple[str, ...] = ("ratio", "lower", "upper", "reliable")
# The published intervals' level: the hull of the same exact test at 1 - INTERVAL_LEVEL.
INTERVAL_LEVEL = 0.95
INTERVAL_ALPHA = round(1 - INTERVAL_LEVEL, 12)  # 0.05, not 0.050000000000000044


def ratio_test_for(a_epsilon: float, a_sensitivity: int, b_epsilon: float,
                   b_sensitivity: int, n_days: int, alpha: float) -> RatioTest:
    """The level-``alpha`` test of the ratio ``a / b`` in ``[0, 1]`` for values summing
    ``n_days`` daily noisy cells (A at ``a_epsilon``/``a_sensitivity``, B likewise),
    cached per parameter set (module docstring)."""
    return _ratio_test(float(a_epsilon), int(a_sensitivity), float(b_epsilon),
                       int(b_sensitivity), int(n_days), float(alpha))


def prepare_ratio_tests(cfg: SymptomsConfig) -> int:
    """Build the tests a daily run under ``cfg`` uses (daily values, and weekly values of
    7 daily cells, at the configured budgets; the rule's and the intervals') into this
    process's cache; returns how many.
    The Airflow processes that fork tasks call it at start (through
    :func:`dp_ops.reports.registry.prepare_noise_samplers`), so that each symptoms
    ``report`` and ``gate`` task does not build them again. Values noised at other
    parameters (an older config) build their own."""
    a, b = cfg.budget(SYMPTOM_METRIC), cfg.budget(VOLUME_METRIC)
    for n_days in (1, 7):
        for alpha in (cfg.reliability_test_level, INTERVAL_ALPHA):
            ratio_test_for(a.cell_epsilon, a.sensitivity, b.cell_epsilon, b.sensitivity,
                           n_days, alpha)
    return 4


@lru_cache(maxsize=64)
def _ratio_test(a_epsilon: float, a_sensitivity: int, b_epsilon: float, b_sensitivity: int,
                n_days: int, alpha: float) -> RatioTest:
    return ratio_test(discrete_laplace(a_epsilon, a_sensitivity, n_days),
                      discrete_laplace(b_epsilon, b_sensitivity, n_days), alpha=alpha,
                      edges=ratio_edges(0.0, RATIO_START, MAX_RATIO), bounded=True)


def _may_pass(a: NDArray[np.float64], b: NDArray[np.float64], low_end: NDArray[np.float64],
              high_end: NDArray[np.float64], test: RatioTest, tolerance: float
              ) -> NDArray[np.bool_]:
    """A necessary condition for the verdict (module docstring, Cost): False only where
    the value cannot be reliable.

    With ``L = (1 - t) R``, ``U = (1 + t) R`` and cell ``j``'s possibly-accepted part
    ``[max(e_j, (A - Q_j) / B), min(e_j+1, (A + Q_j) / B)]`` (empty when the first end
    exceeds the second), the hull's lower end is the smallest first end of a non-empty
    part. Reliable needs ``A, B > 0`` and a non-empty hull with ``L <= lower`` and
    ``upper <= U``. If ``L`` is above the top edge, every part lies below ``L``: never
    reliable. Else take the cell with ``e_j < L <= e_j+1``: a non-empty part must start
    at or after ``L > e_j``, so ``(A - Q_j) / B >= L``, i.e. ``Q_j <= A - L B = t A``; an
    empty part means ``(A - Q_j) / B > e_j+1 >= L`` (the same), or ``(A + Q_j) / B < e_j
    < R`` or ``Q_j < 0``, both giving ``Q_j < 0``. Symmetrically, when ``U`` is below the
    top edge, the cell with ``e_k <= U < e_k+1`` needs ``Q_k <= U B - A = t A``. A
    relative slack of 1e-9 absorbs floating rounding."""
    edges, q = test.edges, test.thresholds
    top = edges[-1]
    ok = (a > 0) & (b > 0) & np.isfinite(a) & np.isfinite(b) & (low_end <= top)
    allowed = tolerance * a * (1 + _SLACK) + _SLACK
    # the cell (e_j, e_j+1] holding (1 - t) R; (1 - t) R > 0 where ok
    j = np.searchsorted(edges, np.where(ok, low_end, top), side="left") - 1
    ok &= q[np.clip(j, 0, q.size - 1)] <= allowed
    # the cell [e_k, e_k+1) holding (1 + t) R, when it is below the top edge
    below = ok & (high_end < top)
    k = np.searchsorted(edges, np.where(below, high_end, 0.0), side="right") - 1
    ok &= ~below | (q[np.clip(k, 0, q.size - 1)] <= allowed)
    return np.asarray(ok, dtype=bool)


def apply_test(a_noisy: ArrayLike, b_noisy: ArrayLike, test: RatioTest, tolerance: float
               ) -> dict[str, NDArray[np.float64] | NDArray[np.bool_]]:
    """The rule's verdict on noisy ``A``, ``B`` (broadcast together) given their ratio
    ``test``: ``ratio`` (``A / B``, NaN where ``B <= 0``), ``lower`` and ``upper`` (the
    test's hull, NaN where the value is rejected without it: ``A <= 0``, ``B <= 0``, or
    the pre-test of the module docstring) and ``reliable`` (published), all 1-d.

    ``reliable`` is ``A > 0``, ``B > 0``, ``lower <= upper``, ``lower >= (1 - t) R`` and
    ``upper <= (1 + t) R``: with a test at level ``1 - p``, ``P(reliable and the true ratio
    is more than t R off) <= 1 - p`` for every true ``(a, b)`` with ``a <= b``.
    """
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance={tolerance!r}: must be in (0, 1)")
    a, b = np.broadcast_arrays(np.atleast_1d(np.asarray(a_noisy, dtype=np.float64)),
                               np.atleast_1d(np.asarray(b_noisy, dtype=np.float64)))
    a, b = a.ravel(), b.ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(b > 0, a / b, np.nan)
    low_end = (1 - tolerance) * ratio   # NaN where B <= 0: compares False
    high_end = (1 + tolerance) * ratio
    lower = np.full(a.shape, np.nan)
    upper = np.full(a.shape, np.nan)
    reliable = np.zeros(a.shape, dtype=bool)
    rows = np.flatnonzero(_may_pass(a, b, low_end, high_end, test, tolerance))
    if rows.size:
        lo, hi = test.hull(a[rows], b[rows])
        lower[rows], upper[rows] = lo, hi
        reliable[rows] = (lo <= hi) & (lo >= low_end[rows]) & (hi <= high_end[rows])
    return {"ratio": ratio, "lower": lower, "upper": upper, "reliable": reliable}


def reliability(a_noisy: ArrayLike, b_noisy: ArrayLike, *, a_epsilon: float,
                a_sensitivity: int, b_epsilon: float, b_sensitivity: int,
                n_days: int | ArrayLike, cfg: SymptomsConfig) -> pd.DataFrame:
    """Ratio, hull and verdict for noisy ``A`` (sums of ``n_days`` daily cells at
    ``a_epsilon``/``a_sensitivity``) and ``B`` (likewise at ``b_epsilon``/``b_sensitivity``).

    ``n_days`` is an int or an integer array aligned with the values; each distinct
    ``n`` uses the test of its own law (:func:`ratio_test_for` at level
    ``cfg.reliability_test_level``), judged with ``cfg.reliability_tolerance``
    (:func:`apply_test`). Returns columns ``ratio``, ``lower``, ``upper``, ``reliable``;
    the index is ``a_noisy``'s if it is a Series, else 0..n-1.
    """
    a = np.asarray(a_noisy, dtype=np.float64)
    b = np.asarray(b_noisy, dtype=np.float64)
    n = np.asarray(n_days)
    a, b, n = np.broadcast_arrays(np.atleast_1d(a), np.atleast_1d(b), np.atleast_1d(n))
    a, b, n = a.ravel(), b.ravel(), n.ravel()
    if n.dtype.kind not in "iu" or np.any(n < 1):
        raise ValueError(f"n_days: must be integers >= 1 (got {np.unique(n)[:5]!r})")
    out = {"ratio": np.full(a.shape, np.nan), "lower": np.full(a.shape, np.nan),
           "upper": np.full(a.shape, np.nan), "reliable": np.zeros(a.shape, dtype=bool)}
    alpha = cfg.reliability_test_level
    for k in np.unique(n):
        rows = np.flatnonzero(n == k)
        test = ratio_test_for(a_epsilon, a_sensitivity, b_epsilon, b_sensitivity, int(k),
                              alpha)
        verdict = apply_test(a[rows], b[rows], test, cfg.reliability_tolerance)
        for column in VERDICT_COLUMNS:
            out[column][rows] = verdict[column]
    index = a_noisy.index if isinstance(a_noisy, pd.Series) else None
    return pd.DataFrame(out, index=index)


def ratio_interval(a_noisy: ArrayLike, b_noisy: ArrayLike, *, a_epsilon: float,
                   a_sensitivity: int, b_epsilon: float, b_sensitivity: int, n_days: int
                   ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The published interval of the true ratio ``a / b``: the hull of the exact test of
    the module docstring at level ``1 - INTERVAL_LEVEL``, so it holds the true ratio with
    probability at least ``INTERVAL_LEVEL`` whatever the true ``(a, b)`` are (the test's
    guarantee); post-processing of the noisy values, no budget. Where the test rejects
    every ratio (probability at most ``1 - INTERVAL_LEVEL`` at the truth) the interval is
    the whole range ``[0, 1]``, as that event is already counted against the level."""
    a = np.atleast_1d(np.asarray(a_noisy, dtype=np.float64))
    b = np.atleast_1d(np.asarray(b_noisy, dtype=np.float64))
    test = ratio_test_for(a_epsilon, a_sensitivity, b_epsilon, b_sensitivity, n_days,
                          INTERVAL_ALPHA)
    lo, hi = test.hull(a, b)
    empty = ~(lo <= hi)
    return (np.where(empty, 0.0, np.clip(lo, 0.0, MAX_RATIO)),
            np.where(empty, MAX_RATIO, np.clip(hi, 0.0, MAX_RATIO)))
