"""The frozen baseline: per region, category and weekday, the median of the 5 noisy values
of that weekday in the window 2020-01-03..2020-02-06 (docs/design.md, Mobility report).

Computed once, from noisy values only (post-processing), when every day of the window is
noised, and stored with a first-writer-wins link; never recomputed, since recomputing it
from re-noised days would be a second release of the same data. The interval stored with
it is derived in :mod:`dp_ops.reports.mobility.estimates`.
"""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.engine.files import store_first_wins
from dp_ops.errors import BaselineMissing
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import ALL_REGIONS, Ledger
from dp_ops.reports.mobility.config import REPORT, MobilityConfig
from dp_ops.reports.mobility.estimates import CATEGORIES, metric_estimates
from dp_ops.reports.mobility.noising import load_noisy_cells
from dp_ops.steps.result import StepResult

WINDOW_DAYS_PER_WEEKDAY = 5


def long_estimates(estimates: pd.DataFrame, day: date) -> pd.DataFrame:
    """Wide per-region estimates of one day -> long rows (level, region_id, category,
    date, weekday, value, lo, hi)."""
    parts = []
    for cat in CATEGORIES:
        parts.append(pd.DataFrame({
            "level": estimates["level"].to_numpy(),
            "region_id": estimates["region_id"].to_numpy(),
            "category": cat,
            "value": estimates[cat].to_numpy(dtype=float),
            "lo": estimates[f"{cat}_lo"].to_numpy(dtype=float),
            "hi": estimates[f"{cat}_hi"].to_numpy(dtype=float),
        }))
    out = pd.concat(parts, ignore_index=True)
    out["date"] = pd.Timestamp(day)
    out["weekday"] = day.weekday()
    return out


def compute_baseline(window: pd.DataFrame) -> pd.DataFrame:
    """Median of the 5 same-weekday values (and of their interval ends) per group.

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
    for col, name in (("value", "baseline"), ("lo", "baseline_lo"), ("hi", "baseline_hi")):
        groups[name] = np.median(
            ordered[col].to_numpy(dtype=float).reshape(-1, WINDOW_DAYS_PER_WEEKDAY), axis=1)
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


def build_baseline_once(root: DataRoot, cfg: MobilityConfig, *, ledger_url: str) -> StepResult:
    target = root.baseline_file(REPORT)
    if target.exists():
        return StepResult(f"baseline already frozen at {target}", (str(target),))
    ledger = Ledger(ledger_url)
    try:
        missing = window_days_missing(ledger, cfg)
        if missing:
            return StepResult(
                f"baseline not built yet: {len(missing)} of {len(cfg.baseline_dates)} window "
                f"days are not noised (first: {missing[0]})")
        alpha = (1 - cfg.interval_confidence) / WINDOW_DAYS_PER_WEEKDAY
        frames = []
        for day in cfg.baseline_dates:
            cells = load_noisy_cells(root, day, ledger.spends(REPORT, day))
            est = metric_estimates(cells, alpha=alpha, grid_per_hour=cfg.residential_grid_per_hour)
            frames.append(long_estimates(est, day))
    finally:
        ledger.dispose()
    baseline = compute_baseline(pd.concat(frames, ignore_index=True))
    won = store_first_wins(pa.Table.from_pandas(baseline, preserve_index=False), target)
    state = "froze" if won else "found (another run froze it first)"
    return StepResult(f"{state} the baseline at {target}", (str(target),))


def read_baseline(root: DataRoot) -> pd.DataFrame:
    target = root.baseline_file(REPORT)
    if not target.is_file():
        raise BaselineMissing(f"the mobility baseline {target} does not exist yet: every day "
                              "of the baseline window must be noised first")
    return pq.read_table(target).to_pandas()
