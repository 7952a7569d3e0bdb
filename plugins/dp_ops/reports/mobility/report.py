"""One day of the report: percent changes against the frozen baseline, and suppression.

Uses only stored noisy values, the frozen baseline and the public region table
(post-processing). Row rules (docs/design.md, Mobility report): a region under
``min_area_km2`` is never
published; a region-day with fewer than ``min_contributors`` DP-contributing users is not
published. Value rule: a change is published only if reliable (see
:mod:`dp_ops.reports.mobility.estimates`). A region-day with no publishable change has no row.

The output keeps the whole domain (every region of the table, every day), with a
``publish_row`` flag and the reason, so that the release gate can check completeness and
the manifest can report suppression rates.
"""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
import pyarrow as pa

from dp_ops.api import DataRoot, StepResult, load_noisy_cells, open_ledger, write_day_file
from dp_ops.reports.mobility.baseline import read_baseline
from dp_ops.reports.mobility.config import REPORT, MobilityConfig
from dp_ops.reports.mobility.estimates import (
    CATEGORIES,
    COUNT_CATEGORY_CELLS,
    RESIDENTIAL,
    count_estimates,
    metric_estimates,
    residential_day_alpha,
    residential_estimates,
    strictly_below,
)
from dp_ops.reports.mobility.method_update import apply_method_updates, read_method_updates

KEY_COLUMNS: tuple[str, ...] = (
    "country_region_code", "country_region", "sub_region_1", "sub_region_2", "metro_area",
    "iso_3166_2_code", "census_fips_code", "place_id",
)
CHANGE_COLUMNS: tuple[str, ...] = tuple(f"{c}_percent_change_from_baseline" for c in CATEGORIES)
# A published row: its region, its date, then one change per category (Google's header).
ROW_KEY: tuple[str, ...] = KEY_COLUMNS + ("date",)
PUBLISHED_COLUMNS: tuple[str, ...] = ROW_KEY + CHANGE_COLUMNS
# Each published change's 95% interval (the level of the reliability rule), in points:
# the sidecar file's columns after the row key, low and high of each category in turn.
INTERVAL_COLUMNS: tuple[str, ...] = tuple(f"{c}_{end}" for c in CHANGE_COLUMNS
                                          for end in ("low", "high"))
INTERVAL_FILE_COLUMNS: tuple[str, ...] = ROW_KEY + INTERVAL_COLUMNS


def day_changes(estimates: pd.DataFrame, baseline: pd.DataFrame, day: date, *,
                alpha: float, max_error_points: float) -> pd.DataFrame:
    """Per (level, region_id): the integer change of each category (NaN = suppressed) and
    its interval (``<change>_low``, ``<change>_high``; NaN where the change is).

    ``baseline`` is the frozen baseline with the factor columns of the method updates in
    effect (``factor``, ``factor_lo``, ``factor_hi``, ``factor_alpha``), see
    :func:`dp_ops.reports.mobility.method_update.apply_method_updates`.
    """
    base = baseline[baseline["weekday"] == day.weekday()]
    keys = ["level", "region_id"]
    out = estimates[["level", "region_id", "contributors", RESIDENTIAL]].copy()
    for cat in CATEGORIES:
        b = base[base["category"] == cat].drop(columns=["category", "weekday"])
        if cat in COUNT_CATEGORY_CELLS:
            today = estimates[keys + [cat, f"{cat}_cells", f"{cat}_epsilon",
                                      f"{cat}_sensitivity"]].rename(columns={
                cat: "value", f"{cat}_cells": "cells", f"{cat}_epsilon": "epsilon",
                f"{cat}_sensitivity": "sensitivity"})
            merged = today.merge(b, on=keys, how="left", validate="one_to_one")
            est = count_estimates(merged, alpha=alpha, max_error_points=max_error_points)
        else:
            merged = estimates[keys + [cat, f"{cat}_lo", f"{cat}_hi"]].merge(
                b, on=keys, how="left", validate="one_to_one")
            est = residential_estimates(
                merged[cat], merged[f"{cat}_lo"], merged[f"{cat}_hi"], merged["baseline"],
                merged["baseline_lo"], merged["baseline_hi"],
                max_error_points=max_error_points)
        column = f"{cat}_percent_change_from_baseline"
        out[column] = np.where(est.publish, est.change, np.nan)
        out[f"{column}_low"] = np.where(est.publish, est.low, np.nan)
        out[f"{column}_high"] = np.where(est.publish, est.high, np.nan)
    return out


