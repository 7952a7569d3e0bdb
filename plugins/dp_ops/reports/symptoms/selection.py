r"""The promise among the values actually published: which of the values the reliability
rule passes a release publishes.

Why the rule alone is not enough
--------------------------------
The rule (:mod:`dp_ops.reports.symptoms.reliability`) bounds, for every value and every
true ``(a, b)``, the probability that the value is published *and* its true ratio lies
outside ``[(1 - t) R, (1 + t) R]`` (``R = A / B``, ``t`` the tolerance). That is a
statement about each value before selection. A reader sees only the published values, and
the share of them within the tolerance can be far below the promise: a weekly family of a
fine level holds tens of thousands of near-empty cells, each published with a small
probability when its noise happens to be large, and together they outnumber the real
signals the rule lets through (on a small population they can outnumber them among
the published weekly values of the finest level).

Method: empirical Bayes, one family at a time
---------------------------------------------
A *family* is the set of values decided together: one date (a day, or the Monday of a
week), one level, one set of noise parameters and number of summed days. Within a family,
value ``i`` has noisy ``A_i`` and ``B_i`` and an unknown true ratio ``r_i`` in ``[0, 1]``.

- Likelihood. Given ``r_i = rho``, ``A_i - rho B_i = Z_A - rho Z_B``. The rule's test
  uses this law exactly; here ``rho Z_B`` is left out (true ratios are small: a symptom's
  share of all searchers) and the likelihood of ``rho`` is
  ``P(Z_A = round(A_i - rho B_i))``, ``Z_A`` the exact law of the value's summed discrete
  Laplace noise (:func:`dp_ops.privacy.inference.discrete_laplace_pmf`).
- Prior. The family's true ratios are treated as draws from an unknown law ``G``, the
  family's own distribution of ratios. ``G`` is estimated on :data:`GRID` (0, then
  :data:`GRID_POINTS` points spaced geometrically from 1e-4 to 1) by nonparametric maximum
  likelihood (Kiefer and Wolfowitz), with :data:`EM_ITERATIONS` EM steps from the uniform
  law: a fixed number, so the same noisy values always give the same decision.
- Posterior. ``off_i = P(r_i not in [(1 - t) R_i, (1 + t) R_i] | A_i, B_i)`` under the
  estimated ``G`` (:func:`posterior`).
- Selection. Of the values the rule passes that the release can publish (its eligible
  regions; daily values only of series it publishes daily), per resolution, date and
  level, taken in increasing ``off_i``, the largest leading set whose mean ``off_i`` is
  at most the bound (:func:`select_published`). The fit reads the whole family; the
  selection only the publishable values: a value of a series published daily is one of
  a strong series, better than the family's law says, so its ``off_i`` errs on the safe
  side.
  The mean of ``off_i`` over a set is the expected share of its values outside the
  tolerance, so the release publishes, per family, the largest set whose expected share
  within the tolerance is at least ``1 - bound``. This is Bayesian false discovery rate
  control with local false discovery rates (Efron 2001; Sun and Cai 2007), the "false
  discovery" being a published value outside its tolerance.
- Intervals. A published value's interval (the hull of the exact test at level
  ``1 - INTERVAL_LEVEL``) is widened to also hold its posterior interval at the same
  level (:func:`widened`): the test's hull alone covers with probability 0.95 for every
  value before selection, but among the lucky near-empty values a release publishes it
  covers far less; the union keeps the first guarantee and adds the second, under the
  same model as the selection.
- The bound is ``reliability_test_level`` (0.45, at most ``1 - p``): the same level the
  per-value test uses, so the share among published values is held at the level the rule
  holds each value at, which leaves room for the estimation error of ``G`` and for the
  randomness of a finite release.

What it guarantees, and what it does not
----------------------------------------
It only withholds values the rule passed, so the rule's per-value guarantee is untouched.
The share among published values is an estimate: it is exact if ``G`` is the family's
distribution of true ratios and the left-out ``rho Z_B`` is negligible, and
``tests/unit/reports/symptoms/test_symptoms_selection.py`` checks it by simulation on a
family shaped like the one that failed. It is not a worst-case bound: a family whose true
ratios the noise hides completely can be misjudged. ``python -m dp_ops evaluate symptoms``
measures the realised share for any data root. Everything here reads noisy values and
public parameters only: post-processing, no privacy budget.

Cost
----
Values with the same ``(A, B)`` share a likelihood row, so the fit runs on the distinct
pairs (a few thousand in a family of tens of thousands); families where the rule passes
nothing are not fitted at all.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from dp_ops.privacy.inference import discrete_laplace_pmf
from dp_ops.reports.symptoms.reliability import INTERVAL_ALPHA, MAX_RATIO, RATIO_START
from dp_ops.reports.symptoms.schema import NOISE_PARAMETERS

__all__ = ["EM_ITERATIONS", "FAMILY_KEYS", "GRID", "GRID_POINTS", "FamilyPosterior",
           "family_posteriors", "posterior", "select_published", "select_within_bound",
           "widened"]

GRID_POINTS = 160
# True ratios the prior may hold: 0, then geometric steps of about 6% (the tolerance band
# of +/-25% spans about eight of them) from 1e-4 (one searcher in 10,000) to 1.
GRID: NDArray[np.float64] = np.concatenate(
    ([0.0], np.geomspace(RATIO_START, MAX_RATIO, GRID_POINTS)))
GRID.setflags(write=False)
EM_ITERATIONS = 150
# The columns that, with a date, make a family: values decided together.
FAMILY_KEYS: tuple[str, ...] = ("level", *NOISE_PARAMETERS, "n_days")


class FamilyPosterior(NamedTuple):
    """Per value of a family: ``off``, the posterior probability that its true ratio lies
    outside its tolerance band, and ``low``/``high``, a posterior interval of its true
    ratio at :data:`~dp_ops.reports.symptoms.reliability.INTERVAL_LEVEL` (one grid step
    outward on each side, as a true ratio may lie between grid points). Values the fit
    cannot judge (``B <= 0``, ``A`` explained by no ratio) get ``off`` 1 and ``[0, 1]``;
    ``A <= 0`` gets ``off`` 1 (``R`` is no positive ratio) and its posterior interval."""

    off: NDArray[np.float64]
    low: NDArray[np.float64]
    high: NDArray[np.float64]


def posterior(a_noisy: ArrayLike, b_noisy: ArrayLike, *, a_epsilon: float,
              a_sensitivity: int, n_days: int, tolerance: float) -> FamilyPosterior:
    """For one family (module docstring), each value's :class:`FamilyPosterior` under the
    family's estimated law of true ratios."""
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance={tolerance!r}: must be in (0, 1)")
    a = np.atleast_1d(np.asarray(a_noisy, dtype=np.int64)).ravel()
    b = np.atleast_1d(np.asarray(b_noisy, dtype=np.int64)).ravel()
    if a.shape != b.shape:
        raise ValueError(f"a_noisy and b_noisy differ in length ({a.size} vs {b.size})")
    result = FamilyPosterior(np.ones(a.shape), np.zeros(a.shape), np.full(a.shape, MAX_RATIO))
    usable = b > 0
    if not usable.any():
        return result
    pairs, inverse, counts = np.unique(np.stack([a[usable], b[usable]]), axis=1,
                                       return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    margin, pmf = discrete_laplace_pmf(a_epsilon, a_sensitivity, n_days)
    pair_a, pair_b = pairs[0].astype(np.float64), pairs[1].astype(np.float64)
    at = np.rint(pair_a[:, None] - GRID[None, :] * pair_b[:, None]).astype(np.int64) + margin
    likelihood = np.where((at >= 0) & (at < pmf.size), pmf[np.clip(at, 0, pmf.size - 1)], 0.0)
    explained = likelihood.sum(axis=1) > 0
    weight = np.where(explained, counts, 0).astype(np.float64)
    weight /= weight.sum()
    prior = np.full(GRID.size, 1.0 / GRID.size)
    for _ in range(EM_ITERATIONS):
        marginal = likelihood @ prior
        prior = prior * (likelihood.T @ np.divide(weight, marginal, out=np.zeros_like(weight),
                                                  where=marginal > 0))
    joint = likelihood * prior
    marginal = joint.sum(axis=1)
    judged = explained & (marginal > 0)
    post = np.divide(joint, marginal[:, None], out=np.zeros_like(joint),
                     where=judged[:, None])
    ratio = pair_a / pair_b
    inside = ((GRID[None, :] >= (1 - tolerance) * ratio[:, None])
              & (GRID[None, :] <= (1 + tolerance) * ratio[:, None]))
    off = np.where(judged & (pair_a > 0), np.clip(1.0 - (post * inside).sum(axis=1), 0.0, 1.0),
                   1.0)
    cumulative = np.cumsum(post, axis=1)
    tail = INTERVAL_ALPHA / 2
    first = np.argmax(cumulative > tail, axis=1)
    last = np.argmax(cumulative >= 1 - tail, axis=1)
    low = np.where(judged, GRID[np.maximum(first - 1, 0)], 0.0)
    high = np.where(judged, GRID[np.minimum(last + 1, GRID.size - 1)], MAX_RATIO)
    result.off[usable] = off[inverse]
    result.low[usable] = low[inverse]
    result.high[usable] = high[inverse]
    return result


def select_within_bound(off: ArrayLike, candidate: ArrayLike, bound: float
                        ) -> NDArray[np.bool_]:
    """The largest set of ``candidate`` values, taken in increasing ``off`` (ties in
    order of position), whose mean ``off`` is at most ``bound``; a boolean mask."""
    if not 0 < bound < 1:
        raise ValueError(f"bound={bound!r}: must be in (0, 1)")
    off_values = np.asarray(off, dtype=np.float64)
    mask = np.asarray(candidate, dtype=bool)
    keep = np.zeros(mask.shape, dtype=bool)
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        return keep
    order = rows[np.argsort(off_values[rows], kind="stable")]
    # sorted increasing, the running mean never decreases: the last index within the
    # bound ends the largest leading set
    within = np.flatnonzero(np.cumsum(off_values[order])
                            <= bound * np.arange(1, order.size + 1))
    if within.size:
        keep[order[:within[-1] + 1]] = True
    return keep


def family_posteriors(values: pd.DataFrame, *, tolerance: float) -> FamilyPosterior:
    """:func:`posterior` of every row of ``values``, fitted family by family; rows of
    families where the rule passes nothing are not fitted (``off`` 1, interval NaN).
    ``values`` holds ``a_noisy``, ``b_noisy``, ``reliable``, :data:`FAMILY_KEYS` and,
    when it spans several dates, ``date``; every value of a family must be in it (the fit
    reads the whole family, passing or not)."""
    reliable = values["reliable"].to_numpy(dtype=bool)
    out = FamilyPosterior(np.ones(len(values)), np.full(len(values), np.nan),
                          np.full(len(values), np.nan))
    if not reliable.any():
        return out
    keys = [*FAMILY_KEYS, *(["date"] if "date" in values.columns else [])]
    for key, idx in values.groupby(keys, sort=False).indices.items():
        if not reliable[idx].any():
            continue
        family = dict(zip(keys, key, strict=True))
        fit = posterior(values["a_noisy"].to_numpy()[idx], values["b_noisy"].to_numpy()[idx],
                        a_epsilon=float(family["a_epsilon"]),
                        a_sensitivity=int(family["a_sensitivity"]),
                        n_days=int(family["n_days"]), tolerance=tolerance)
        out.off[idx], out.low[idx], out.high[idx] = fit
    return out


def select_published(values: pd.DataFrame, bound: float) -> NDArray[np.bool_]:
    """Which of a release's publishable values (``values``: ``resolution``, ``date``,
    ``level``, ``off``; values of series at the other resolution or of ineligible regions
    left out) it publishes: per resolution, date and level, the largest set whose mean
    ``off`` is at most ``bound`` (:func:`select_within_bound`)."""
    keep = np.zeros(len(values), dtype=bool)
    off = values["off"].to_numpy(dtype=np.float64)
    for idx in values.groupby(["resolution", "date", "level"], sort=False).indices.values():
        keep[idx] = select_within_bound(off[idx], np.ones(idx.size, dtype=bool), bound)
    return keep


def widened(passing: pd.DataFrame, low: ArrayLike, high: ArrayLike) -> pd.DataFrame:
    """``passing`` (published values with the test's interval ``low``/``high``) with each
    interval widened to hold the value's posterior interval too (``low``/``high``
    aligned with its rows): the union still holds the true ratio with probability at
    least ``INTERVAL_LEVEL`` for any true counts (it contains the test's hull), and holds
    it among the published values as the posterior does (module docstring)."""
    out = passing.copy()
    out["low"] = np.fmin(out["low"].to_numpy(np.float64), np.asarray(low, dtype=np.float64))
    out["high"] = np.fmax(out["high"].to_numpy(np.float64), np.asarray(high, dtype=np.float64))
    return out
