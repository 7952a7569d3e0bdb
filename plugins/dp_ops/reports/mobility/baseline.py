"""The frozen baseline: per region, category and weekday, the median of the 5 noisy values
of that weekday in the window 2020-01-03..2020-02-06 (docs/design.md, Mobility report).

Computed once, from noisy values only (post-processing), when every day of the window is
noised, and stored with a first-writer-wins link; never recomputed, since recomputing it
from re-noised days would be a second release of the same data.

Stored with it, for the reliability rule (:mod:`dp_ops.reports.mobility.estimates`):
for a count category the noise key of one window day (``noise_cells``, the smallest
``noise_epsilon``, the largest ``noise_sensitivity`` over the five days: the widest law,
whose maximum of three has the heaviest upper tail); for residential the interval
``[baseline_lo, baseline_hi]``, the medians of the five days' intervals at level
``2 beta``, which misses on each side with probability at most ``baseline_miss``.
"""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
import pyarrow as pa

from dp_ops.api import DataRoot, StepResult, load_noisy_cells, open_ledger
from dp_ops.engine.files import exclusive_lock
from dp_ops.errors import BaselineIncompatible, BaselineMissing
from dp_ops.privacy.ledger import ALL_REGIONS, Ledger
from dp_ops.reports.mobility.config import REPORT, MobilityConfig
from dp_ops.reports.mobility.estimates import (
    BASELINE_DAYS_LOWEST,
    CATEGORIES,
    COUNT_CATEGORY_CELLS,
    RESIDENTIAL,
    metric_estimates,
    strictly_below,
)
from dp_ops.steps.derived import read_recorded, store_recorded, verify_recorded
from dp_ops.steps.release import sha256_file

WINDOW_DAYS_PER_WEEKDAY = 5


def residential_miss(alpha: float) -> float:
    """The residential baseline's miss probability on each side: a quarter of the rule's
    (today's interval gets the other half)."""
    return alpha / 4


def residential_window_alpha(alpha: float) -> float:
    """Level of each window day's residential interval, ``2 beta`` with ``1 - (1 -
    beta)^3 = residential_miss(alpha)`` (estimates.py, Residential)."""
    beta = 1 - (1 - residential_miss(alpha)) ** (1 / BASELINE_DAYS_LOWEST)
    return float(2 * beta)


def long_estimates(estimates: pd.DataFrame, day: date) -> pd.DataFrame:
    """Wide per-region estimates of one day -> long rows (level, region_id, category,
    date, weekday, value, lo, hi, cells, epsilon, sensitivity)."""
    parts = []
    n = len(estimates)
    for cat in CATEGORIES:
        counted = cat in COUNT_CATEGORY_CELLS
        parts.append(pd.DataFrame({
            "level": estimates["level"].to_numpy(),
            "region_id": estimates["region_id"].to_numpy(),
            "category": cat,
            "value": estimates[cat].to_numpy(dtype=float),
            "lo": np.full(n, np.nan) if counted else estimates[f"{cat}_lo"].to_numpy(float),
            "hi": np.full(n, np.nan) if counted else estimates[f"{cat}_hi"].to_numpy(float),
            "cells": estimates[f"{cat}_cells"].to_numpy(np.int64) if counted
            else np.zeros(n, np.int64),
            "epsilon": estimates[f"{cat}_epsilon"].to_numpy(float) if counted
            else np.full(n, np.nan),
            "sensitivity": estimates[f"{cat}_sensitivity"].to_numpy(np.int64) if counted
            else np.zeros(n, np.int64),
        }))
    out = pd.concat(parts, ignore_index=True)
    out["date"] = pd.Timestamp(day)
    out["weekday"] = day.weekday()
    return out


def compute_baseline(window: pd.DataFrame, *, residential_miss_per_side: float
                     ) -> pd.DataFrame:
    """Median of the 5 same-weekday values (and of their interval ends) per group, with
    the noise key of the count categories and the residential interval's miss
    probability (module docstring).

    ``window`` holds long estimates for the 35 window days. A NaN among the five values
    (e.g. a residential count <= 0) makes the baseline NaN, which suppresses the series.
    """
    keys = ["level", "region_id", "category", "weekday"]
    ordered = window.sort_values(keys + ["date"], kind="stable")
    sizes = ordered.groupby(keys, sort=False).size()
    if not (sizes == WINDOW_DAYS_PER_WEEKDAY).all():
        bad = sizes[sizes != WINDOW_DAYS_PER_WEEKDAY].index[0]
        raise ValueError(f"baseline group {bad} has {sizes.loc[bad]} values, expected "
                         f"{WINDOW_DAYS_PER_WEEKDAY}")
    groups = ordered[keys].iloc[::WINDOW_DAYS_PER_WEEKDAY].reset_index(drop=True)

    def by_group(col: str) -> np.ndarray:
        values: np.ndarray = ordered[col].to_numpy().reshape(-1, WINDOW_DAYS_PER_WEEKDAY)
        return values

    for col, name in (("value", "baseline"), ("lo", "baseline_lo"), ("hi", "baseline_hi")):
        groups[name] = np.median(by_group(col).astype(float), axis=1)
    groups["noise_cells"] = by_group("cells").astype(np.int64).max(axis=1)
    groups["noise_epsilon"] = by_group("epsilon").astype(float).min(axis=1)
    groups["noise_sensitivity"] = by_group("sensitivity").astype(np.int64).max(axis=1)
    groups["baseline_miss"] = np.where(groups["category"] == RESIDENTIAL,
                                       residential_miss_per_side, 0.0)
    groups["level"] = groups["level"].astype(np.int8)
    groups["weekday"] = groups["weekday"].astype(np.int8)
    return groups