def apply_row_rules(changes: pd.DataFrame, regions: pd.DataFrame, day: date,
                    cfg: MobilityConfig) -> pd.DataFrame:
    """Join region metadata, apply the area and contributor rules, flag published rows."""
    meta = regions[["region_id", "level", "area_km2", *KEY_COLUMNS]].copy()
    meta = meta[meta["level"].isin(cfg.levels)]
    meta["level"] = meta["level"].astype(np.int8)
    rows = meta.merge(changes, on=["level", "region_id"], how="left")
    rows["date"] = day.isoformat()
    rows["date_value"] = pd.Timestamp(day)
    rows["noisy_contributors"] = rows["contributors"].fillna(0).astype("int64")
    rows["residential_hours"] = pd.array(rows["residential"], dtype="Float64")
    small = rows["area_km2"] < cfg.min_area_km2
    few = rows["noisy_contributors"] < cfg.min_contributors
    for col in CHANGE_COLUMNS + INTERVAL_COLUMNS:
        values = rows[col].where(~(small | few))
        rows[col] = pd.array(values.round(), dtype="Float64").astype("Int64")
    nothing = rows[list(CHANGE_COLUMNS)].isna().all(axis=1)
    rows["row_reason"] = np.select(
        [small.to_numpy(), few.to_numpy(), nothing.to_numpy()],
        ["area_under_minimum", "contributors_under_minimum", "all_values_unreliable"],
        default="published")
    rows["publish_row"] = rows["row_reason"] == "published"
    rows = rows.drop(columns=["contributors", "residential"])
    return rows.sort_values(["level", "region_id"]).reset_index(drop=True)


def report_day(root: DataRoot, cfg: MobilityConfig, day: date, *, ledger_url: str) -> StepResult:
    target = root.report_file(REPORT, day)
    if day < cfg.first_public_date:
        return StepResult(f"no report rows for {day}: the public series starts "
                          f"{cfg.first_public_date}")
    # stored method-update factors scale the baseline from their effective date (the
    # baseline file itself is never rewritten)
    ledger = open_ledger(root, ledger_url)
    try:
        baseline = apply_method_updates(read_baseline(root, ledger),
                                        read_method_updates(root, ledger), day)
        cells = load_noisy_cells(root, REPORT, day, ledger.spends(REPORT, day))
        rows = _day_rows(root, cfg, day, baseline, cells)
        write_day_file(root, ledger, REPORT, day, pa.Table.from_pandas(rows,
                                                                       preserve_index=False))
    finally:
        ledger.dispose()
    published = int(rows["publish_row"].sum())
    return StepResult(f"report for {day}: {published} of {len(rows)} region rows publishable; "
                      f"rows in {target}", (str(target),))


def _day_rows(root: DataRoot, cfg: MobilityConfig, day: date, baseline: pd.DataFrame,
              cells: pd.DataFrame) -> pd.DataFrame:
    from dp_ops.regions import read_regions

    alpha = strictly_below(cfg.max_error_probability)
    residential_miss = float(baseline.loc[baseline["category"] == RESIDENTIAL,
                                          "baseline_miss"].max())
    estimates = metric_estimates(cells, grid_per_hour=cfg.residential_grid_per_hour,
                                 residential_alpha=residential_day_alpha(alpha,
                                                                         residential_miss))
    changes = day_changes(estimates, baseline, day, alpha=alpha,
                          max_error_points=cfg.max_error_points)
    return apply_row_rules(changes, read_regions(root.regions_csv), day, cfg)
