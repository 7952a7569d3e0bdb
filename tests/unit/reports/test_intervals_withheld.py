"""Where a change is withheld its interval is empty; where it is published its interval is
not empty and holds it. Checked on what a release ships: the mobility intervals sidecar
(:func:`dp_ops.reports.mobility.release.intervals_table`) beside the published table,
from one simulated day run through the pipeline's own functions (metric_estimates ->
compute_baseline -> day_changes -> apply_row_rules), and the symptoms interval tables
(one row per published value, none for a withheld one) of a constructed release.

Deterministic (fixed keys). Neither premise (some values withheld by the reliability rule
and some published in every category) depends on luck: the regions span 20 to 20,000
users, and the rule withholds nearly every value of the smallest and publishes nearly
every value of the largest.
"""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest

from dp_ops.privacy.noise import add_discrete_laplace, noise_generator
from dp_ops.reports.mobility.baseline import (
    compute_baseline,
    long_estimates,
    residential_miss,
    residential_window_alpha,
)
from dp_ops.reports.mobility.config import GROUP_CELLS, MobilityConfig
from dp_ops.reports.mobility.estimates import (
    metric_estimates,
    residential_day_alpha,
    strictly_below,
)
from dp_ops.reports.mobility.method_update import apply_method_updates
from dp_ops.reports.mobility.release import assemble, intervals_table
from dp_ops.reports.mobility.report import (
    CHANGE_COLUMNS,
    INTERVAL_FILE_COLUMNS,
    KEY_COLUMNS,
    ROW_KEY,
    apply_row_rules,
    day_changes,
)

CFG = MobilityConfig()
ALPHA = strictly_below(CFG.max_error_probability)
DAY = date(2020, 3, 3)  # a Tuesday, after the first public date
TUESDAYS = [d for d in CFG.baseline_dates if d.weekday() == DAY.weekday()]
CELL_BUDGET = {cell: CFG.budget(group) for group, cells in GROUP_CELLS.items()
               for cell in cells}
SHARES = {"places_retail": 0.20, "places_recreation": 0.10, "places_eateries": 0.25,
          "places_groceries": 0.30, "places_pharmacies": 0.08, "places_transit": 0.15,
          "places_parks": 0.12, "workplaces": 0.45}
N = 400


def _true_cells(users: np.ndarray, factor: np.ndarray, rng: np.random.Generator
                ) -> pd.DataFrame:
    out: dict[str, np.ndarray] = {m: rng.binomial(users, np.clip(s * factor, 0, 1))
                                  for m, s in SHARES.items()}
    home = rng.binomial(users, 0.9)
    hours = np.clip(12.5 - 2.0 * (factor - 1), 0, 24)
    out["residential_users"] = home
    out["residential_sum_units"] = np.round((hours - 12) * 60 * home).astype(np.int64)
    out["contributors"] = users
    return pd.DataFrame(out, index=pd.Index([f"R{i:04d}" for i in range(len(users))],
                                            name="region_id"))


