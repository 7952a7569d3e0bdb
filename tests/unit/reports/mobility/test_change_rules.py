"""The publish rules of the mobility changes (dp_ops.reports.mobility.estimates), value by
value: which rows get a change at all, the change's integer, and the publish decision at
the edges of the promise. Every expected value is written out; nothing is random."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from dp_ops.reports.mobility.estimates import (
    change_interval,
    count_changes,
    count_estimates,
    count_test,
    residential_changes,
    residential_day_alpha,
    within_promise,
)

ALPHA = 0.05


def count_frame(value: list[float], baseline: list[float], factor: list[float] | None = None,
                factor_lo: list[float] | None = None, factor_hi: list[float] | None = None,
                factor_alpha: float = 0.0) -> pd.DataFrame:
    n = len(value)
    factor = factor or [1.0] * n
    return pd.DataFrame({
        "value": value, "cells": 1, "epsilon": 0.44, "sensitivity": 1,
        "baseline": baseline, "noise_cells": 1, "noise_epsilon": 0.44,
        "noise_sensitivity": 1, "factor": factor,
        "factor_lo": factor_lo or factor, "factor_hi": factor_hi or factor,
        "factor_alpha": factor_alpha})


def test_count_changes_only_for_a_positive_finite_scaled_baseline() -> None:
    frame = count_frame(
        value=[150.0, 300.0, -5.0, 3.0, 10.0, 0.0, 10.0, 10.0, 10.0, math.nan],
        baseline=[100.0, 100.0, 100.0, 1.0, 0.0, 0.0, 100.0, 100.0, 100.0, 100.0],
        factor=[1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 0.0, -1.0, math.inf, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from the rows left out
        change, publish = count_changes(frame, alpha=ALPHA, max_error_points=10)
    assert change[:4].tolist() == [50.0, 50.0, -100.0, 200.0]
    assert np.isnan(change[4:]).all()
    assert not publish[4:].any()


def test_a_count_change_is_published_exactly_when_its_hull_keeps_the_promise() -> None:
    values = [1000.0, 1100.0, 2000.0, 50.0, 10.0]
    base = [1000.0, 1000.0, 1000.0, 40.0, 10.0]
    frame = count_frame(values, base)
    change, publish = count_changes(frame, alpha=ALPHA, max_error_points=10)
    lo, hi = count_test((1, 0.44, 1), (1, 0.44, 1), ALPHA).hull(values, base)
    expected = within_promise(change, lo, hi, 10)
    assert publish.tolist() == expected.tolist()
    assert publish.tolist() == [True, True, True, False, False]


def test_the_change_interval_is_the_ratio_hull_in_points_rounded_outwards() -> None:
    low, high = change_interval(np.array([0.5, 1.0, 0.9951, 0.0, np.nan]),
                                np.array([1.25, 1.0, 1.0049, 0.25, 1.0]))
    assert low[:4].tolist() == [-50.0, 0.0, -1.0, -100.0]
    assert high[:4].tolist() == [25.0, 0.0, 1.0, -75.0]
    assert np.isnan(low[4]) and high[4] == 0.0


def test_count_estimates_give_the_hull_of_the_publish_decision_as_the_interval() -> None:
    values = [1000.0, 1100.0, 2000.0, 50.0, 10.0]
    base = [1000.0, 1000.0, 1000.0, 40.0, 0.0]
    est = count_estimates(count_frame(values, base), alpha=ALPHA, max_error_points=10)
    lo, hi = count_test((1, 0.44, 1), (1, 0.44, 1), ALPHA).hull(values[:4], base[:4])
    assert est.low[:4].tolist() == np.floor(100 * (lo - 1)).tolist()
    assert est.high[:4].tolist() == np.ceil(100 * (hi - 1)).tolist()
    # a published change lies within 10 points of every point of its interval
    shown = est.publish
    assert shown[:3].all() and not shown[3:].any()
    assert ((est.change[shown] - est.low[shown] <= 10)
            & (est.high[shown] - est.change[shown] <= 10)).all()
    assert (est.low[:3] <= est.change[:3]).all() and (est.change[:3] <= est.high[:3]).all()
    assert np.isnan(est.low[4]) and np.isnan(est.high[4])  # no baseline, no interval
    change, publish = count_changes(count_frame(values, base), alpha=ALPHA,
                                    max_error_points=10)
    np.testing.assert_array_equal(change, est.change)
    np.testing.assert_array_equal(publish, est.publish)


def test_a_method_update_divides_the_hull_by_the_factor_interval_and_takes_its_alpha() -> None:
    values, base = [2600.0, 2600.0], [2000.0, 2000.0]
    frame = count_frame(values, base, factor=[1.3, 1.3], factor_lo=[1.29, 1.1],
                        factor_hi=[1.31, 1.5], factor_alpha=0.01)
    change, publish = count_changes(frame, alpha=ALPHA, max_error_points=10)
    assert change.tolist() == [0.0, 0.0]
    lo, hi = count_test((1, 0.44, 1), (1, 0.44, 1), ALPHA - 0.01).hull(values, base)
    assert publish.tolist() == within_promise(
        change, lo / np.array([1.31, 1.5]), hi / np.array([1.29, 1.1]), 10).tolist()
    assert publish.tolist() == [True, False]
    spent = count_frame(values, base, factor=[1.3, 1.3], factor_alpha=ALPHA)
    assert not count_changes(spent, alpha=ALPHA, max_error_points=10)[1].any()


def test_residential_changes_values_and_decisions() -> None:
    # the last three rows have no change: no positive baseline, an infinite one, and a
    # positive baseline whose interval reaches 0 (no ratio bound above)
    hours = [15.0, 12.0, 12.0, 12.0, 6.0, 12.0, 12.0, 0.0, 12.0]
    lo = [14.9, 10.0, 11.9, 11.9, 5.9, 11.0, 11.0, 0.0, 11.9]
    hi = [15.1, 12.1, 12.1, 12.1, 6.1, 13.0, 13.0, 0.0, 12.1]
    base = [12.0, 12.0, 12.0, 0.5, 12.0, 0.0, math.inf, 0.0, 12.0]
    base_lo = [11.9, 11.9, 11.9, 0.4, 11.9, 0.5, 11.0, 0.0, 0.0]
    base_hi = [12.1, 12.1, 12.1, 0.6, 12.1, 1.0, math.inf, 0.0, 12.1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        change, publish = residential_changes(hours, lo, hi, base, base_lo, base_hi,
                                              max_error_points=10)
    # 15 / 12 = +25%; 14.9 / 12.1 - 1 = 23.1% and 15.1 / 11.9 - 1 = 26.9%: within 10
    assert change[:5].tolist() == [25.0, 0.0, 0.0, 2300.0, -50.0]
    # 10 / 12.1 - 1 = -17.4%: more than 10 points below 0
    assert publish[:5].tolist() == [True, False, True, False, True]
    assert np.isnan(change[5:]).all() and not publish[5:].any()


def test_the_residential_day_alpha_is_what_the_baseline_leaves() -> None:
    assert residential_day_alpha(0.05, 0.01) == 0.05 - 2 * 0.01
    assert residential_day_alpha(0.05, 0.0) == 0.05
    for miss in (0.025, 0.03):
        with pytest.raises(ValueError) as err:
            residential_day_alpha(0.05, miss)
        assert str(err.value) == f"baseline_miss={miss!r} leaves nothing of alpha=0.05"


def test_the_factor_alpha_is_taken_from_the_rule_and_each_key_is_tested_apart() -> None:
    """80 against a baseline of 100: published at level 0.06, not at 0.04. With a method
    update that took 0.01 the count test gets 0.05 - 0.01 = 0.04, so it is withheld; a
    group whose factor took all of alpha is withheld without a test, and the groups after
    it are still decided."""
    frame = pd.concat([
        count_frame([80.0], [100.0], factor_alpha=ALPHA),           # nothing left
        count_frame([80.0], [100.0], factor_alpha=0.01),            # tested at 0.04
        count_frame([80.0], [100.0], factor_alpha=0.0).assign(cells=3),  # another key
        count_frame([1000.0], [1000.0], factor_alpha=0.0),
    ], ignore_index=True)
    change, publish = count_changes(frame, alpha=ALPHA, max_error_points=10)
    assert change.tolist() == [-20.0, -20.0, -20.0, 0.0]
    lo, hi = count_test((3, 0.44, 1), (1, 0.44, 1), ALPHA).hull([80.0], [100.0])
    assert publish.tolist() == [False, False,
                                bool(within_promise(change[2:3], lo, hi, 10)[0]), True]
    wider = count_changes(count_frame([80.0], [100.0], factor_alpha=0.0), alpha=0.06,
                          max_error_points=10)[1]
    assert wider.tolist() == [True]  # the level decides this row


def test_each_end_of_the_factor_interval_bounds_its_side() -> None:
    """Lower ratio bound = hull low / factor high; upper = hull high / factor low. A factor
    interval wide only upwards withholds for the lower side alone; a factor interval that
    reaches 0 leaves the upper side unbounded, without warnings."""
    values, base = [2600.0, 2600.0, 0.0], [2000.0, 2000.0, 100.0]
    frame = count_frame(values, base, factor=[1.3, 1.3, 1.0], factor_lo=[1.29, 1.29, 0.0],
                        factor_hi=[1.31, 1.6, 0.0], factor_alpha=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        change, publish = count_changes(frame, alpha=ALPHA, max_error_points=10)
    lo, hi = count_test((1, 0.44, 1), (1, 0.44, 1), ALPHA).hull(values[:2], base[:2])
    assert (100 * (hi[1] / 1.29 - 1) <= change[1] + 10) and \
        not (100 * (lo[1] / 1.6 - 1) >= change[1] - 10)
    assert publish.tolist() == [True, False, False]


def test_within_promise_at_its_edges() -> None:
    # 100 (0.75 - 1) = -25 and 100 (1.25 - 1) = 25 exactly: both ends count as within
    change = np.array([-15.0, 15.0, -15.0, 15.0])
    lo = np.array([0.75, 1.0625, 0.7499, 1.0625])
    hi = np.array([0.9375, 1.25, 0.9375, 1.2501])
    assert within_promise(change, lo, hi, 10).tolist() == [True, True, False, False]


# -- the day's estimates from its noisy cells ----------------------------------------------

def long_cells() -> pd.DataFrame:
    """Two regions' noisy cells as the noise step stores them (one row per cell); the
    second region's cells carry other epsilons and sensitivities."""
    from dp_ops.reports.mobility.estimates import (
        CONTRIBUTORS,
        COUNT_CATEGORY_CELLS,
        RESIDENTIAL_COUNT,
        RESIDENTIAL_SUM,
    )

    metrics = [c for cells in COUNT_CATEGORY_CELLS.values() for c in cells]
    metrics += [RESIDENTIAL_SUM, RESIDENTIAL_COUNT, CONTRIBUTORS]
    rows = []
    for level, region, base, eps, sens in ((2, "A", 10, 0.44, 1), (1, "B", 100, 0.22, 2)):
        for i, metric in enumerate(metrics):
            value = base + i
            if metric == RESIDENTIAL_SUM:
                value = 6 * 4 * 200 * (1 if region == "A" else -1)  # +-6 h x g x users
            if metric == RESIDENTIAL_COUNT:
                value = 200
            cell_eps = eps / 2 if metric == "places_eateries" else eps
            rows.append({"level": level, "region_id": region, "metric": metric,
                         "noisy_value": value, "cell_epsilon": cell_eps,
                         "sensitivity": sens + (metric == "places_groceries")})
    return pd.DataFrame(rows)


