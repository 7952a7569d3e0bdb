"""The symptoms reliability rule (dp_ops.reports.symptoms.reliability): the ratio test per
parameter set, the coverage of its hull checked by simulation, the pre-test that spares
the hull of values that cannot pass, and the verdict's edge cases.

The promise itself (P(published and off by more than 25%) <= 50%) is checked by an
adversarial search in ``test_symptoms_reliability_search.py``.

False failures. Every statistical test draws from ``noise_generator(key=...)`` with a fixed
key, so it is deterministic. Thresholds are still set as if the randomness were fresh:

- coverage of the hull, ``COVERAGE_DRAWS`` = 4000 draws in each of 14 cases: at least
  p - k sqrt(0.25 / 4000) with k = 5.8, so that a case whose true coverage is p = 0.5 falls
  below with probability < exp(-k^2 / 2) (Hoeffding) and the 14 cases together with
  probability < 1e-6. The true coverage is about 0.50-0.58 (the test is nearly exact:
  each tail is 0.2485-0.2499 at small ratios), so this floor (0.454) is what a correct
  construction must pass, not a measured figure;
- the same check's power: a test that leaves out B's noise covers a true ratio of 1 in
  about 0.32 of the draws, daily and weekly; it reaches the floor 0.454 with probability
  < 1e-50 (Hoeffding, 4000 draws);
- everything else is deterministic (exact comparisons on fixed inputs).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from dp_ops.privacy.inference import RatioTest, discrete_laplace, exact, ratio_edges, ratio_test
from dp_ops.privacy.noise import noise_generator, sample_discrete_laplace
from dp_ops.reports.symptoms.config import SYMPTOM_METRIC, VOLUME_METRIC, SymptomsConfig
from dp_ops.reports.symptoms.reliability import (
    MAX_RATIO,
    RATIO_START,
    apply_test,
    ratio_test_for,
    reliability,
)

CFG = SymptomsConfig()
A_EPSILON = CFG.budget(SYMPTOM_METRIC).cell_epsilon
B_EPSILON = CFG.budget(VOLUME_METRIC).cell_epsilon
ALPHA = CFG.reliability_test_level
TOLERANCE = CFG.reliability_tolerance


def production_test(n: int) -> RatioTest:
    return ratio_test_for(A_EPSILON, 1, B_EPSILON, 1, n, ALPHA)


def full_verdict(a: np.ndarray, b: np.ndarray, n: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rule as written in the reliability module's docstring, from the hull of every
    value: (reliable, lower, upper)."""
    lo, hi = production_test(n).hull(a, b)
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(b > 0, a / b, np.nan)
    reliable = ((b > 0) & (a > 0) & (lo <= hi) & (lo >= (1 - TOLERANCE) * r)
                & (hi <= (1 + TOLERANCE) * r))
    return reliable, lo, hi


# -- the test per parameter set -------------------------------------------------------------

def test_the_test_is_cached_per_parameter_set() -> None:
    daily = production_test(1)
    assert ratio_test_for(A_EPSILON, 1, B_EPSILON, 1, 1, ALPHA) is daily
    assert ratio_test_for(np.float64(A_EPSILON), np.int64(1), B_EPSILON, 1, np.int64(1),
                          ALPHA) is daily
    weekly = production_test(7)
    assert weekly is not daily
    assert daily.alpha == ALPHA and daily.tail_u is None  # bounded: a <= b
    assert daily.edges[0] == 0.0 and daily.edges[1] == RATIO_START
    assert daily.edges[-1] >= MAX_RATIO
    # a week's noise is a sum of 7 draws: every threshold is larger
    assert np.all(weekly.thresholds > daily.thresholds)


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="alpha"):
        ratio_test_for(A_EPSILON, 1, B_EPSILON, 1, 1, 1.0)
    with pytest.raises(ValueError, match="n="):
        ratio_test_for(A_EPSILON, 1, B_EPSILON, 1, 0, ALPHA)
    with pytest.raises(ValueError, match=r"^tolerance=0\.0: must be in \(0, 1\)$"):
        apply_test(10, 100, production_test(1), 0.0)
    with pytest.raises(ValueError, match=r"^tolerance=1\.0: must be in \(0, 1\)$"):
        apply_test(10, 100, production_test(1), 1.0)
    with pytest.raises(ValueError, match="n_days"):
        reliability(np.array([10]), np.array([100]), a_epsilon=A_EPSILON, a_sensitivity=1,
                    b_epsilon=B_EPSILON, b_sensitivity=1, n_days=0, cfg=CFG)
    # the message shows the first five distinct values
    with pytest.raises(ValueError, match=re.escape(
            "n_days: must be integers >= 1 (got array([-5, -4, -3, -2, -1]))")):
        reliability(np.zeros(6), np.ones(6), a_epsilon=A_EPSILON, a_sensitivity=1,
                    b_epsilon=B_EPSILON, b_sensitivity=1, n_days=np.arange(-5, 1), cfg=CFG)


