"""The baseline and the reliability rule, checked by simulation through the same functions
the pipeline runs (metric_estimates -> compute_baseline -> day_changes), and their edges.
The adversarial search over true values is in test_reliability_search.py."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dp_ops.engine.files import write_parquet_atomic
from dp_ops.errors import BaselineIncompatible, DerivedStateTampered, Refusal
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.privacy.noise import add_discrete_laplace, noise_generator
from dp_ops.reports.mobility.baseline import (
    compute_baseline,
    long_estimates,
    read_baseline,
    residential_miss,
    residential_window_alpha,
)
from dp_ops.reports.mobility.config import GROUP_CELLS, MobilityConfig
from dp_ops.reports.mobility.estimates import (
    CATEGORIES,
    integer_change,
    metric_estimates,
    residential_day_alpha,
    residential_hours,
    strictly_below,
    within_promise,
)
from dp_ops.reports.mobility.method_update import apply_method_updates
from dp_ops.reports.mobility.report import day_changes
from dp_ops.steps.release import sha256_file

CFG = MobilityConfig()
ALPHA = strictly_below(CFG.max_error_probability)
GRID = CFG.residential_grid_per_hour
WINDOW = CFG.baseline_dates
DAY = date(2020, 3, 3)  # a Tuesday; the window's Tuesdays are its baseline
TUESDAYS = [d for d in WINDOW if d.weekday() == DAY.weekday()]
CELL_BUDGET = {cell: CFG.budget(group) for group, cells in GROUP_CELLS.items()
               for cell in cells}


def noisy_cells(true: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Long noisy cells from a table of true cell values (columns = cell metrics)."""
    rows = []
    for metric in true.columns:
        budget = CELL_BUDGET[metric]
        values = true[metric].to_numpy(dtype=np.int64)
        rows.append(pd.DataFrame({
            "level": np.int8(2),
            "region_id": true.index.to_numpy(),
            "metric": metric,
            "noisy_value": add_discrete_laplace(values, epsilon=budget.cell_epsilon,
                                                sensitivity=budget.sensitivity, rng=rng),
            "cell_epsilon": budget.cell_epsilon,
            "sensitivity": budget.sensitivity,
        }))
    return pd.concat(rows, ignore_index=True)