def _noisy(true: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for metric in true.columns:
        budget = CELL_BUDGET[metric]
        rows.append(pd.DataFrame({
            "level": np.int8(2), "region_id": true.index.to_numpy(), "metric": metric,
            "noisy_value": add_discrete_laplace(true[metric].to_numpy(np.int64),
                                                epsilon=budget.cell_epsilon,
                                                sensitivity=budget.sensitivity, rng=rng),
            "cell_epsilon": budget.cell_epsilon, "sensitivity": budget.sensitivity}))
    return pd.concat(rows, ignore_index=True)


@pytest.fixture(scope="module")
def mobility_release() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(published table, intervals sidecar) of one simulated day of N regions."""
    rng = noise_generator(key=48)
    users = np.round(np.exp(rng.uniform(np.log(20), np.log(20_000), N))).astype(np.int64)
    frames = []
    for day in TUESDAYS:
        est = metric_estimates(_noisy(_true_cells(users, rng.uniform(0.95, 1.05, N), rng),
                                      rng), grid_per_hour=CFG.residential_grid_per_hour,
                               residential_alpha=residential_window_alpha(ALPHA))
        frames += [long_estimates(est, day + timedelta(days=k)).assign(
            weekday=(day + timedelta(days=k)).weekday()) for k in range(7)]
    baseline = compute_baseline(pd.concat(frames, ignore_index=True),
                                residential_miss_per_side=residential_miss(ALPHA))
    today = metric_estimates(
        _noisy(_true_cells(users, rng.uniform(0.3, 1.6, N), rng), rng),
        grid_per_hour=CFG.residential_grid_per_hour,
        residential_alpha=residential_day_alpha(ALPHA, residential_miss(ALPHA)))
    changes = day_changes(today, apply_method_updates(baseline, None, DAY), DAY,
                          alpha=ALPHA, max_error_points=CFG.max_error_points)
    regions = pd.DataFrame({"region_id": changes["region_id"], "level": 2,
                            "area_km2": 100.0,
                            **{c: "" for c in KEY_COLUMNS},
                            "country_region_code": "DM", "sub_region_1": changes["region_id"]})
    rows = apply_row_rules(changes, regions, DAY, CFG)
    import pyarrow as pa

    internal, published = assemble([pa.Table.from_pandas(rows, preserve_index=False)])
    return published, intervals_table(internal)


def test_the_sidecar_has_the_published_rows_in_their_order(
        mobility_release: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    published, intervals = mobility_release
    withheld = published[list(CHANGE_COLUMNS)].isna()
    # the premise of the next test: values withheld and published, count and residential
    assert withheld.any(axis=None) and not withheld.all(axis=None)
    assert 0 < withheld["residential_percent_change_from_baseline"].sum() < len(published)
    assert 0 < withheld["parks_percent_change_from_baseline"].sum() < len(published)
    assert list(intervals.columns) == list(INTERVAL_FILE_COLUMNS)
    pd.testing.assert_frame_equal(intervals[list(ROW_KEY)], published[list(ROW_KEY)])


@pytest.mark.parametrize("change", CHANGE_COLUMNS)
def test_a_withheld_change_has_an_empty_interval_a_published_one_holds_it(
        mobility_release: tuple[pd.DataFrame, pd.DataFrame], change: str) -> None:
    published, intervals = mobility_release
    value = published[change]
    low, high = intervals[f"{change}_low"], intervals[f"{change}_high"]
    withheld = value.isna().to_numpy()
    assert low[withheld].isna().all() and high[withheld].isna().all(), \
        "a withheld change has an interval in the sidecar"
    shown = ~withheld
    assert low[shown].notna().all() and high[shown].notna().all()
    assert ((low[shown] <= value[shown]) & (value[shown] <= high[shown])).all()


# -- symptoms -----------------------------------------------------------------------------

def test_a_withheld_symptoms_value_has_no_interval_a_published_one_holds_it() -> None:
    """The symptoms interval tables hold one row per published value and none for a
    withheld (empty) cell of the wide file; each row's interval holds its value."""
    from dp_demo.geography import demo_regions

    from dp_ops.reports.symptoms.assemble import build_candidate
    from dp_ops.reports.symptoms.config import SymptomsConfig
    from dp_ops.reports.symptoms.daily import with_reliability

    cfg = SymptomsConfig()
    regions = demo_regions()
    rates = {"Fever": 0.05, "Cough": 0.01, "Anosmia": 0.0005}
    rng = noise_generator(key=4848)
    a_cell, b_cell = cfg.budget("symptom_searches"), cfg.budget("search_users")
    rows = []
    for day in (date(2020, 1, 6) + timedelta(days=i) for i in range(7)):
        for region in regions[regions["level"].isin(cfg.levels)].itertuples():
            share = 1.0 if region.level == 0 else min(1.0, float(region.area_km2) / 28889.0)
            b_true = int(60_000 * share)
            b = b_true + int(add_discrete_laplace(np.zeros(1, np.int64),
                                                  epsilon=b_cell.cell_epsilon,
                                                  sensitivity=1, rng=rng)[0])
            for symptom, rate in rates.items():
                a = int(rate * b_true) + int(add_discrete_laplace(
                    np.zeros(1, np.int64), epsilon=a_cell.cell_epsilon, sensitivity=1,
                    rng=rng)[0])
                rows.append((region.level, region.region_id, symptom, day, a,
                             a_cell.cell_epsilon, 1, b, b_cell.cell_epsilon, 1))
    frame = with_reliability(pd.DataFrame(rows, columns=[
        "level", "region_id", "symptom", "date", "a_noisy", "a_epsilon", "a_sensitivity",
        "b_noisy", "b_epsilon", "b_sensitivity"]), cfg, n_days=1)
    scaling = pd.DataFrame({"region_id": pd.Series(dtype="str"),
                            "resolution": pd.Series(dtype="str"),
                            "c": pd.Series(dtype="float64"),
                            "first_release_last_date": pd.Series(dtype="str")})
    candidate = build_candidate(frame, regions, list(rates), cfg, scaling)
    for wide, table in ((candidate.daily, candidate.daily_intervals),
                        (candidate.weekly, candidate.weekly_intervals)):
        cells = wide.melt(id_vars=["open_covid_region_code", "date"],
                          value_vars=[f"symptom:{s}" for s in rates], var_name="symptom")
        cells["symptom"] = cells["symptom"].str.removeprefix("symptom:")
        merged = cells.merge(table, on=["open_covid_region_code", "date", "symptom"],
                             how="left", suffixes=("", "_table"), indicator=True)
        withheld = merged["value"].isna()
        assert 0 < withheld.sum() < len(merged), "the premise: some withheld, some published"
        assert (merged.loc[withheld, "_merge"] == "left_only").all(), \
            "a withheld value has a row in the interval table"
        shown = merged[~withheld]
        assert (shown["_merge"] == "both").all() and len(table) == len(shown)
        assert (shown["value_table"] == shown["value"]).all()
        assert ((shown["low"] <= shown["value"]) & (shown["value"] <= shown["high"])).all()
        assert (shown["low"] < shown["high"]).all()
