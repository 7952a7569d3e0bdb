"""The promise among the values actually published: which of the values the reliability
rule passes a release publishes.

The rule bounds each value's error before selection; among the published values of a
family (one date, level, set of noise parameters and number of summed days) near-empty
cells published by luck can outnumber the real signals. Per family, the law of the true
ratios is estimated by nonparametric maximum likelihood (EM on ``GRID``), each value's
posterior probability of lying outside its tolerance follows (:func:`posterior`), and the
largest set of the values the rule passes whose mean of those probabilities is at most
the bound is published (:func:`select_published`), with intervals widened to hold the
posterior's (:func:`widened`). Why the rule alone is not enough, the method and what it
guarantees are in docs/design.md, Derivations."""

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