def test_metric_estimates_sum_each_category_and_keep_its_noise_key() -> None:
    from dp_ops.reports.mobility.estimates import metric_estimates

    out = metric_estimates(long_cells(), grid_per_hour=4, residential_alpha=0.025)
    assert out[["level", "region_id"]].values.tolist() == [[1, "B"], [2, "A"]]
    b, a = out.iloc[0], out.iloc[1]
    # A: places_retail 10, recreation 11, eateries 12 | groceries 13, pharmacies 14 |
    # parks 15 | transit 16 | workplaces 17 | residential 18, 19 | contributors 20
    assert (a["retail_and_recreation"], a["grocery_and_pharmacy"], a["parks"],
            a["transit_stations"], a["workplaces"]) == (33.0, 27.0, 15.0, 16.0, 17.0)
    assert (b["retail_and_recreation"], b["workplaces"]) == (303.0, 107.0)
    assert a["retail_and_recreation_cells"] == 3 and a["parks_cells"] == 1
    assert a["retail_and_recreation_epsilon"] == 0.22 and a["parks_epsilon"] == 0.44
    assert b["retail_and_recreation_epsilon"] == 0.11 and b["parks_epsilon"] == 0.22
    assert a["grocery_and_pharmacy_sensitivity"] == 2 and a["parks_sensitivity"] == 1
    assert b["grocery_and_pharmacy_sensitivity"] == 3 and b["parks_sensitivity"] == 2
    assert out["parks_sensitivity"].dtype == np.int64
    assert (a["residential"], b["residential"]) == (18.0, 6.0)  # 12 +- 6 hours
    assert 0 < a["residential_lo"] < 18.0 < a["residential_hi"] < 24
    assert 0 < b["residential_lo"] < 6.0 < b["residential_hi"] < 24
    assert (a["contributors"], b["contributors"]) == (20, 110)
    assert out["contributors"].dtype == np.int64