# -- coverage of the hull, by simulation ------------------------------------------------------

COVERAGE_DRAWS = 4000
# (true a, true b) per day: small and large counts, ratios 0 .. 1
COVERAGE_CASES = [(0, 500), (5, 1000), (60, 3000), (1000, 20_000), (100, 200), (20, 20),
                  (200, 200)]


def _draws(n: int, a: int, b: int, draws: int, key: int) -> tuple[np.ndarray, np.ndarray]:
    """``draws`` noisy (A, B) of a value summing ``n`` days of true (a, b)."""
    rng = noise_generator(key=key)
    z_a = sample_discrete_laplace(n * draws, epsilon=A_EPSILON, sensitivity=1,
                                  rng=rng).reshape(draws, n).sum(axis=1)
    z_b = sample_discrete_laplace(n * draws, epsilon=B_EPSILON, sensitivity=1,
                                  rng=rng).reshape(draws, n).sum(axis=1)
    return n * a + z_a, n * b + z_b


def _coverage_floor() -> float:
    cases = 2 * len(COVERAGE_CASES)
    k = math.sqrt(2 * math.log(cases / 1e-6))  # 5.8
    return 1 - ALPHA - k * math.sqrt(0.25 / COVERAGE_DRAWS)


@pytest.mark.parametrize("n", [1, 7])
def test_hull_covers_the_true_ratio(n: int) -> None:
    floor = _coverage_floor()
    test = production_test(n)
    for i, (a, b) in enumerate(COVERAGE_CASES):
        big_a, big_b = _draws(n, a, b, COVERAGE_DRAWS, key=100 * n + i)
        lower, upper = test.hull(big_a, big_b)
        covered = float(((lower <= a / b) & (a / b <= upper)).mean())
        assert covered >= floor, (n, a, b, covered)


@pytest.mark.parametrize("n", [1, 7])
def test_coverage_check_catches_a_test_without_bs_noise(n: int) -> None:
    """Power of the check above: leaving B's noise out of the test (``exact([0.0],
    [1.0])`` as its law) makes the hull too narrow where rho Z_B matters, at ratio 1."""
    naive = ratio_test(discrete_laplace(A_EPSILON, 1, n), exact([0.0], [1.0]), alpha=ALPHA,
                       edges=ratio_edges(0.0, RATIO_START, MAX_RATIO), bounded=True)
    big_a, big_b = _draws(n, 200, 200, COVERAGE_DRAWS, key=900 + n)
    lower, upper = naive.hull(big_a, big_b)
    covered = float(((lower <= 1.0) & (1.0 <= upper)).mean())
    assert covered < _coverage_floor(), covered  # measured about 0.32


# -- the verdict ----------------------------------------------------------------------------

