"""The selection-aware publication of symptoms values
(:mod:`dp_ops.reports.symptoms.selection`): exact tests of its pieces, and a simulation of
a family shaped like the one where the rule alone broke its promise among published values
(level-2 weekly values of a 30,000-user population: half of the true counts 0, nine in ten
at most 5, one in 200 a real signal)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dp_ops.privacy.inference import discrete_laplace_pmf
from dp_ops.reports.symptoms.config import SYMPTOM_METRIC, VOLUME_METRIC, SymptomsConfig
from dp_ops.reports.symptoms.reliability import (
    INTERVAL_ALPHA,
    MAX_RATIO,
    apply_test,
    ratio_interval,
    ratio_test_for,
)
from dp_ops.reports.symptoms.selection import (
    GRID,
    family_posteriors,
    posterior,
    select_published,
    select_within_bound,
    widened,
)

CFG = SymptomsConfig()
A_CELL, B_CELL = CFG.budget(SYMPTOM_METRIC), CFG.budget(VOLUME_METRIC)
TOLERANCE = CFG.reliability_tolerance
BOUND = CFG.reliability_test_level


def _noise(rng: np.random.Generator, epsilon: float, sensitivity: int, shape: tuple[int, ...],
           n_days: int) -> np.ndarray:
    """Sums of ``n_days`` discrete Laplace draws (a difference of two geometrics), for
    simulation only: the release draws from the secure sampler."""
    p = 1 - np.exp(-epsilon / sensitivity)
    size = (n_days, *shape)
    return (rng.geometric(p, size) - rng.geometric(p, size)).sum(axis=0)


def _fit(a: np.ndarray, b: np.ndarray, n_days: int = 7):
    return posterior(a, b, a_epsilon=A_CELL.cell_epsilon, a_sensitivity=A_CELL.sensitivity,
                     n_days=n_days, tolerance=TOLERANCE)


# -- select_within_bound ----------------------------------------------------------------

def test_keeps_the_largest_leading_set_within_the_bound() -> None:
    off = np.array([0.1, 0.9, 0.3, 0.6])
    # increasing: 0.1, 0.3, 0.6, 0.9; running means 0.1, 0.2, 0.333.., 0.475
    assert select_within_bound(off, np.ones(4, bool), 0.45).tolist() == [
        True, False, True, True]
    assert select_within_bound(off, np.ones(4, bool), 0.475).all()
    # only candidates count: 0.3, 0.6, 0.9 have running means 0.3, 0.45, 0.6 (0.45 is kept)
    candidate = np.array([False, True, True, True])
    assert select_within_bound(off, candidate, 0.45).tolist() == [False, False, True, True]
    assert not select_within_bound(off, candidate, 0.2).any()
    assert not select_within_bound(off, np.zeros(4, bool), 0.45).any()
    # a single candidate is kept when its own off is within the bound
    assert select_within_bound([0.9, 0.1], [False, True], 0.45).tolist() == [False, True]


def test_ties_are_taken_in_order_of_position() -> None:
    off = np.array([0.5, 0.2, 0.5, 0.5])
    # 0.2, then the 0.5s in position order: means 0.2, 0.35, 0.4, 0.425
    assert select_within_bound(off, np.ones(4, bool), 0.4).tolist() == [True, True, True,
                                                                          False]
    # a long run of ties, cut inside it: numpy's default sort (not stable past 16 values)
    # would keep other positions
    off = np.tile([0.9, 0.0], 20)
    # the 20 zeros, then 0.9s while 0.9 k / (20 + k) <= 0.31: k = 10, the first ten by position
    keep = select_within_bound(off, np.ones(40, bool), 0.31)
    assert np.flatnonzero(keep & (off > 0)).tolist() == list(range(0, 20, 2))


@pytest.mark.parametrize("bound", [0.0, 1.0, -0.1, float("nan")])
def test_a_bound_outside_0_1_is_refused(bound: float) -> None:
    with pytest.raises(ValueError, match="bound"):
        select_within_bound([0.1], [True], bound)


# -- posterior ---------------------------------------------------------------------------

def test_a_family_of_empty_cells_leaves_its_lucky_values_off() -> None:
    # 20,000 cells with no searcher at all: whatever passes the rule is noise
    rng = np.random.default_rng(7)
    a = _noise(rng, A_CELL.cell_epsilon, A_CELL.sensitivity, (20_000,), 7)
    b = np.full(20_000, 2_000)
    fit = _fit(a, b)
    high = a >= np.quantile(a, 0.999)
    assert fit.off[high].min() > 0.95
    # and the posterior interval of such a value reaches down to (near) 0
    assert fit.low[high].max() <= GRID[2]


def test_a_family_of_strong_signals_keeps_them() -> None:
    # true ratio 0.1 of 10,000: A about 1,000 with noise of standard deviation about 25
    rng = np.random.default_rng(8)
    b = np.full(2_000, 10_000)
    a = 1_000 + _noise(rng, A_CELL.cell_epsilon, A_CELL.sensitivity, (2_000,), 7)
    fit = _fit(a, b)
    assert fit.off.max() < 0.05
    assert ((fit.low <= 0.1) & (0.1 <= fit.high)).mean() > 0.99


def test_values_the_fit_cannot_judge_are_off_with_the_whole_range() -> None:
    a = np.array([50, 0, -3, 10**7, 40])
    b = np.array([0, 1_000, 1_000, 1_000, -5])
    fit = _fit(a, b)
    # B <= 0 (rows 0, 4) and an A no ratio of [0, 1] explains (row 3): off, [0, 1]
    for row in (0, 3, 4):
        assert (fit.off[row], fit.low[row], fit.high[row]) == (1.0, 0.0, MAX_RATIO)
    # A <= 0: no positive ratio to be near
    assert fit.off[1] == fit.off[2] == 1.0
    # the noise law's last point explains a value, one past it does not: A = -margin is
    # explained by a true ratio of 0 (a posterior interval), A = -margin - 1 by none
    margin, _ = discrete_laplace_pmf(A_CELL.cell_epsilon, A_CELL.sensitivity, 7)
    edge = _fit(np.array([-margin, -margin - 1, 5]), np.array([1_000, 1_000, 1_000]))
    assert edge.high[0] < MAX_RATIO and edge.high[1] == MAX_RATIO
    # B = 1 is the smallest B the fit judges: a posterior interval, not the whole range
    one = _fit(np.array([1, 0, 1, 2]), np.array([1, 1, 2, 1]))
    assert one.off[0] < 1 and (one.high < MAX_RATIO).all()


def test_posterior_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="tolerance"):
        posterior([1], [2], a_epsilon=0.1, a_sensitivity=1, n_days=1, tolerance=1.0)
    with pytest.raises(ValueError, match="tolerance"):
        posterior([1], [2], a_epsilon=0.1, a_sensitivity=1, n_days=1, tolerance=0.0)
    with pytest.raises(ValueError, match="differ in length"):
        _fit(np.array([1, 2]), np.array([3]))


def test_the_same_values_give_the_same_decision() -> None:
    rng = np.random.default_rng(9)
    a = np.maximum(rng.poisson(3, 5_000), 0) + _noise(
        rng, A_CELL.cell_epsilon, A_CELL.sensitivity, (5_000,), 7)
    b = np.full(5_000, 800)
    first, again = _fit(a, b), _fit(a.copy(), b.copy())
    for x, y in zip(first, again, strict=True):
        np.testing.assert_array_equal(x, y)


# -- selected and widened ------------------------------------------------------------------

def _frame(a: np.ndarray, b: np.ndarray, reliable: np.ndarray, **keys: object
           ) -> pd.DataFrame:
    return pd.DataFrame({"level": 2, "a_epsilon": A_CELL.cell_epsilon,
                         "a_sensitivity": A_CELL.sensitivity,
                         "b_epsilon": B_CELL.cell_epsilon,
                         "b_sensitivity": B_CELL.sensitivity, "n_days": 7,
                         "a_noisy": a, "b_noisy": b, "reliable": reliable, **keys})


def test_each_family_is_fitted_on_its_own() -> None:
    rng = np.random.default_rng(10)
    n = 20_000
    empty = _noise(rng, A_CELL.cell_epsilon, A_CELL.sensitivity, (n,), 7)
    strong = 1_000 + _noise(rng, A_CELL.cell_epsilon, A_CELL.sensitivity, (n,), 7)
    lucky = empty >= np.sort(empty)[-5]
    frame = pd.concat([
        _frame(empty, np.full(n, 2_000), lucky, date="2020-03-02"),
        _frame(strong, np.full(n, 10_000), np.ones(n, bool), date="2020-03-09")],
        ignore_index=True)
    fit = family_posteriors(frame, tolerance=TOLERANCE)
    # the empty week's lucky values are all withheld, the strong week's all kept
    assert not select_within_bound(fit.off[:n], lucky, BOUND).any()
    assert fit.off[n:].max() < 0.05
    # pooled into one family the strong values would hide the lucky ones
    pooled = family_posteriors(frame.drop(columns="date"), tolerance=TOLERANCE)
    assert select_within_bound(pooled.off, frame["reliable"], BOUND)[:n].sum() == lucky.sum()
    # a family where the rule passes nothing is not fitted
    none = family_posteriors(frame.assign(reliable=False), tolerance=TOLERANCE)
    assert (none.off == 1).all() and np.isnan(none.low).all() and np.isnan(none.high).all()
    # ... and does not stop the families after it from being fitted
    first_none = family_posteriors(frame.assign(reliable=np.arange(2 * n) >= n),
                                   tolerance=TOLERANCE)
    assert (first_none.off[:n] == 1).all() and first_none.off[n:].max() < 0.05


def test_select_published_selects_per_resolution_date_and_level() -> None:
    values = pd.DataFrame({
        "resolution": ["daily"] * 3 + ["weekly"] * 3,
        "date": ["2020-03-02"] * 6,
        "level": [1, 1, 2, 1, 1, 1],
        "off": [0.9, 0.1, 0.9, 0.1, 0.6, 0.9]})
    # daily level 1: 0.1, 0.9 (mean 0.5 > 0.45): only the 0.1; daily level 2 alone: none;
    # weekly level 1: 0.1, 0.6 (mean 0.35), 0.9 (mean 0.533): the first two
    assert select_published(values, 0.45).tolist() == [False, True, False, True, True,
                                                        False]
    assert not select_published(values.iloc[:0], 0.45).any()


def test_widened_holds_both_intervals() -> None:
    passing = pd.DataFrame({"low": [0.10, 0.20, np.nan], "high": [0.20, 0.30, 0.4]})
    out = widened(passing, [0.05, 0.25, 0.3], [0.15, 0.35, np.nan])
    assert out["low"].tolist() == [0.05, 0.20, 0.3]
    assert out["high"].tolist() == [0.20, 0.35, 0.4]
    assert passing["low"].tolist()[:2] == [0.10, 0.20]  # the input is left alone


# -- the promise among published values, by simulation -------------------------------------

REGIONS, SYMPTOMS, WEEKS = 57, 422, 12


def _family(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """True weekly (a, b) of a level-2 family: B from 50 to 6,000 searchers a week; per
    cell a = 0 (half), 1..5 (0.497) or a real signal from 5 to 2,000 searchers (0.003),
    at most a fifth of B."""
    b = np.repeat(np.round(np.exp(rng.uniform(np.log(50), np.log(6_000), REGIONS))),
                  SYMPTOMS).astype(np.int64)
    u = rng.random(b.size)
    signal = np.round(np.exp(rng.uniform(np.log(5), np.log(2_000), b.size)))
    a = np.where(u < 0.5, 0, np.where(u < 0.997, rng.integers(1, 6, b.size), signal))
    return np.minimum(a, np.floor(0.2 * b)).astype(np.int64), b


@pytest.mark.slow
def test_published_values_keep_the_promise_where_the_rule_alone_does_not() -> None:
    """Twelve weeks of such a family, about 700 values the rule passes.

    False-failure rate: with the fixed seed the outcome is fixed. Over 40 other seeds the
    rule alone published 29-38% within the tolerance (mean 33.9%, sd 1.9 points), the
    selection 50.4-57.4% (mean 54.3%, sd 1.6) keeping 52-70% of the values, and the
    widened intervals covered 92.2-97.7% of the published true ratios (mean 95.7%, sd
    1.2). The bounds below sit about three standard deviations or more from those means
    (a seed failing them: well under 1%); the naive bound on the test's hull alone (about
    55% coverage) is 20 points away."""
    rng = np.random.default_rng(2020)
    test = ratio_test_for(A_CELL.cell_epsilon, A_CELL.sensitivity, B_CELL.cell_epsilon,
                          B_CELL.sensitivity, 7, BOUND)
    before = within_before = after = within_after = covered = naive_covered = 0
    for _ in range(WEEKS):
        a, b = _family(rng)
        noisy_a = a + _noise(rng, A_CELL.cell_epsilon, A_CELL.sensitivity, a.shape, 7)
        noisy_b = np.repeat(b[::SYMPTOMS] + _noise(rng, B_CELL.cell_epsilon,
                                                   B_CELL.sensitivity, (REGIONS,), 7),
                            SYMPTOMS)
        verdict = apply_test(noisy_a, noisy_b, test, TOLERANCE)
        ratio, truth = verdict["ratio"], a / b
        within = np.abs(ratio - truth) <= TOLERANCE * ratio
        fit = family_posteriors(_frame(noisy_a, noisy_b, verdict["reliable"]),
                                tolerance=TOLERANCE)
        keep = select_within_bound(fit.off, verdict["reliable"], BOUND)
        before += int(verdict["reliable"].sum())
        within_before += int((verdict["reliable"] & within).sum())
        after += int(keep.sum())
        within_after += int((keep & within).sum())
        low, high = ratio_interval(noisy_a[keep], noisy_b[keep],
                                   a_epsilon=A_CELL.cell_epsilon,
                                   a_sensitivity=A_CELL.sensitivity,
                                   b_epsilon=B_CELL.cell_epsilon,
                                   b_sensitivity=B_CELL.sensitivity, n_days=7)
        naive_covered += int(((low <= truth[keep]) & (truth[keep] <= high)).sum())
        wide_low, wide_high = np.fmin(low, fit.low[keep]), np.fmax(high, fit.high[keep])
        covered += int(((wide_low <= truth[keep]) & (truth[keep] <= wide_high)).sum())
    share_before, share_after = within_before / before, within_after / after
    print(f"before {before} published, {share_before:.3f} within; after {after}, "
          f"{share_after:.3f}; 95% interval coverage {covered / after:.3f} "
          f"(the test's alone {naive_covered / after:.3f})")
    assert share_before < CFG.reliability_probability - 0.05   # the rule alone breaks it
    assert share_after > CFG.reliability_probability           # the selection keeps it
    assert after >= 0.45 * before
    # among the published, the widened intervals cover about as promised; the test's
    # hull alone does not come near
    assert covered / after >= 1 - INTERVAL_ALPHA - 0.03
    assert naive_covered / after < 1 - INTERVAL_ALPHA - 0.2
