"""The pre-test of the symptoms reliability rule (``reliability._may_pass``): the cheap
necessary condition that spares the hull of values that cannot pass. It decides which
values get a hull (``lower``/``upper`` not NaN), so a pre-test that is too strict would
drop reliable values and one that is too loose would only cost time; both are checked
here against a plain-Python reading of its docstring, on the production tests and on
hand-made tests whose cells put each comparison exactly at its boundary. Nothing here is
random."""

from __future__ import annotations

import bisect
import math

import numpy as np
import pytest

from dp_ops.privacy.inference import RatioTest
from dp_ops.reports.symptoms.config import SYMPTOM_METRIC, VOLUME_METRIC, SymptomsConfig
from dp_ops.reports.symptoms.reliability import _may_pass, apply_test, ratio_test_for

CFG = SymptomsConfig()
T = CFG.reliability_tolerance  # 0.25
SLACK = 1e-9
GOOD, BAD = 0.0, 1e6  # a cell threshold that always / never fits the allowance


def allowance(a: float, t: float = T) -> float:
    """``t A`` with the module's relative slack, computed as the module does."""
    return t * a * (1 + SLACK) + SLACK


def reference(a: float, b: float, edges: list[float], q: list[float], t: float = T) -> bool:
    """The pre-test as its docstring states it, one value at a time: A, B > 0 and finite;
    (1 - t) R at most the top edge; the cell (e_j, e_j+1] holding (1 - t) R has
    Q_j <= t A; and, when (1 + t) R is below the top edge, so has the cell
    [e_k, e_k+1) holding (1 + t) R."""
    if not (a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)):
        return False
    ratio = a / b
    low, high, top = (1 - t) * ratio, (1 + t) * ratio, edges[-1]
    if low > top:
        return False
    j = bisect.bisect_left(edges, low) - 1       # e_j < low <= e_j+1
    if q[j] > allowance(a, t):
        return False
    if high < top:
        k = bisect.bisect_right(edges, high) - 1  # e_k <= high < e_k+1
        if q[k] > allowance(a, t):
            return False
    return True


def pre_test(a: float, b: float, test: RatioTest, t: float = T) -> bool:
    """``_may_pass`` on one value, its ends computed as ``apply_test`` computes them."""
    aa, bb = np.array([a], dtype=np.float64), np.array([b], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bb > 0, aa / bb, np.nan)
    return bool(_may_pass(aa, bb, (1 - t) * ratio, (1 + t) * ratio, test, t)[0])


def made(edges: list[float], q: list[float]) -> RatioTest:
    return RatioTest(np.array(edges, dtype=np.float64), np.array(q, dtype=np.float64), None,
                     0.45)


HALVES = [0.0, 0.5, 1.0]

# (A, B, edges, thresholds, passes): each case puts one comparison at its boundary
CASES = [
    # (1 - t) R = 0.75 x 4/3 is exactly the top edge: still inside, its cell is the top one
    (4, 3, HALVES, [BAD, GOOD], True),
    # (1 + t) R = 1.25 x 0.8 is exactly the top edge: not below it, so no second cell
    (4, 5, [0.0, 0.7, 1.0], [GOOD, BAD], True),
    # (1 + t) R = 0.5 is exactly an inner edge: its cell is the one that starts there
    (2, 5, HALVES, [GOOD, BAD], False),
    (2, 5, HALVES, [BAD, GOOD], False),
    # (1 - t) R = 0.675 in the top cell, (1 + t) R above the top edge
    (9, 10, HALVES, [GOOD, BAD], False),
    (9, 10, HALVES, [BAD, GOOD], True),
    # both ends in the first cell
    (1, 5, HALVES, [GOOD, BAD], True),
    # (1 - t) R in the first cell, (1 + t) R = 0.75 in the second, below the top
    (3, 5, HALVES, [GOOD, BAD], False),
    (3, 5, HALVES, [BAD, GOOD], False),
    # thresholds exactly at the allowance t A (with its slack) pass; 1.5 times it fails
    (1, 5, HALVES, [allowance(1), allowance(1)], True),
    (1, 5, HALVES, [1.5 * allowance(1), 1.5 * allowance(1)], False),
    (3, 5, HALVES, [allowance(3), allowance(3)], True),
    # the smallest positive counts pass when the cells allow it; A = 0 never does
    (1, 1, HALVES, [GOOD, GOOD], True),
    (0, 5, HALVES, [GOOD, GOOD], False),
    (1, 0, HALVES, [GOOD, GOOD], False),
    (-1, 5, HALVES, [GOOD, GOOD], False),
    (math.inf, 5, HALVES, [GOOD, GOOD], False),
    (1, math.inf, HALVES, [GOOD, GOOD], False),
    # (1 - t) R above the top edge: nothing of [0, 1] can be within the band
    (3, 2, HALVES, [GOOD, GOOD], False),
]