def _adversarial_values(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy (A, B) over B = -20 .. 50,000 and A / B = -0.01 .. 1.5, dense where the
    verdict changes (small A, and ratios near the top of the range)."""
    rng = np.random.default_rng(20 + n)
    b = np.concatenate([np.arange(-20, 400), np.round(np.geomspace(400, 50_000, 400))])
    b = np.repeat(b, 60)
    ratio = np.concatenate([rng.uniform(-0.01, 1.5, b.size // 2),
                            np.exp(rng.uniform(np.log(1e-4), 0.0, b.size - b.size // 2))])
    a = np.round(b * ratio) + rng.integers(-3, 4, b.size)
    small = np.arange(-5, 150 * n)  # every small A against a few B
    a = np.concatenate([a, np.tile(small, 4)])
    b = np.concatenate([b, np.repeat([20 * n, 300 * n, 3000 * n, 40_000], small.size)])
    return a.astype(np.int64), b.astype(np.int64)


@pytest.mark.parametrize("n", [1, 7])
def test_the_pre_test_drops_no_reliable_value(n: int) -> None:
    a, b = _adversarial_values(n)
    verdict = apply_test(a, b, production_test(n), TOLERANCE)
    expected, lo, hi = full_verdict(a, b, n)
    assert 0.2 < expected.mean() < 0.8
    assert np.array_equal(verdict["reliable"], expected)
    # where a hull was computed, it is the test's hull
    kept = ~np.isnan(verdict["lower"])
    assert np.array_equal(verdict["lower"][kept], lo[kept])
    assert np.array_equal(verdict["upper"][kept], hi[kept])
    assert kept.mean() < 0.9  # the pre-test does spare some hulls


@pytest.mark.parametrize("n", [1, 7])
def test_a_reliable_value_has_its_hull_in_the_band(n: int) -> None:
    a, b = _adversarial_values(n)
    v = apply_test(a, b, production_test(n), TOLERANCE)
    ok = v["reliable"]
    ratio, lower, upper = v["ratio"][ok], v["lower"][ok], v["upper"][ok]
    assert np.all(lower >= (1 - TOLERANCE) * ratio) and np.all(upper <= (1 + TOLERANCE) * ratio)
    assert np.all(lower <= upper) and np.all(ratio > 0)
    # A / B is never rejected inside [0, 1]: the hull holds it
    inside = ratio <= 1
    assert np.all((lower[inside] <= ratio[inside]) & (ratio[inside] <= upper[inside]))


def test_values_that_cannot_pass_get_no_hull() -> None:
    a = np.array([-50, -1, 0, 100, 100, 100, 2000])
    b = np.array([10_000, 10_000, 10_000, 0, -5, 60, 1000])  # A / B = 5/3, 2: over 4/3
    v = apply_test(a, b, production_test(1), TOLERANCE)
    assert not v["reliable"].any()
    assert np.isnan(v["lower"]).all() and np.isnan(v["upper"]).all()
    assert np.isnan(v["ratio"][3:5]).all() and v["ratio"][2] == 0.0


def test_weekly_sums_need_more_than_daily_values() -> None:
    """At ratio 0.05 (B = 20 A) the smallest noisy A that passes: 19 for a day, 70 for a
    week with CELL_STEP = 1% (the box of two sqrt(p) margins it replaced needed 35 and
    109). Every larger A passes too."""
    a = np.arange(1, 400)
    first = {}
    for n in (1, 7):
        ok = apply_test(a, 20 * a, production_test(n), TOLERANCE)["reliable"]
        first[n] = int(a[np.argmax(ok)])
        assert ok[first[n] - 1:].all()
    assert 10 <= first[1] < 35 and 40 <= first[7] < 109 and first[7] > 2 * first[1]


def test_reliability_uses_the_test_of_each_n() -> None:
    n_days = np.array([1, 7, 7, 3, 1])
    a = pd.Series(np.array([30, 90, 30, 60, 10]), index=list("vwxyz"))
    b = np.array([600, 1800, 600, 1200, 200])
    rel = reliability(a, b, a_epsilon=A_EPSILON, a_sensitivity=1, b_epsilon=B_EPSILON,
                      b_sensitivity=1, n_days=n_days, cfg=CFG)
    assert list(rel.columns) == ["ratio", "lower", "upper", "reliable"]
    assert list(rel.index) == list("vwxyz") and rel["reliable"].dtype == bool
    for i, n in enumerate(n_days):
        one = apply_test(a.iloc[i], b[i], production_test(int(n)), TOLERANCE)
        assert rel["reliable"].iloc[i] == one["reliable"][0]
        np.testing.assert_equal(rel["lower"].iloc[i], one["lower"][0])
    assert rel["ratio"].iloc[0] == pytest.approx(0.05)
    # the same counts pass as a day and fail as a week's sum
    assert rel["reliable"].iloc[0] and not rel["reliable"].iloc[2]


def test_scalars_broadcast() -> None:
    rel = reliability(1000, np.array([20_000, 30_000, 0]), a_epsilon=A_EPSILON,
                      a_sensitivity=1, b_epsilon=B_EPSILON, b_sensitivity=1, n_days=1,
                      cfg=CFG)
    assert rel["reliable"].tolist() == [True, True, False]
    v = apply_test(np.array([[10], [1000]]), np.array([3000, 30_000]), production_test(1),
                   TOLERANCE)
    assert v["reliable"].shape == (4,) and v["reliable"].tolist() == [False, False, True, True]


def test_the_tests_of_a_configs_daily_run_can_be_built_ahead() -> None:
    # what the Airflow processes that fork tasks build at start (prepare_noise_samplers):
    # the parameters the noise step stores (each metric group's cell epsilon and
    # sensitivity), daily and weekly, so a report or gate task finds them built
    from dp_ops.reports.symptoms import reliability as rel
    from dp_ops.reports.symptoms.config import SYMPTOM_METRIC, VOLUME_METRIC, SymptomsConfig

    cfg = SymptomsConfig()
    rel._ratio_test.cache_clear()
    assert rel.prepare_ratio_tests(cfg) == 4  # the rule's and the intervals'
    built = rel._ratio_test.cache_info()
    a, b = cfg.budget(SYMPTOM_METRIC), cfg.budget(VOLUME_METRIC)
    rel.reliability([50, 3], [400, 90], a_epsilon=a.cell_epsilon, a_sensitivity=a.sensitivity,
                    b_epsilon=b.cell_epsilon, b_sensitivity=b.sensitivity,
                    n_days=[1, 7], cfg=cfg)
    for n_days in (1, 7):
        rel.ratio_interval([50], [400], a_epsilon=a.cell_epsilon, a_sensitivity=a.sensitivity,
                           b_epsilon=b.cell_epsilon, b_sensitivity=b.sensitivity,
                           n_days=n_days)
    after = rel._ratio_test.cache_info()
    assert after.misses == built.misses == 4 and after.hits == built.hits + 4


def test_the_published_interval_is_the_hull_of_the_test_at_five_percent() -> None:
    """``ratio_interval`` is the hull of the same exact test at level 0.05: wider than the
    rule's hull at 0.45, inside [0, 1], and the whole [0, 1] where every ratio is
    rejected (a negative A against a large B)."""
    from dp_ops.reports.symptoms import reliability as rel
    from dp_ops.reports.symptoms.config import SYMPTOM_METRIC, VOLUME_METRIC, SymptomsConfig

    cfg = SymptomsConfig()
    a, b = cfg.budget(SYMPTOM_METRIC), cfg.budget(VOLUME_METRIC)
    params = {"a_epsilon": a.cell_epsilon, "a_sensitivity": a.sensitivity,
              "b_epsilon": b.cell_epsilon, "b_sensitivity": b.sensitivity}
    noisy_a = np.array([50.0, 400.0, 3.0, 0.0, 990.0, -1000.0])
    noisy_b = np.array([400.0, 1000.0, 90.0, 500.0, 1000.0, 100.0])
    for n_days in (1, 7):
        low, high = rel.ratio_interval(noisy_a, noisy_b, n_days=n_days, **params)
        test = rel.ratio_test_for(**params, n_days=n_days, alpha=0.05)
        lo, hi = test.hull(noisy_a, noisy_b)
        # the hull clipped to [0, 1] (its last cell may reach past 1: A > B here)
        np.testing.assert_array_equal(low[:5], np.clip(lo[:5], 0.0, 1.0))
        np.testing.assert_array_equal(high[:5], np.clip(hi[:5], 0.0, 1.0))
        assert hi[4] > 1.0 and high[4] == 1.0
        assert not lo[5] <= hi[5] and (low[5], high[5]) == (0.0, 1.0)
        assert (0.0 <= low).all() and (high <= 1.0).all() and (low <= high).all()
        assert 0.3 < low[1] < 400 / 1000 < high[1] < 0.5  # a value well inside (0, 1)
        rule = rel.ratio_test_for(**params, n_days=n_days, alpha=cfg.reliability_test_level)
        r_lo, r_hi = rule.hull(noisy_a[:2], noisy_b[:2])
        assert (low[:2] < r_lo).all() and (high[:2] > r_hi).all()
    # one value, as a scalar
    one = rel.ratio_interval(50, 400, n_days=1, **params)
    assert one[0].shape == (1,) and one[0][0] == rel.ratio_interval(
        noisy_a, noisy_b, n_days=1, **params)[0][0]