def true_cells(users: np.ndarray, factor: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
    """True cell values for regions of ``users`` users, scaled by ``factor``."""
    n = len(users)
    ids = [f"R{i:05d}" for i in range(n)]
    out = {}
    shares = {"places_retail": 0.20, "places_recreation": 0.10, "places_eateries": 0.25,
              "places_groceries": 0.30, "places_pharmacies": 0.08, "places_transit": 0.15,
              "places_parks": 0.12, "workplaces": 0.45}
    for metric, share in shares.items():
        out[metric] = rng.binomial(users, np.clip(share * factor, 0, 1))
    home = rng.binomial(users, 0.9)
    hours = np.clip(12.5 + 2.0 * (factor - 1) * -1, 0, 24)  # more time at home when out less
    out["residential_users"] = home
    out["residential_sum_units"] = np.round((hours - 12) * 60 * home).astype(np.int64)
    out["contributors"] = users
    return pd.DataFrame(out, index=pd.Index(ids, name="region_id"))


def true_metrics(cells: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(index=cells.index)
    out["retail_and_recreation"] = cells[["places_retail", "places_recreation",
                                          "places_eateries"]].sum(axis=1)
    out["grocery_and_pharmacy"] = cells[["places_groceries", "places_pharmacies"]].sum(axis=1)
    out["parks"] = cells["places_parks"]
    out["transit_stations"] = cells["places_transit"]
    out["workplaces"] = cells["workplaces"]
    out["residential"] = cells["residential_sum_units"] / cells["residential_users"] / 60 + 12
    return out.astype(float)


@pytest.fixture(scope="module")
def simulation() -> dict[str, pd.DataFrame]:
    """4000 regions from 20 to 20,000 users; the day's activity is 0.3x..1.6x the window's.

    Fixed key, so the simulation is deterministic; the bounds below hold with wide margins
    for fresh randomness too (see each test).
    """
    rng = noise_generator(key=20200403)
    n = 4000
    users = np.round(np.exp(rng.uniform(np.log(20), np.log(20000), n))).astype(np.int64)
    window_true, frames = [], []
    for d in TUESDAYS:
        cells = true_cells(users, rng.uniform(0.95, 1.05, n), rng)
        window_true.append(true_metrics(cells))
        est = metric_estimates(noisy_cells(cells, rng), grid_per_hour=GRID,
                               residential_alpha=residential_window_alpha(ALPHA))
        frames.append(long_estimates(est, d))
    # compute_baseline needs all 5 days of each weekday: pad the other weekdays' groups
    # by reusing the Tuesday frames under other dates (they are not inspected here).
    padded = []
    for offset in range(7):
        for frame, d in zip(frames, TUESDAYS, strict=True):
            f = frame.copy()
            f["date"] = pd.Timestamp(d + timedelta(days=offset))
            f["weekday"] = (d + timedelta(days=offset)).weekday()
            padded.append(f)
    baseline = compute_baseline(pd.concat(padded, ignore_index=True),
                                residential_miss_per_side=residential_miss(ALPHA))
    factor = rng.uniform(0.3, 1.6, n)
    day_true_cells = true_cells(users, factor, rng)
    day_est = metric_estimates(noisy_cells(day_true_cells, rng), grid_per_hour=GRID,
                               residential_alpha=residential_day_alpha(
                                   ALPHA, residential_miss(ALPHA)))
    changes = day_changes(day_est, apply_method_updates(baseline, None, DAY), DAY,
                          alpha=ALPHA, max_error_points=CFG.max_error_points)
    true_base = pd.concat(window_true).groupby(level=0).median()
    true_change = 100 * (true_metrics(day_true_cells) / true_base - 1)
    return {"changes": changes.set_index("region_id"), "true_change": true_change,
            "baseline": baseline[baseline["weekday"] == DAY.weekday()],
            "true_base": true_base}


def test_published_changes_are_within_ten_points(simulation: dict[str, pd.DataFrame]) -> None:
    """The paper's promise: of published values, fewer than 5% are off by more than 10
    points (each value's own probability is under 5%, so the share is too, in
    expectation). With about 15,000 published values a true share of 5% would give the
    observed share < 5% only half the time, so the assertion is at 4%: a correct rule's
    realised share here is ~0.5% (its worst case is measured by the adversarial search),
    and exceeding 4% would take a > 10 sigma deviation."""
    changes, truth = simulation["changes"], simulation["true_change"]
    published, misses = 0, 0
    for cat in CATEGORIES:
        col = changes[f"{cat}_percent_change_from_baseline"]
        ok = col.notna()
        error = (col[ok] - truth.loc[col[ok].index, cat]).abs()
        published += int(ok.sum())
        misses += int((error > 10).sum())
    assert published > 10000, "the simulation should publish plenty of values"
    assert misses / published < 0.04


def test_small_regions_are_suppressed_large_ones_published(
        simulation: dict[str, pd.DataFrame]) -> None:
    changes = simulation["changes"]
    contributors = changes["contributors"]
    for cat in CATEGORIES:
        col = changes[f"{cat}_percent_change_from_baseline"]
        assert col[contributors < 60].notna().mean() < 0.05, cat
        assert col[contributors > 10000].notna().mean() > 0.95, cat


def test_residential_baseline_interval_covers_the_true_median(
        simulation: dict[str, pd.DataFrame]) -> None:
    """The residential baseline interval misses on each side with probability at most
    residential_miss(alpha) = 1.25%, so covers with >= 97.5%. Over 4,000 series the
    observed coverage is >= 96.5% unless the derivation is wrong (binomial: P(< 96.5% |
    p = 97.5%) < 1e-4); it is ~100% in fact, the per-day intervals are exact but the
    order-statistic bound is a worst case."""
    base = simulation["baseline"]
    base = base[base["category"] == "residential"].set_index("region_id")
    truth = simulation["true_base"]["residential"]
    joined = base.join(truth.rename("true"), how="inner")
    joined = joined[np.isfinite(joined["baseline"])]
    covered = (joined["baseline_lo"] <= joined["true"] + 1e-9) & (
        joined["true"] - 1e-9 <= joined["baseline_hi"])
    assert len(joined) > 3900
    assert covered.mean() >= 0.965
    assert (joined["baseline_miss"] == residential_miss(ALPHA)).all()


def test_count_baseline_keeps_the_noise_key(simulation: dict[str, pd.DataFrame]) -> None:
    base = simulation["baseline"].set_index("category")
    assert base.loc["retail_and_recreation", "noise_cells"].eq(3).all()
    assert base.loc["grocery_and_pharmacy", "noise_cells"].eq(2).all()
    assert base.loc["parks", "noise_cells"].eq(1).all()
    assert base.loc["parks", "noise_epsilon"].eq(CFG.place_epsilon).all()
    assert base.loc["workplaces", "noise_sensitivity"].eq(1).all()


def test_the_promise_is_about_the_published_integer() -> None:
    # ratio 1.1049 rounds to change 10; a true change of 20.6 is 10.6 points off it
    change = integer_change(np.array([1.1049, 1.1051, 0.5]))
    assert change.tolist() == [10.0, 11.0, -50.0]
    assert within_promise(np.array([10.0]), np.array([1.0]), np.array([1.2]), 10).tolist() == [
        True]
    assert not within_promise(np.array([10.0]), np.array([1.0]), np.array([1.206]), 10)[0]
    assert not within_promise(np.array([10.0]), np.array([0.999]), np.array([1.1]), 10)[0]
    assert not within_promise(np.array([10.0]), np.array([np.nan]), np.array([1.1]), 10)[0]


def test_residential_interval_uninformative_without_positive_count() -> None:
    est, lo, hi = residential_hours(
        np.array([60_000.0, 600.0]), np.array([5000.0, -3.0]), np.full(2, 0.22),
        np.full(2, 720), np.full(2, 0.22), np.full(2, 1), grid_per_hour=60, alpha=0.025)
    assert est[0] == pytest.approx(12.2)
    assert lo[0] < est[0] < hi[0] and hi[0] - lo[0] < 1.5
    assert np.isnan(est[1]) and (lo[1], hi[1]) == (0.0, 24.0)


def _window_rows(values: list[float]) -> pd.DataFrame:
    rows = []
    for i, d in enumerate(WINDOW):
        rows.append({"level": 1, "region_id": "R", "category": "parks", "date": pd.Timestamp(d),
                     "weekday": d.weekday(), "value": values[i], "lo": np.nan, "hi": np.nan,
                     "cells": 1, "epsilon": 0.44 if i else 0.3, "sensitivity": 1})
    return pd.DataFrame(rows)


def test_baseline_is_median_of_five_same_weekday_values() -> None:
    base = compute_baseline(_window_rows([float(i) for i in range(len(WINDOW))]),
                            residential_miss_per_side=0.0125)
    assert len(base) == 7
    for row in base.itertuples():
        values = [float(i) for i, d in enumerate(WINDOW) if d.weekday() == row.weekday]
        assert row.baseline == np.median(values)
        # the widest law of the five days (day 0 was noised at a smaller epsilon)
        assert row.noise_epsilon == (0.3 if row.weekday == WINDOW[0].weekday() else 0.44)
        assert row.baseline_miss == 0.0


def test_baseline_refuses_incomplete_weekday_groups() -> None:
    rows = _window_rows([1.0] * len(WINDOW)).iloc[:-1]
    with pytest.raises(ValueError, match="expected 5"):
        compute_baseline(rows, residential_miss_per_side=0.0125)


def test_a_baseline_frozen_before_the_exact_rule_is_refused(tmp_path: Path) -> None:
    """A baseline without the noise key cannot feed the rule and is never recomputed in
    place: the report refuses it (no retry) and says what to do."""
    root = DataRoot(tmp_path / "data")
    old = pd.DataFrame({"level": [0], "region_id": ["DM"], "category": ["parks"],
                        "weekday": [0], "baseline": [100.0], "baseline_lo": [90.0],
                        "baseline_hi": [110.0]})
    write_parquet_atomic(pa.Table.from_pandas(old, preserve_index=False),
                         root.baseline_file("mobility"))
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        # unrecorded, it is refused as not written by the pipeline at all
        with pytest.raises(DerivedStateTampered, match="no record of it"):
            read_baseline(root, ledger)
        ledger.record_derived("mobility", "baseline", sha256_file(root.baseline_file("mobility")))
        with pytest.raises(BaselineIncompatible, match="noise_cells") as info:
            read_baseline(root, ledger)
    finally:
        ledger.dispose()
    assert isinstance(info.value, Refusal)
