"""Exact laws and ratio tests (dp_ops.privacy.inference), checked value by value against
brute force: every law is enumerated atom by atom, every threshold recomputed from its
definition, every hull cell by cell. Nothing here is random, so nothing can fail by chance.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from numpy.typing import NDArray

from dp_ops.privacy import inference
from dp_ops.privacy.inference import Law
from dp_ops.privacy.noise import discrete_laplace_a, discrete_laplace_margin

Floats = NDArray[np.float64]


def atoms(law: Law) -> dict[float, float]:
    assert np.array_equal(law.lo, law.hi)
    return dict(zip(law.lo.tolist(), law.mass.tolist(), strict=True))


def dl_pmf(epsilon: float, sensitivity: int, k: int) -> Floats:
    """The discrete Laplace pmf on -k..k, from its definition."""
    a = math.exp(-epsilon / sensitivity)
    return np.array([(1 - a) / (1 + a) * a ** abs(j) for j in range(-k, k + 1)])


def tail_above(values: Floats, mass: Floats, t: float) -> float:
    return float(mass[values > t].sum())


def smallest_t(values: Floats, mass: Floats, target: float, extra: float = 0.0) -> float:
    """The smallest t with P(V > t) + extra <= target, V of atoms ``values``."""
    for t in np.unique(values):
        if tail_above(values, mass, t) + extra <= target:
            return float(t)
    raise AssertionError("no threshold")


# -- laws ------------------------------------------------------------------------------

def test_exact_sorts_atoms_drops_zero_mass_and_keeps_the_lost_mass() -> None:
    law = inference.exact([2.0, 0.0, 5.0, 1.0], [0.2, 0.5, 0.0, 0.3], lost=0.01)
    assert law.lo.tolist() == [0.0, 1.0, 2.0] and law.hi.tolist() == [0.0, 1.0, 2.0]
    assert law.mass.tolist() == [0.5, 0.3, 0.2]
    assert law.lost == 0.01
    ints = inference.exact([2, 1], [1, 0])
    assert ints.lo.dtype == ints.hi.dtype == ints.mass.dtype == np.float64


def test_upper_tail_is_strict_and_counts_the_lost_mass() -> None:
    law = inference.exact([-1, 0, 2], [0.25, 0.5, 0.25], lost=0.001)
    got = law.upper_tail([-2, -1, -0.5, 0, 1.9, 2, 3])
    assert got == pytest.approx([1.001, 0.751, 0.751, 0.251, 0.251, 0.001, 0.001], abs=1e-15)
    buckets = Law(np.array([0.0, 2.0]), np.array([1.0, 4.0]), np.array([0.4, 0.6]), 0.0)
    # a bucket counts while its upper end is above x
    assert buckets.upper_tail([0.5, 1.0, 3.9, 4.0]).tolist() == pytest.approx([1.0, 0.6, 0.6, 0.0])


@pytest.mark.parametrize("epsilon,sensitivity", [(1.0, 1), (0.5, 2), (2.0, 3)])
def test_one_discrete_laplace_draw_is_its_pmf_on_the_margin(epsilon: float,
                                                           sensitivity: int) -> None:
    law = inference.discrete_laplace(epsilon, sensitivity)
    k = discrete_laplace_margin(inference.TRUNCATED_MASS, epsilon=epsilon,
                                sensitivity=sensitivity)
    assert law.lo.tolist() == list(range(-k, k + 1))
    np.testing.assert_allclose(law.mass, dl_pmf(epsilon, sensitivity, k), rtol=1e-12,
                               atol=0)
    assert law.lost == inference.TRUNCATED_MASS
    assert discrete_laplace_a(epsilon, sensitivity) == pytest.approx(
        math.exp(-epsilon / sensitivity))


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7])
def test_a_sum_of_n_draws_is_the_n_fold_convolution(n: int) -> None:
    epsilon, sensitivity = 1.0, 1
    k = discrete_laplace_margin(inference.TRUNCATED_MASS / n, epsilon=epsilon,
                                sensitivity=sensitivity)
    base = dl_pmf(epsilon, sensitivity, k)
    expected = base
    for _ in range(n - 1):
        expected = np.convolve(expected, base)
    law = inference.discrete_laplace(epsilon, sensitivity, n)
    assert law.lo.tolist() == list(range(-n * k, n * k + 1))
    np.testing.assert_allclose(law.mass, expected, rtol=1e-9, atol=1e-300)
    assert law.lost == inference.TRUNCATED_MASS


def test_a_sum_with_a_wide_support_is_coarsened() -> None:
    epsilon, sensitivity, n = 0.1, 1, 3
    k = discrete_laplace_margin(inference.TRUNCATED_MASS / n, epsilon=epsilon,
                                sensitivity=sensitivity)
    assert 2 * n * k + 1 > inference.MAX_BUCKETS
    law = inference.discrete_laplace(epsilon, sensitivity, n)
    base = dl_pmf(epsilon, sensitivity, k)
    pmf = np.convolve(np.convolve(base, base), base)
    expected = inference.coarsen(inference.exact(np.arange(-n * k, n * k + 1), pmf))
    assert law.mass.size <= inference.MAX_BUCKETS
    np.testing.assert_array_equal(law.lo, expected.lo)
    np.testing.assert_array_equal(law.hi, expected.hi)
    np.testing.assert_allclose(law.mass, expected.mass, rtol=1e-9)


@pytest.mark.parametrize("n", [0, -1, 1.5, "2"])
def test_discrete_laplace_refuses_a_count_that_is_not_a_positive_integer(n: object) -> None:
    with pytest.raises(ValueError, match=rf"^n={n!r}: must be an integer >= 1$"):
        inference.discrete_laplace(1.0, 1, n)  # type: ignore[arg-type]


def test_discrete_laplace_takes_a_numpy_integer_count() -> None:
    law = inference.discrete_laplace(1.0, 1, np.int64(2))  # type: ignore[arg-type]
    assert law.lo[-1] == -law.lo[0] > 0


def test_convolve_adds_independent_laws_and_their_lost_masses() -> None:
    a = inference.exact([-1, 1], [0.5, 0.5], lost=0.01)
    b = inference.exact([0, 2], [0.25, 0.75], lost=0.02)
    c = inference.exact([3], [1.0], lost=0.0)
    got = inference.convolve(a, b)
    assert atoms(got) == pytest.approx({-1.0: 0.125, 1.0: 0.5, 3.0: 0.375})
    assert got.lost == pytest.approx(0.03)
    assert atoms(inference.convolve(a, b, c)) == pytest.approx({2.0: 0.125, 4.0: 0.5,
                                                                6.0: 0.375})
    assert inference.convolve(a) is a


def test_convolve_refuses_nothing_buckets_and_fractional_atoms() -> None:
    with pytest.raises(ValueError, match="^convolve needs at least one law$"):
        inference.convolve()
    whole = inference.exact([0, 1], [0.5, 0.5])
    bucket = Law(np.array([0.0]), np.array([2.0]), np.array([1.0]), 0.0)
    half = inference.exact([0.5], [1.0])
    for first, second in [(whole, bucket), (bucket, whole), (whole, half), (half, whole)]:
        with pytest.raises(ValueError, match=r"^convolve needs exact integer atoms "):
            inference.convolve(first, second)


def test_a_sum_of_mixed_cells_groups_equal_parameters_and_convolves_them() -> None:
    cells = ((1.0, 1), (0.5, 2), (1.0, 1))
    law = inference.discrete_laplace_sum(cells)
    k2 = discrete_laplace_margin(inference.TRUNCATED_MASS / 2, epsilon=1.0, sensitivity=1)
    k1 = discrete_laplace_margin(inference.TRUNCATED_MASS, epsilon=0.5, sensitivity=2)
    pair = np.convolve(dl_pmf(1.0, 1, k2), dl_pmf(1.0, 1, k2))
    expected = np.convolve(pair, dl_pmf(0.5, 2, k1))
    top = 2 * k2 + k1
    assert law.lo.tolist() == list(range(-top, top + 1))
    np.testing.assert_allclose(law.mass, expected, rtol=1e-9, atol=1e-300)
    assert law.lost == pytest.approx(2 * inference.TRUNCATED_MASS, rel=1e-12)
    same = inference.discrete_laplace_sum(((0.5, 2), (1, 1), (1.0, 1.0)))  # type: ignore[arg-type]
    np.testing.assert_array_equal(same.mass, law.mass)


def test_a_sum_of_identical_cells_is_the_sum_of_n_draws() -> None:
    law = inference.discrete_laplace_sum(((1.0, 1),) * 3)
    np.testing.assert_allclose(law.mass, inference.discrete_laplace(1.0, 1, 3).mass,
                               rtol=1e-12)


def test_discrete_laplace_sum_refuses_no_cells() -> None:
    with pytest.raises(ValueError, match=r"^cells: at least one \(epsilon, sensitivity\)$"):
        inference.discrete_laplace_sum(())


def test_maximum_of_k_draws_from_the_cdf_with_lost_mass_above_every_atom() -> None:
    law = inference.exact([0, 1, 2], [0.3, 0.3, 0.3], lost=0.1)
    got = inference.maximum(law, 2)
    assert atoms(got) == pytest.approx({0.0: 0.09, 1.0: 0.27, 2.0: 0.45})
    assert got.lost == pytest.approx(0.19)
    three = inference.maximum(inference.exact([0, 1], [0.5, 0.5]), 3)
    assert atoms(three) == pytest.approx({0.0: 0.125, 1.0: 0.875})
    assert three.lost == pytest.approx(0.0, abs=1e-15)


def test_maximum_refuses_buckets() -> None:
    bucket = Law(np.array([0.0]), np.array([2.0]), np.array([1.0]), 0.0)
    with pytest.raises(ValueError, match=r"^maximum needs exact atoms \(before coarsening\)$"):
        inference.maximum(bucket, 2)


def test_positive_part_moves_everything_at_or_below_zero_to_zero() -> None:
    law = Law(np.array([-2.0, -3.0, -1.0, 1.0, 3.0]), np.array([-2.0, 0.0, 2.0, 1.0, 3.0]),
              np.array([0.1, 0.2, 0.3, 0.15, 0.25]), 0.01)
    got = inference.positive_part(law)
    assert got.lo.tolist() == [0.0, 0.0, 1.0, 3.0]
    assert got.hi.tolist() == [0.0, 2.0, 1.0, 3.0]
    assert got.mass.tolist() == pytest.approx([0.3, 0.3, 0.15, 0.25])
    assert got.lost == 0.01


def test_scaled_multiplies_both_ends_and_refuses_a_factor_not_above_zero() -> None:
    law = Law(np.array([-1.0, 2.0]), np.array([1.0, 3.0]), np.array([0.5, 0.5]), 0.1)
    got = inference.scaled(law, 2.5)
    assert got.lo.tolist() == [-2.5, 5.0] and got.hi.tolist() == [2.5, 7.5]
    assert got.mass is law.mass and got.lost == 0.1
    assert inference.scaled(law, 0.5).hi.tolist() == [0.5, 1.5]  # a factor below 1 too
    for factor in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match=rf"^factor={factor!r}: must be > 0$"):
            inference.scaled(law, factor)


def test_coarsen_merges_neighbours_into_buckets_that_span_them() -> None:
    law = inference.exact(np.arange(10), np.arange(1, 11) / 55.0, lost=0.001)
    assert inference.coarsen(law, 10) is law
    got = inference.coarsen(law, 3)  # width ceil(10 / 3) = 4
    assert got.lo.tolist() == [0.0, 4.0, 8.0] and got.hi.tolist() == [3.0, 7.0, 9.0]
    assert got.mass.tolist() == pytest.approx(np.array([10, 26, 19]) / 55.0)
    assert got.lost == 0.001
    five = inference.coarsen(law, 5)
    assert five.lo.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert five.hi.tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]
    assert inference.coarsen(law, 9).lo.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_coarsen_defaults_to_max_buckets() -> None:
    n = inference.MAX_BUCKETS + 1
    law = inference.exact(np.arange(n), np.full(n, 1.0 / n))
    assert inference.coarsen(law).mass.size == math.ceil(n / 2)
    small = inference.exact(np.arange(inference.MAX_BUCKETS), np.full(inference.MAX_BUCKETS,
                                                                      1.0 / inference.MAX_BUCKETS))
    assert inference.coarsen(small) is small


# -- the median of five ------------------------------------------------------------------

def median_shift_tail(values: Floats, mass: Floats, t: tuple[int, ...]) -> Floats:
    """P(|median(t + W) - median(t)| > m) for m = 0.. by enumerating every W."""
    outcomes = np.array(list(itertools.product(range(values.size), repeat=5)))
    w = values[outcomes]
    p = np.prod(mass[outcomes], axis=1)
    shift = np.abs(np.median(np.array(t) + w, axis=1) - np.median(t))
    top = int(np.abs(values).max())
    return np.array([p[shift > m].sum() for m in range(top + 1)])


EXTREMES = [tuple([-100] * below + [0] * (5 - below - far) + [100] * far)
            for below in range(3) for far in range(3)]
SOME_DAYS = [(0, 1, 2, 3, 4), (0, 0, 1, 1, 2), (-3, 0, 0, 1, 5), (2, 2, 2, 2, 2),
             (-1, -1, 0, 7, 8), (0, 0, 0, 1, -1)]


def test_median_shift_is_the_worst_of_the_nine_extreme_configurations() -> None:
    values = np.arange(-3.0, 4.0)
    mass = dl_pmf(0.8, 1, 3)
    mass = mass / mass.sum()
    w = inference.exact(values, mass)
    assert inference._holds_below_chord(
        lambda k: np.asarray(np.concatenate(([0.0], np.cumsum(w.mass)))[
            np.searchsorted(values, k, side="right")]), 3)
    law = inference.median_shift_magnitude(w)
    worst = np.max([median_shift_tail(values, mass, t) for t in EXTREMES], axis=0)
    np.testing.assert_allclose(law.upper_tail(np.arange(4)), worst, rtol=1e-12, atol=1e-15)
    for t in SOME_DAYS:
        assert np.all(median_shift_tail(values, mass, t) <= worst + 1e-15), t
    assert law.lo.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert law.lost == pytest.approx(0.0, abs=1e-15)


def test_median_shift_falls_back_to_the_union_bound_off_the_chord() -> None:
    # mass far out and little near zero: pairs above the chord
    values = np.arange(-2.0, 3.0)
    mass = np.array([0.3, 0.05, 0.3, 0.05, 0.3])
    w = inference.exact(values, mass, lost=1e-6)
    cdf = np.concatenate(([0.0], np.cumsum(mass)))
    assert not inference._holds_below_chord(
        lambda k: cdf[np.searchsorted(values, k, side="right")], 2)
    law = inference.median_shift_magnitude(w)
    f = np.cumsum(mass)[2:]  # P(W <= m), m = 0, 1, 2
    union = np.minimum(2 * (1 - f ** 3), 1.0)
    assert law.upper_tail(np.arange(3)).tolist() == pytest.approx(
        (union - union[-1] + 5e-6 + union[-1]).tolist(), abs=1e-15)
    assert law.lost == pytest.approx(5e-6 + union[-1], abs=1e-15)
    for t in EXTREMES + SOME_DAYS:
        assert np.all(median_shift_tail(values, mass, t) <= union + 1e-15), t


def test_median_shift_of_a_law_heavy_at_its_ends_is_still_the_worst_extreme() -> None:
    values = np.arange(-1.0, 2.0)
    mass = np.array([0.45, 0.1, 0.45])  # on the chord's side, though 2 (1 - F(0)^3) > 1
    law = inference.median_shift_magnitude(inference.exact(values, mass))
    worst = np.max([median_shift_tail(values, mass, t) for t in EXTREMES], axis=0)
    assert law.upper_tail([0.0, 1.0]).tolist() == pytest.approx(worst.tolist(), abs=1e-15)
    assert worst[0] == pytest.approx(0.92475)


def test_median_shift_refuses_buckets_and_fractional_atoms() -> None:
    bucket = Law(np.array([-1.0, 0.0]), np.array([0.0, 1.0]), np.array([0.5, 0.5]), 0.0)
    for law in (bucket, inference.exact([-0.5, 0.5], [0.5, 0.5])):
        with pytest.raises(ValueError, match="^median_shift_magnitude needs exact integer atoms$"):
            inference.median_shift_magnitude(law)


# -- cells ---------------------------------------------------------------------------------

def test_ratio_edges_are_a_geometric_grid_past_highest() -> None:
    got = inference.ratio_edges(0.0, 0.1, 1.0, step=0.5)  # ceil(log 10 / log 1.5) = 6
    np.testing.assert_allclose(got, [0.0] + [0.1 * 1.5 ** i for i in range(7)], rtol=1e-15)
    default = inference.ratio_edges(0.05, 1.0, 2.0)
    n = math.ceil(math.log(2.0) / math.log1p(inference.CELL_STEP))
    assert default[0] == 0.05 and default.size == n + 2
    assert default[-1] >= 2.0 > default[-2]
    exact_end = inference.ratio_edges(0.0, 1.0, 4.0, step=1.0)
    assert exact_end.tolist() == [0.0, 1.0, 2.0, 4.0]


@pytest.mark.parametrize("lowest,start,highest", [(-0.1, 0.1, 1.0), (0.1, 0.1, 1.0),
                                                   (0.0, 1.0, 1.0), (0.0, 2.0, 1.0)])
def test_ratio_edges_refuse_an_unordered_range(lowest: float, start: float,
                                              highest: float) -> None:
    with pytest.raises(ValueError, match=r"^need 0 <= lowest < start < highest$"):
        inference.ratio_edges(lowest, start, highest)


def test_uniform_edges_cover_the_range_in_steps_no_wider_than_width() -> None:
    assert inference.uniform_edges(0.0, 1.0, 0.3).tolist() == pytest.approx(
        [0.0, 0.25, 0.5, 0.75, 1.0])
    assert inference.uniform_edges(-1.0, 1.0, 1.0).tolist() == [-1.0, 0.0, 1.0]


# -- the ratio test ------------------------------------------------------------------------

X_VALUES = np.arange(-4.0, 5.0)
X_MASS = dl_pmf(0.7, 1, 4)
X_LOST = 1.0 - X_MASS.sum()
Y_VALUES = np.array([-2.0, 0.0, 1.0, 3.0])
Y_MASS = np.array([0.1, 0.5, 0.3, 0.05])
Y_LOST = 0.05 * 0.01


def x_law() -> Law:
    return inference.exact(X_VALUES, X_MASS, X_LOST)


def y_law() -> Law:
    return inference.exact(Y_VALUES, Y_MASS * (1 - 0.05 * 0.01 / 0.95), Y_LOST)


def brute_threshold(shifts: Floats, y: Law, target: float) -> float:
    """Smallest t with sum_i y_i (P(X > t - shift_i) + X lost) + Y lost <= target."""
    values = (X_VALUES[:, None] + shifts[None, :]).ravel()
    mass = (X_MASS[:, None] * y.mass[None, :]).ravel()
    return smallest_t(values, mass, target, X_LOST * y.mass.sum() + y.lost)


def test_ratio_test_thresholds_are_the_exact_quantiles_of_each_cell() -> None:
    edges = np.array([0.0, 0.5, 1.0, 2.0])
    y = y_law()
    alpha = 0.11
    test = inference.ratio_test(x_law(), y, alpha=alpha, edges=edges, bounded=True)
    assert test.tail_u is None and test.alpha == alpha
    for j, (e_lo, e_hi) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        shifts = np.maximum(e_lo * y.lo, e_hi * y.lo)
        expected = brute_threshold(shifts, y, alpha / 2)
        assert expected <= test.thresholds[j] <= expected + 1e-6, j


def test_ratio_test_uses_both_ends_of_a_bucket() -> None:
    x = x_law()
    y = Law(np.array([-2.0, 1.0]), np.array([-1.0, 3.0]), np.array([0.2, 0.8]), 0.0)
    edges = np.array([0.5, 1.0])
    test = inference.ratio_test(x, y, alpha=0.2, edges=edges, bounded=True)
    shifts = np.array([-0.5, 3.0])  # max over {0.5, 1} x {lo, hi}
    values = (X_VALUES[:, None] + shifts[None, :]).ravel()
    mass = (X_MASS[:, None] * y.mass[None, :]).ravel()
    expected = smallest_t(values, mass, 0.1, X_LOST)
    assert expected <= test.thresholds[0] <= expected + 1e-6


def test_an_unbounded_ratio_test_bounds_the_ratios_above_the_last_edge() -> None:
    edges = np.array([0.0, 1.0, 4.0])
    y = y_law()
    alpha = 0.11
    test = inference.ratio_test(x_law(), y, alpha=alpha, edges=edges, bounded=False)
    # |X| / e_K + max(Y, 0)
    values = (np.abs(X_VALUES)[:, None] / 4.0 + np.maximum(y.lo, 0)[None, :]).ravel()
    mass = (X_MASS[:, None] * y.mass[None, :]).ravel()
    expected = smallest_t(values, mass, alpha / 2, X_LOST * y.mass.sum() + y.lost)
    assert test.tail_u is not None
    assert expected <= test.tail_u <= expected + 1e-6
    bounded = inference.ratio_test(x_law(), y, alpha=alpha, edges=edges, bounded=True)
    np.testing.assert_array_equal(test.thresholds, bounded.thresholds)


def test_a_magnitude_ratio_test_spends_alpha_once_on_both_tails() -> None:
    e_abs = inference.exact([0, 1, 3], [0.6, 0.3, 0.0999], lost=0.0001)
    edges = np.array([0.0, 0.5, 2.0])
    alpha = 0.2
    test = inference.ratio_test(x_law(), e_abs, alpha=alpha, edges=edges, bounded=True,
                                magnitude=True)
    assert test.tail_u is None
    for j, e_hi in enumerate(edges[1:]):
        # S(q) + sum_i e_i S(q - e_hi |E_i|) + lost, S with the X lost mass
        def total(q: float, e_hi: float = e_hi) -> float:
            own = tail_above(X_VALUES, X_MASS, q) + X_LOST
            shifted = sum(m * (tail_above(X_VALUES, X_MASS, q - e_hi * v) + X_LOST)
                          for v, m in zip(e_abs.lo, e_abs.mass, strict=True))
            return float(own + shifted + e_abs.lost)
        candidates = np.unique(np.concatenate([X_VALUES + e_hi * v for v in (0, 1, 3)]))
        expected = next(float(q) for q in candidates if total(q) <= alpha)
        assert expected <= test.thresholds[j] <= expected + 1e-6, j
    unbounded = inference.ratio_test(x_law(), e_abs, alpha=alpha, edges=edges,
                                     bounded=False, magnitude=True)
    values = (np.abs(X_VALUES)[:, None] / 2.0 + e_abs.lo[None, :]).ravel()
    mass = (X_MASS[:, None] * e_abs.mass[None, :]).ravel()
    expected = smallest_t(values, mass, alpha, X_LOST * e_abs.mass.sum() + e_abs.lost)
    assert unbounded.tail_u is not None
    assert expected <= unbounded.tail_u <= expected + 1e-6


def test_a_magnitude_law_must_be_non_negative() -> None:
    with pytest.raises(ValueError, match="^a magnitude law must be non-negative$"):
        inference.ratio_test(x_law(), inference.exact([-1, 1], [0.5, 0.5]), alpha=0.1,
                             edges=np.array([0.0, 1.0]), bounded=True, magnitude=True)


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5])
def test_ratio_test_refuses_a_level_outside_zero_one(alpha: float) -> None:
    with pytest.raises(ValueError, match=rf"^alpha={alpha!r}: must be in \(0, 1\)$"):
        inference.ratio_test(x_law(), y_law(), alpha=alpha, edges=np.array([0.0, 1.0]),
                             bounded=True)


def test_a_level_below_the_lost_mass_is_refused() -> None:
    x = inference.exact([0, 1], [0.45, 0.45], lost=0.1)
    with pytest.raises(ValueError, match=r"^the laws' truncated mass exceeds the level 0\.05$"):
        inference.ratio_test(x, inference.exact([0], [1.0]), alpha=0.1,
                             edges=np.array([0.0, 1.0]), bounded=True)


def test_a_threshold_is_found_to_within_rounding_for_large_values() -> None:
    x = inference.exact([-1e6, 0, 1e6], [0.25, 0.5, 0.25])
    test = inference.ratio_test(x, inference.exact([0], [1.0]), alpha=0.6,
                                edges=np.array([0.0, 1.0]), bounded=True)
    assert 0.0 <= test.thresholds[0] <= 1e-6
    test = inference.ratio_test(x, inference.exact([0], [1.0]), alpha=0.4,
                                edges=np.array([0.0, 1.0]), bounded=True)
    assert 1e6 <= test.thresholds[0] <= 1e6 * (1 + 1e-7)


def test_abs_law_puts_each_bucket_at_its_largest_absolute_value() -> None:
    law = Law(np.array([-5.0, -1.0, 2.0]), np.array([-3.0, 1.0, 4.0]),
              np.array([0.2, 0.5, 0.3]), 0.01)
    got = inference._abs_law(law)
    assert got.hi.tolist() == [1.0, 4.0, 5.0]
    assert got.lo.tolist() == [0.0, 2.0, 3.0]
    assert got.mass.tolist() == [0.5, 0.3, 0.2]
    assert got.lost == 0.01


# -- the hull ------------------------------------------------------------------------------

def brute_hull(test: inference.RatioTest, n: float, d: float) -> tuple[float, float]:
    if not (d > 0 and math.isfinite(d) and math.isfinite(n)):
        return -math.inf, math.inf
    lo, hi = math.inf, -math.inf
    for e_lo, e_hi, q in zip(test.edges[:-1], test.edges[1:], test.thresholds, strict=True):
        a, b = max(e_lo, (n - q) / d), min(e_hi, (n + q) / d)
        if a <= b:
            lo, hi = min(lo, a), max(hi, b)
    if test.tail_u is not None and not d - max(n, 0.0) / test.edges[-1] > test.tail_u:
        lo, hi = min(lo, test.edges[-1]), math.inf
    return lo, hi


def test_hull_values_cell_by_cell() -> None:
    test = inference.RatioTest(np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0]), None, 0.1)
    lower, upper = test.hull([3.0, 10.0, 0.5, 3.0, 1.5], [2.0, 2.0, 1.0, 1.0, 2.0])
    assert lower.tolist() == [1.0, math.inf, 0.0, 1.0, 0.25]
    assert upper.tolist() == [2.0, -math.inf, 2.0, 2.0, 1.75]  # 10 / 2: every cell rejects


def test_hull_above_the_last_edge() -> None:
    test = inference.RatioTest(np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0]), 1.2, 0.1)
    lower, upper = test.hull([10.0, -1.0, 3.0, 1.6], [2.0, 1.0, 2.0, 2.0])
    # 2 - 5 = -3: not rejected; 1 - 0 = 1 (the numerator's positive part): not rejected;
    # 2 - 1.5 = 0.5: not rejected; 2 - 0.8 = 1.2: not rejected (the test is strict)
    assert lower.tolist() == pytest.approx([2.0, 0.0, 1.0, 0.3])
    assert upper.tolist() == [math.inf] * 4
    strict = inference.RatioTest(test.edges, test.thresholds, 0.4, 0.1)
    # the last: 0.8 - 0 / 2 = 0.8 > 0.4, rejected (with a positive part floored at 1
    # instead of 0 it would be 0.3 and not rejected)
    lower, upper = strict.hull([10.0, -1.0, 3.0, 0.0], [2.0, 1.0, 2.0, 0.8])
    assert lower.tolist() == [2.0, 0.0, 1.0, 0.0]
    assert upper.tolist() == [math.inf, 1.0, 2.0, 2.0]


def test_hull_is_everything_without_a_positive_finite_denominator() -> None:
    test = inference.RatioTest(np.array([0.0, 1.0]), np.array([1.0]), None, 0.1)
    lower, upper = test.hull([1.0, 1.0, 1.0, math.nan, math.inf, 1.0],
                             [0.0, -1.0, math.nan, 1.0, 1.0, math.inf])
    assert lower.tolist() == [-math.inf] * 6
    assert upper.tolist() == [math.inf] * 6


def test_hull_broadcasts_and_matches_the_brute_force_in_blocks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    test = inference.ratio_test(x_law(), y_law(), alpha=0.11,
                                edges=inference.ratio_edges(0.0, 0.05, 3.0, step=0.2),
                                bounded=False)
    rng = np.random.default_rng(7)
    n = rng.integers(-5, 40, size=23).astype(float)
    d = rng.integers(-2, 30, size=23).astype(float)
    monkeypatch.setattr(inference, "_ROW_BLOCK", 4)
    lower, upper = test.hull(n, d)
    for i in range(n.size):
        assert (lower[i], upper[i]) == pytest.approx(brute_hull(test, n[i], d[i])), i
    lo1, hi1 = test.hull(n[3], d[3])
    assert lo1.shape == (1,) and (lo1[0], hi1[0]) == (lower[3], upper[3])
    lo_b, hi_b = test.hull(n[:5], 10.0)
    for i in range(5):
        assert (lo_b[i], hi_b[i]) == pytest.approx(brute_hull(test, n[i], 10.0))


def test_the_hull_covers_the_true_ratio_at_the_level() -> None:
    """Exact coverage, no sampling: for true (n, d), sum the probability of every noise
    outcome whose hull misses n / d; it stays below alpha."""
    alpha = 0.11
    x, y = x_law(), inference.exact([-1, 0, 1], [0.2, 0.6, 0.2])
    test = inference.ratio_test(x, y, alpha=alpha,
                                edges=inference.ratio_edges(0.0, 0.1, 5.0, step=0.05),
                                bounded=True)
    worst = 0.0
    for n_true, d_true in [(0, 5), (3, 5), (5, 5), (10, 4), (2, 1), (20, 4)]:
        e_n, e_d = np.meshgrid(X_VALUES, y.lo, indexing="ij")
        p = np.outer(X_MASS, y.mass)
        lower, upper = test.hull((n_true + e_n).ravel(), (d_true + e_d).ravel())
        rho = n_true / d_true
        miss = float(p.ravel()[(rho < lower) | (rho > upper)].sum()) + X_LOST
        worst = max(worst, miss)
    assert worst <= alpha
    assert worst > alpha / 10  # the test is not vacuous at these values


@pytest.mark.parametrize("magnitude", [False, True])
def test_the_tail_bound_of_a_numerator_law_without_mass_near_zero(magnitude: bool) -> None:
    """|X| / e_K then has its smallest value above zero: the bound still starts below it."""
    x = inference.exact([-3, 3], [0.5, 0.5])
    y = inference.exact([0, 1], [0.9, 0.1])
    edges = np.array([0.0, 1.0, 2.0])
    test = inference.ratio_test(x, y, alpha=0.2, edges=edges, bounded=False,
                                magnitude=magnitude)
    # |X| / 2 = 1.5 always; max(Y, 0) (or |E|) is 1 with probability 0.1
    values = np.array([1.5, 2.5])
    mass = np.array([0.9, 0.1])
    target = 0.2 if magnitude else 0.1
    expected = smallest_t(values, mass, target)
    assert test.tail_u is not None
    assert expected <= test.tail_u <= expected + 1e-6


def test_the_chord_check_looks_at_every_shift() -> None:
    """A law (found by search) whose points leave the chord only at shifts g >= 3: the
    check must reach them, and then the union bound is used."""
    values = np.arange(-4.0, 5.0)
    half = [0.0845, 0.3815, 0.0587, 0.0012, 0.0164]  # P(W = 0), P(W = +-1), ...
    mass = np.array(half[:0:-1] + half)
    mass = mass / mass.sum()
    cdf = np.concatenate(([0.0], np.cumsum(mass)))

    def at_most(k: NDArray[np.int64]) -> Floats:
        return np.asarray(cdf[np.searchsorted(values, k, side="right")])

    assert not inference._holds_below_chord(at_most, 4)
    law = inference.median_shift_magnitude(inference.exact(values, mass))
    f = np.cumsum(mass)[4:]
    union = np.minimum(2 * (1 - f ** 3), 1.0)
    np.testing.assert_allclose(law.upper_tail(np.arange(5)), union, atol=1e-15)


@pytest.mark.parametrize("half", [[0.5, 0.2, 0.05], [0.1, 0.3, 0.15]])
def test_the_median_shift_law_is_a_whole_law(half: list[float]) -> None:
    """Its atoms add up to one, the atom at 0 included (it weighs the shifts in the
    magnitude test), and the lost mass of the five days is counted on top."""
    values = np.arange(-2.0, 3.0)
    mass = np.array(half[:0:-1] + half)
    mass = mass / mass.sum()
    law = inference.median_shift_magnitude(inference.exact(values, mass, lost=1e-9))
    assert law.mass.sum() == pytest.approx(1.0, abs=1e-12)  # lost: 5 x 1e-9 on top
    assert law.lost == pytest.approx(5e-9, abs=1e-15)
    assert law.mass[0] == pytest.approx(1.0 - law.upper_tail([0.0])[0] + law.lost, abs=1e-12)


def test_quantiles_at_their_exact_edges() -> None:
    """Thresholds where the lost mass, the level's equality and the bracket's lower end
    each decide the answer."""
    point = inference.exact([0], [1.0])
    edges = np.array([0.0, 1.0])

    def threshold(x: Law, y: Law, alpha: float) -> float:
        return float(inference.ratio_test(x, y, alpha=alpha, edges=edges,
                                          bounded=True).thresholds[0])

    x = inference.exact([0, 1, 2], [0.5, 0.25, 0.25])
    # P(X > 1) = 0.25 is the level itself (alpha / 2): 1 is accepted, not 2
    assert 1.0 <= threshold(x, point, 0.5) <= 1.0 + 1e-6
    # Y's lost mass counts against the level: 0.2 x 0.95 + 0.05 = 0.24 > 0.2 at t = 1
    x = inference.exact([0, 1, 2], [0.5, 0.3, 0.2])
    y = inference.exact([0], [0.95], lost=0.05)
    assert 2.0 <= threshold(x, y, 0.4) <= 2.0 + 1e-6
    # the lost mass alone reaching the level exactly is allowed
    assert 0.0 <= threshold(inference.exact([0], [1.0]), y, 0.1) <= 1e-6
    # nearly all mass at the smallest atom: the answer is that atom
    x = inference.exact([0, 1], [0.95, 0.05])
    assert 0.0 <= threshold(x, point, 0.2) <= 1e-6