def window_days_missing(ledger: Ledger, cfg: MobilityConfig) -> list[date]:
    """Window days whose normal noise spends are not all in the ledger yet."""
    needed = {(lvl, b.name) for lvl in cfg.levels for b in cfg.metric_budgets}
    missing = []
    for day in cfg.baseline_dates:
        have = {(s.slot.level, s.slot.metric) for s in ledger.spends(REPORT, day)
                if s.kind == "noise" and s.slot.region_scope == ALL_REGIONS}
        if not needed <= have:
            missing.append(day)
    return missing


BASELINE_NAME = "baseline"  # its name in the ledger's derived_state


def build_baseline_once(root: DataRoot, cfg: MobilityConfig, *, ledger_url: str) -> StepResult:
    """Freeze the baseline once every window day is noised; its sha256 is recorded in the
    ledger before it becomes visible, and every read verifies it."""
    target = root.baseline_file(REPORT)
    ledger = open_ledger(root, ledger_url)
    try:
        if verify_recorded(ledger, REPORT, BASELINE_NAME, target):
            return StepResult(f"baseline already frozen at {target}", (str(target),))
        missing = window_days_missing(ledger, cfg)
        if missing:
            return StepResult(
                f"baseline not built yet: {len(missing)} of {len(cfg.baseline_dates)} window "
                f"days are not noised (first: {missing[0]})")
        # Runs of a backfill reach this together: one computes, the others wait and find
        # its file (before the lock, each computed the same baseline only to lose the race).
        with exclusive_lock(target.with_name(f".{target.name}.freeze.lock")):
            if verify_recorded(ledger, REPORT, BASELINE_NAME, target):
                won = False
            else:
                won = store_recorded(ledger, REPORT, BASELINE_NAME,
                                     pa.Table.from_pandas(_window_baseline(root, cfg, ledger),
                                                          preserve_index=False),
                                     target, frozen=True)
    finally:
        ledger.dispose()
    state = "froze" if won else "found (another run froze it first)"
    # the one asset event of the baseline: only the run that froze it announces it
    event = ({"sha256": sha256_file(target), "window_start": cfg.baseline_start.isoformat(),
              "window_end": cfg.baseline_end.isoformat()} if won else None)
    return StepResult(f"{state} the baseline at {target}", (str(target),), event=event)


def _window_baseline(root: DataRoot, cfg: MobilityConfig, ledger: Ledger) -> pd.DataFrame:
    """The baseline of the noised window days (every one of them is noised)."""
    alpha = strictly_below(cfg.max_error_probability)
    frames = []
    for day in cfg.baseline_dates:
        cells = load_noisy_cells(root, REPORT, day, ledger.spends(REPORT, day))
        est = metric_estimates(cells, grid_per_hour=cfg.residential_grid_per_hour,
                               residential_alpha=residential_window_alpha(alpha))
        frames.append(long_estimates(est, day))
    return compute_baseline(pd.concat(frames, ignore_index=True),
                            residential_miss_per_side=residential_miss(alpha))


def read_baseline(root: DataRoot, ledger: Ledger) -> pd.DataFrame:
    """The frozen baseline, verified against the sha256 the ledger recorded."""
    target = root.baseline_file(REPORT)
    table = read_recorded(ledger, REPORT, BASELINE_NAME, target)
    if table is None:
        raise BaselineMissing(f"the mobility baseline {target} does not exist yet: every day "
                              "of the baseline window must be noised first")
    baseline = table.to_pandas()
    if "noise_cells" not in baseline.columns:
        raise BaselineIncompatible(
            f"the mobility baseline {target} was frozen by a version before the exact "
            "reliability rule and lacks its noise key (noise_cells, noise_epsilon, "
            "noise_sensitivity, baseline_miss); rebuild this data root's releases from "
            "scratch with this version (the baseline is never recomputed in place)")
    return baseline