def test_residential_hours_clamps_to_the_day_and_bounds_every_row() -> None:
    from dp_ops.reports.mobility.estimates import offset_test, residential_hours

    g = 4
    users = np.array([200, 200, 200, 1, 0, -3, 0, 10_000], dtype=float)
    offset = np.array([6.0, -14.0, 14.0, 1.0, 1.0, 1.0, 0.0, -12.0])  # true hours - 12
    s = offset * g * np.maximum(users, 0)
    n = s.size
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est, lo, hi = residential_hours(s, users, np.full(n, 0.22), np.full(n, 12.0 * g),
                                        np.full(n, 0.22), np.ones(n), grid_per_hour=g,
                                        alpha=0.025)
    assert est[:4].tolist() == [18.0, 0.0, 24.0, 13.0]
    assert np.isnan(est[4:7]).all() and est[7] == 0.0
    assert lo.dtype == hi.dtype == np.float64
    o_lo, o_hi = offset_test((0.22, 48), (0.22, 1), g, 0.025).hull(s, g * users)
    empty = ~(o_lo <= o_hi)
    assert lo.tolist() == np.where(empty, 0.0, np.clip(12 + o_lo, 0, 24)).tolist()
    assert hi.tolist() == np.where(empty, 24.0, np.clip(12 + o_hi, 0, 24)).tolist()
    # no positive count: the whole day; hours near 0 with many users: an upper end below 1
    assert lo[4:7].tolist() == [0.0] * 3 and hi[4:7].tolist() == [24.0] * 3
    assert 0 < hi[7] < 1
    # 12 -+ 14 hours: outside the day, the test rejects every offset: the whole day
    assert empty[1:3].all() and lo[1:3].tolist() == [0.0, 0.0] and hi[1:3].tolist() == [24.0] * 2


def test_residential_hours_without_a_positive_count_have_no_estimate_and_no_warning() -> None:
    """A noisy count of 0 (or below) beside a non-zero noisy sum: no estimate, and no
    division-by-zero warning in the task log."""
    from dp_ops.reports.mobility.estimates import residential_hours

    s, c = np.array([5.0, -7.0, 0.0, 3.0]), np.array([0.0, 0.0, 0.0, -2.0])
    n = s.size
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est, _, _ = residential_hours(s, c, np.full(n, 0.22), np.full(n, 48.0),
                                      np.full(n, 0.22), np.ones(n), grid_per_hour=4,
                                      alpha=0.025)
    assert np.isnan(est).all()


def test_strictly_below_is_the_next_float_down() -> None:
    from dp_ops.reports.mobility.estimates import strictly_below

    assert strictly_below(0.05) < 0.05
    assert strictly_below(0.05) == math.nextafter(0.05, 0.0)