@pytest.mark.parametrize(("a", "b", "edges", "q", "passes"), CASES)
def test_each_comparison_of_the_pre_test_at_its_boundary(
        a: float, b: float, edges: list[float], q: list[float], passes: bool) -> None:
    assert reference(a, b, edges, q) is passes  # the case is what its comment says
    assert pre_test(a, b, made(edges, q)) is passes


def test_the_boundary_cases_sit_where_their_comments_say() -> None:
    """Float arithmetic puts these ends exactly on the edges the cases rely on."""
    assert (1 - T) * (4 / 3) == 1.0
    assert (1 + T) * (4 / 5) == 1.0
    assert (1 + T) * (2 / 5) == 0.5


@pytest.mark.parametrize("n", [1, 7])
def test_the_pre_test_is_its_docstring_on_the_production_tests(n: int) -> None:
    """Every (A, B) of a grid that spans the pass/fail frontier, daily and weekly: the
    vectorised pre-test agrees with the plain reading value by value, and apply_test
    computes a hull exactly for the values that pass it."""
    a_budget, b_budget = CFG.budget(SYMPTOM_METRIC), CFG.budget(VOLUME_METRIC)
    test = ratio_test_for(a_budget.cell_epsilon, 1, b_budget.cell_epsilon, 1, n,
                          CFG.reliability_test_level)
    a = np.repeat(np.arange(-2, 400, 3, dtype=np.float64), 12)
    b = np.tile(np.array([0, 1, 5, 40, 90, 250, 600, 1500, 4000, 9000, 30_000, 200_000],
                         dtype=np.float64), a.size // 12)
    edges, q = test.edges.tolist(), test.thresholds.tolist()
    expected = np.array([reference(x, y, edges, q) for x, y in zip(a, b, strict=True)])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(b > 0, a / b, np.nan)
    got = _may_pass(a, b, (1 - T) * ratio, (1 + T) * ratio, test, T)
    assert got.dtype == bool
    assert np.array_equal(got, expected)
    assert 0.05 < expected.mean() < 0.95  # the grid spans the frontier
    verdict = apply_test(a, b, test, T)
    assert np.array_equal(~np.isnan(verdict["lower"]), expected)
    assert not (verdict["reliable"] & ~expected).any()


def test_a_hull_exactly_on_the_band_is_reliable() -> None:
    """``lower >= (1 - t) R`` and ``upper <= (1 + t) R`` hold with equality: A = B = 4,
    R = 1, and the hand-made test accepts exactly the cell [0.75, 1.25] (its neighbours'
    thresholds of 0 reject them; the pre-test looks only at those two)."""
    out = apply_test(4.0, 4.0, made([0.0, 0.75, 1.25, 2.0], [GOOD, 100.0, GOOD]), T)
    assert out["lower"].tolist() == [0.75] and out["upper"].tolist() == [1.25]
    assert out["reliable"].tolist() == [True]


def test_ratios_of_every_denominator_and_no_warning() -> None:
    """A / B wherever B > 0 (B = 1 included), NaN where B <= 0, and no division warning
    (1 / 0, 0 / 0) in the task log."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = apply_test([1.0, 0.0, 3.0, 3.0, -2.0], [0.0, 0.0, 1.0, 2.0, -1.0],
                         made(HALVES, [GOOD, GOOD]), T)
    ratio = out["ratio"]
    assert np.isnan(ratio[[0, 1, 4]]).all() and ratio[2:4].tolist() == [3.0, 1.5]
