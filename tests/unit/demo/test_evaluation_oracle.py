"""The evaluation's oracle (dp_demo.oracle) on small synthetic inputs.

Exactness tests compare with a deterministic enumeration of the noise law (no
randomness). Statistical tests use fixed seeds and bounds of >= 5 standard deviations of
the simulation error; each states its false-failure rate under fresh randomness.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from dp_demo.oracle import (
    MOBILITY_MAX_MISS_PROBABILITY,
    NoiseLaw,
    count_change_miss_probability,
    covering_counts,
    discrete_laplace_law,
    oracle_publishes_ratio,
    published_change,
    ratio_cover_probability,
    residential_miss_probability,
    simulate_baseline_hours,
    simulate_baselines,
    simulate_noise,
    sum_law,
    true_change,
    true_hours,
)

from dp_ops.privacy.noise import discrete_laplace_pmf
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.symptoms.config import SYMPTOM_METRIC, VOLUME_METRIC, SymptomsConfig

SYMPTOMS = SymptomsConfig()
A_CELL = (SYMPTOMS.budget(SYMPTOM_METRIC).cell_epsilon, SYMPTOMS.budget(SYMPTOM_METRIC).sensitivity)
B_CELL = (SYMPTOMS.budget(VOLUME_METRIC).cell_epsilon, SYMPTOMS.budget(VOLUME_METRIC).sensitivity)
MOBILITY = MobilityConfig()
PLACES = (MOBILITY.budget("places").cell_epsilon, MOBILITY.budget("places").sensitivity)
RES_SUM = (MOBILITY.budget("residential_sum").cell_epsilon,
           MOBILITY.budget("residential_sum").sensitivity)
RES_COUNT = (MOBILITY.budget("residential_count").cell_epsilon,
             MOBILITY.budget("residential_count").sensitivity)
GRID = MOBILITY.residential_grid_per_hour


# -- noise laws ---------------------------------------------------------------------------

def test_one_cell_law_is_the_discrete_laplace_pmf() -> None:
    law = discrete_laplace_law((0.3, 2))
    expected = discrete_laplace_pmf(law.support, epsilon=0.3, sensitivity=2)
    np.testing.assert_allclose(law.pmf, expected, rtol=1e-12)
    assert law.pmf.sum() == pytest.approx(1.0, abs=1e-11)
    assert law.low == -(len(law.pmf) - 1) // 2  # symmetric table
    assert law.cdf(np.array([law.low - 5, law.low + len(law.pmf) + 5])).tolist() == [0.0, 1.0]
    assert float(law.cdf(np.array(0))) == pytest.approx(0.5 + law.pmf[-law.low] / 2, abs=1e-12)


def test_sum_law_is_the_convolution_and_trims_only_negligible_mass() -> None:
    cells = ((0.44, 1), (0.44, 1), (0.2, 1))
    law = sum_law(cells)
    direct = np.convolve(np.convolve(discrete_laplace_law(cells[0]).pmf,
                                     discrete_laplace_law(cells[1]).pmf),
                         discrete_laplace_law(cells[2]).pmf)
    low = sum(discrete_laplace_law(c).low for c in cells)
    offset = law.low - low
    # each intermediate law leaves out at most 1e-12 of its mass (LAW_TAIL), which can
    # move any probability of the result by at most as much
    np.testing.assert_allclose(law.pmf, direct[offset:offset + len(law.pmf)], rtol=0,
                               atol=2e-12)
    assert 1 - law.pmf.sum() < 1e-11
    # the variance of a sum of independent draws is the sum of the variances
    variance = float((law.support.astype(float) ** 2 * law.pmf).sum())
    parts = sum(float((discrete_laplace_law(c).support.astype(float) ** 2
                       * discrete_laplace_law(c).pmf).sum()) for c in cells)
    assert variance == pytest.approx(parts, rel=1e-9)


def test_central_interval_and_mass_between() -> None:
    law = sum_law((B_CELL,) * 7)
    lo, hi = law.central(0.01)
    assert float(law.cdf(np.array(lo - 1))) <= 0.005 < float(law.cdf(np.array(lo)))
    assert 1 - float(law.cdf(np.array(hi))) <= 0.005 < 1 - float(law.cdf(np.array(hi - 1)))
    assert float(law.mass_between(np.array(lo), np.array(hi))) >= 0.99
    assert float(law.mass_between(np.array(3), np.array(2))) == 0.0


def test_sampling_follows_the_table() -> None:
    # mean 0 and the law's variance: with 10^6 draws the sample mean's standard error is
    # sd / 1000 and the variance's relative error ~ sqrt(9/10^6) (heavier tails than a
    # normal); bounds of 6 such errors: false-failure rate below 1e-8 per check
    law = sum_law((PLACES,) * 3)
    draws = law.sample((1_000_000,), np.random.default_rng(1)).astype(float)
    variance = float((law.support.astype(float) ** 2 * law.pmf).sum())
    assert abs(draws.mean()) < 6 * np.sqrt(variance) / 1000
    assert draws.var() == pytest.approx(variance, rel=6 * 3 / 1000)


# -- symptoms -----------------------------------------------------------------------------

def test_covering_counts_are_exact() -> None:
    # every integer A in [lo, hi] covers, and the neighbours just outside do not
    rng = np.random.default_rng(5)
    a = rng.integers(0, 300, 4000)
    b = rng.integers(1, 900, 4000)
    noisy_b = b + rng.integers(-50, 51, 4000)
    noisy_b = np.maximum(noisy_b, 1)
    lo, hi = covering_counts(a, b, noisy_b, 0.25)

    def covers(big_a: int, i: int) -> bool:
        r = Fraction(int(a[i]), int(b[i]))
        ratio = Fraction(big_a, int(noisy_b[i]))
        return Fraction(3, 4) * ratio <= r <= Fraction(5, 4) * ratio

    for i in range(len(a)):
        if hi[i] >= lo[i]:
            assert covers(int(lo[i]), i) and covers(int(hi[i]), i)
        assert not covers(int(lo[i]) - 1, i) and not covers(int(hi[i]) + 1, i)


def _enumerated_cover(a: int, b: int, law_a: NoiseLaw, law_b: NoiseLaw) -> float:
    """P(cover) by summing over every (Z_A, Z_B) pair of the two tables."""
    za, zb = law_a.support, law_b.support
    big_a = (a + za)[:, None].astype(float)
    big_b = (b + zb)[None, :].astype(float)
    covered = (big_b > 0) & (0.75 * big_a * b <= a * big_b) & (a * big_b <= 1.25 * big_a * b)
    return float(law_a.pmf @ covered.astype(float) @ law_b.pmf)


@pytest.mark.parametrize(("a", "b", "days"), [(40, 200, 1), (12, 90, 1), (0, 50, 1),
                                              (150, 40, 1), (60, 300, 7), (25, 800, 7)])
def test_cover_probability_matches_enumeration(a: int, b: int, days: int) -> None:
    law_a, law_b = sum_law((A_CELL,) * days), sum_law((B_CELL,) * days)
    exact = float(ratio_cover_probability(np.array([a]), np.array([b]), law_a, law_b, 0.25)[0])
    # the oracle leaves out at most 1e-6 of Z_B's law (counted as not covering)
    assert _enumerated_cover(a, b, law_a, law_b) - 1.1e-6 <= exact
    assert exact <= _enumerated_cover(a, b, law_a, law_b) + 1e-9


def test_cover_probability_matches_a_brute_force_simulation() -> None:
    # 400,000 simulated (A, B) with the pipeline's own sampler: the share's standard error
    # is <= sqrt(0.25 / 400000) = 0.00079; the bound 0.005 is > 6 standard errors, a
    # false-failure rate below 2e-9 per configuration
    rng = np.random.default_rng(20)
    draws = 400_000
    for a, b, days in ((40, 200, 1), (60, 300, 7)):
        exact = float(ratio_cover_probability(np.array([a]), np.array([b]),
                                              sum_law((A_CELL,) * days),
                                              sum_law((B_CELL,) * days), 0.25)[0])
        big_a = a + simulate_noise([A_CELL] * days, (draws,), rng)
        big_b = b + simulate_noise([B_CELL] * days, (draws,), rng)
        covered = ((big_b > 0) & (0.75 * big_a * b <= a * big_b)
                   & (a * big_b <= 1.25 * big_a * b))
        assert abs(covered.mean() - exact) < 0.005, (a, b, days, covered.mean(), exact)


def test_oracle_publishes_large_counts_and_not_small_ones() -> None:
    law_a, law_b = sum_law((A_CELL,)), sum_law((B_CELL,))
    a = np.array([5000, 800, 3, 0, 10, 5])
    b = np.array([50000, 4000, 20, 100, 0, 5])
    published = oracle_publishes_ratio(a, b, law_a, law_b, tolerance=0.25, probability=0.5)
    assert published.tolist() == [True, True, False, False, False, False]


def test_the_screen_never_changes_a_decision() -> None:
    # deterministic: the screen's bounds are exact, so its decisions must equal those of
    # the exact sum for every value (here 40,000 values around the threshold)
    rng = np.random.default_rng(8)
    for days in (1, 7):
        law_a, law_b = sum_law((A_CELL,) * days), sum_law((B_CELL,) * days)
        b = rng.integers(0, 2000 * days, 20_000)
        a = (b * rng.uniform(0, 0.3, 20_000)).astype(np.int64)
        exact = ratio_cover_probability(a, b, law_a, law_b, 0.25) >= 0.5
        screened = oracle_publishes_ratio(a, b, law_a, law_b, tolerance=0.25, probability=0.5)
        assert 0.05 < exact.mean() < 0.95  # both decisions are well represented
        np.testing.assert_array_equal(screened, exact)


# -- mobility -----------------------------------------------------------------------------

def test_published_change_is_the_pipelines_rounding() -> None:
    # 9 / 8 and 7 / 8 are exact in binary: changes of +12.5 and -12.5 round up
    change = published_change(np.array([105, 0, -20, 9, 7, 7, 7]),
                              np.array([100, 50, 50, 8, 8, 0, -3]))
    np.testing.assert_array_equal(change[:5], [5, -100, -100, 13, -12])
    assert np.isnan(change[5:]).all()
    assert np.isnan(true_change(np.array([3]), np.array([0])))[0]


def _enumerated_miss(v: int, c: float, base: float, law: NoiseLaw) -> float:
    published = published_change(v + law.support, np.full(len(law.pmf), base))
    return 1.0 - float(law.pmf[np.abs(published - c) <= 10].sum())


@pytest.mark.parametrize(("v", "base"), [(60, 55.0), (30, 25.0), (300, 270.0), (0, 9.0),
                                         (4, 3.0), (95, 101.0), (17, -2.0)])
def test_count_miss_given_a_baseline_matches_enumeration(v: int, base: float) -> None:
    law = sum_law((PLACES,) * 3)
    for c in (true_change(np.array([v]), np.array([55]))[0], 0.0, -100.0, 8.6, 9.5):
        baselines = np.full((1, 3), base)
        got = count_change_miss_probability(np.array([v]), np.array([c]), baselines,
                                            np.array([0]), law, 10.0)
        assert got[0] == pytest.approx(_enumerated_miss(v, c, base, law), abs=1e-9)


def test_count_miss_matches_a_brute_force_simulation() -> None:
    # the same 200,000 simulated baselines for both; the brute force also simulates V, so
    # the two differ by a mean of 200,000 terms bounded in [-1, 1] with variance <= 0.25:
    # standard error <= 0.0011, bound 0.006 > 5.3 standard errors (false-failure rate
    # below 1e-7 per case)
    rng = np.random.default_rng(3)
    cells = (PLACES,) * 3
    law = sum_law(cells)
    draws = 200_000
    for v, window in ((60, [50, 55, 60, 52, 58]), (30, [20, 25, 30, 22, 28]),
                      (100, [10, 10, 10, 1000, 1000])):
        days = np.array([window])
        baselines = simulate_baselines(days, cells, draws, rng)
        c = true_change(np.array([v]), np.median(days, axis=1))
        exact = count_change_miss_probability(np.array([v]), c, baselines, np.array([0]),
                                              law, 10.0)[0]
        noisy = v + simulate_noise(cells, (1, draws), rng)
        brute = 1 - float((np.abs(published_change(noisy, baselines) - c[0]) <= 10).mean())
        assert abs(exact - brute) < 0.006, (v, window, exact, brute)


def test_count_oracle_publishes_large_counts_and_not_small_ones() -> None:
    rng = np.random.default_rng(4)
    cells = (PLACES,) * 2
    days = np.array([[20000, 21000, 19500, 20500, 20200],   # large: publishable
                     [12, 9, 15, 11, 10],                   # small: not
                     [0, 0, 0, 1, 0]])                      # true baseline 0: never
    value = np.array([15000, 8, 3])
    baselines = simulate_baselines(days, cells, 2000, rng)
    change = true_change(value, np.median(days, axis=1))
    miss = count_change_miss_probability(value, change, baselines, np.arange(3),
                                         sum_law(cells), 10.0)
    assert (miss < MOBILITY_MAX_MISS_PROBABILITY).tolist() == [True, False, False]
    assert miss[0] < 1e-6 and miss[1] > 0.5 and miss[2] == 1.0


def test_residential_oracle_publishes_large_counts_and_not_small_ones() -> None:
    rng = np.random.default_rng(6)
    counts = np.array([[50000] * 5, [3] * 5])
    offsets = np.array([[60 * 50000] * 5, [60 * 3] * 5])  # one hour above 12 on average
    baselines = simulate_baseline_hours(offsets, counts, RES_SUM, RES_COUNT, 2000, GRID, rng)
    today = true_hours(np.array([2 * 60 * 50000, 2 * 60 * 3]), np.array([50000, 3]), GRID)
    change = true_change(today, np.array([13.0, 13.0]))
    miss = residential_miss_probability(np.array([2 * 60 * 50000, 2 * 60 * 3]),
                                        np.array([50000, 3]), change, baselines,
                                        np.arange(2), RES_SUM, RES_COUNT, GRID, 10.0, rng)
    assert (miss < MOBILITY_MAX_MISS_PROBABILITY).tolist() == [True, False]
