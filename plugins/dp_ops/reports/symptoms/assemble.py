"""Build a candidate symptoms release from the per-day rows (post-processing only).

Steps, each from noisy values and public parameters only (docs/design.md, Symptoms dataset):

1. Keep the regions of the configured levels with ``area_km2 >= min_area_km2``; the others
   are never published.
2. Decide each (region, symptom) series daily or weekly: daily-unreliable when more than
   half of its daily values fail the reliability rule, then a rolling majority over the
   regions of the same level ordered by mean noisy volume B
   (:mod:`dp_ops.reports.symptoms.granularity`). For an
   on-call rerun of one region, every other region keeps the decision of the current
   release, so the rerun leaves the rest of the release untouched.
3. Weekly A and B: Monday..Sunday sums of the daily noisy A and B over complete weeks,
   labelled by the Monday, with the reliability rule applied to the sums.
4. Published values: a daily value of a daily series, or a weekly value, that passes the
   rule. Value = c x max(A / B, 0), two decimals, where c is the region's scaling factor
   for that resolution: stored at its first release and reused (so later values may
   exceed 100); a (region, resolution) published for the first time gets
   c = scale_to / (largest published ratio of the region in this release).
5. Wide tables in Google's schema: a region appears in the daily (weekly) file when it has
   at least one published daily (weekly) value, with a row for every date (week) of the
   release; unpublished values are empty.
6. Each published value's 95% interval: ``[c x low, c x high]`` with ``[low, high]`` the
   interval of the true ratio (:func:`dp_ops.reports.symptoms.reliability.ratio_interval`),
   rounded outwards to two decimals; one row per published value (the interval tables).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np
import pandas as pd

from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.reports.symptoms.granularity import decide_resolution
from dp_ops.reports.symptoms.matrix import DailyMatrix, complete_weeks, from_rows
from dp_ops.reports.symptoms.period import PeriodSummary, summarize
from dp_ops.reports.symptoms.selection import select_published

__all__ = ["INTERVAL_COLUMNS", "KEY_COLUMNS", "RESOLUTIONS", "SCALING_COLUMNS", "Candidate",
           "build_candidate", "complete_weeks", "decide", "eligible_regions", "header",
           "scaling_factors",
           "symptom_columns"]

KEY_COLUMNS: tuple[str, ...] = (
    "open_covid_region_code", "country_region_code", "country_region", "sub_region_1",
    "sub_region_1_code", "sub_region_2", "sub_region_2_code", "date",
)
RESOLUTIONS = ("daily", "weekly")
# The interval tables: the wide files' keys, the symptom, the published value, its interval
INTERVAL_COLUMNS: tuple[str, ...] = (*KEY_COLUMNS, "symptom", "value", "low", "high")
SCALING_COLUMNS = ("region_id", "resolution", "c", "first_release_last_date")


def symptom_columns(symptoms: list[str]) -> list[str]:
    return [f"symptom:{s}" for s in symptoms]


def header(symptoms: list[str]) -> list[str]:
    """Google's header: 8 key columns, then one column per symptom in list order."""
    return [*KEY_COLUMNS, *symptom_columns(symptoms)]


@dataclass(frozen=True)
class Candidate:
    """A candidate release: the two wide tables; ``values``, every published value (the
    passing weekly values and the passing daily values of the series decided daily) with
    what it was derived from (for the gate and the manifest); ``counts``, values and
    published values per
    resolution over the whole domain; the series decisions; the scaling factors it used
    (``new`` marks factors fixed by this release)."""

    first_date: date
    last_date: date
    daily: pd.DataFrame
    weekly: pd.DataFrame
    values: pd.DataFrame
    counts: dict[str, dict[str, int]]
    resolutions: pd.DataFrame
    scaling: pd.DataFrame
    daily_intervals: pd.DataFrame
    weekly_intervals: pd.DataFrame


def eligible_regions(regions: pd.DataFrame, cfg: SymptomsConfig) -> pd.DataFrame:
    keep = regions["level"].isin(cfg.levels) & (regions["area_km2"] >= cfg.min_area_km2)
    return regions.loc[keep].reset_index(drop=True)


def decide(m: PeriodSummary, cfg: SymptomsConfig, frozen: pd.DataFrame | None = None,
           recompute: set[str] | None = None) -> pd.DataFrame:
    """(region_id, symptom, level, resolution, failed_share, and the vote's voters and
    unreliable_votes) for every series (cell) of ``m``.

    With ``frozen`` (the current release's decisions) and ``recompute`` (region ids), only
    the regions in ``recompute`` (and any region the frozen table lacks) are decided
    afresh; the others keep their frozen decision.
    """
    n_days = len(m.days)
    series = m.cells[["region_id", "symptom", "level"]].copy()
    series["failed_share"] = m.failed / n_days
    series["daily_unreliable"] = series["failed_share"] > cfg.daily_unreliable_share
    volume = pd.Series(m.b_sum / n_days, index=m.cells["region_id"].to_numpy())
    volume = volume.groupby(level=0).first()  # B is the same for every symptom of a region
    decided = decide_resolution(
        series[["region_id", "symptom", "level", "daily_unreliable"]], volume,
        cfg.granularity_neighbours)
    decided["failed_share"] = series["failed_share"].to_numpy()
    if frozen is None or recompute is None:
        return decided
    merged = decided.merge(frozen[["region_id", "symptom", "resolution"]].rename(
        columns={"resolution": "frozen"}), on=["region_id", "symptom"], how="left")
    keep = merged["frozen"].notna() & ~merged["region_id"].isin(recompute)
    merged.loc[keep, "resolution"] = merged.loc[keep, "frozen"]
    return merged.drop(columns="frozen")


def scaling_factors(values: pd.DataFrame, stored: pd.DataFrame, cfg: SymptomsConfig,
                    last_date: date) -> pd.DataFrame:
    """Stored factors, plus new ones for (region, resolution) pairs published here for
    the first time: ``scale_to`` over the largest published ratio of the pair."""
    published = values[values["published"]]
    peaks = published.groupby(["region_id", "resolution"])["ratio"].max().reset_index()
    peaks = peaks[peaks["ratio"] > 0]
    known = set(zip(stored["region_id"], stored["resolution"], strict=True))
    unseen = np.array([(r, s) not in known for r, s in zip(
        peaks["region_id"], peaks["resolution"], strict=True)], dtype=bool)
    new = peaks.loc[unseen]
    fresh = pd.DataFrame({
        "region_id": new["region_id"].astype(str),
        "resolution": new["resolution"].astype(str),
        "c": cfg.scale_to / new["ratio"].to_numpy(np.float64),
        "first_release_last_date": last_date.isoformat(),
    })
    out = pd.concat([stored.assign(new=False), fresh.assign(new=True)], ignore_index=True)
    return out[[*SCALING_COLUMNS, "new"]]


def _wide(values: pd.DataFrame, regions: pd.DataFrame, symptoms: list[str],
          dates: list[str]) -> pd.DataFrame:
    """One row per (region with a published value, date), one column per symptom,
    sorted by region code then date. Values dated outside ``dates`` or of a symptom not
    in ``symptoms`` are left out; two values for one cell raise ValueError.

    Built by placing each value in one (rows x symptoms) float block (NaN elsewhere), so
    the cost follows the values and the block's size, not a pandas pivot and reindex of
    the whole year."""
    columns = symptom_columns(symptoms)
    shown = values.loc[values["published"], "region_id"].unique()
    meta = regions.loc[regions["region_id"].isin(shown),
                       ["region_id", *[c for c in KEY_COLUMNS if c != "date"]]]
    if meta.empty:
        return pd.DataFrame({c: pd.Series(dtype="str") for c in KEY_COLUMNS}
                            | {c: pd.Series(dtype="float64") for c in columns})
    if meta["region_id"].duplicated().any():
        raise ValueError("the region table lists a region id twice")
    meta = meta.sort_values("open_covid_region_code", kind="stable").reset_index(drop=True)
    n_dates, n_symptoms = len(dates), len(symptoms)
    region_at = pd.Index(meta["region_id"]).get_indexer(values["region_id"])
    date_at = pd.Index(dates).get_indexer(values["date"])
    symptom_at = pd.Index(symptoms).get_indexer(values["symptom"])
    keep = (region_at >= 0) & (date_at >= 0) & (symptom_at >= 0)
    n_rows = len(meta) * n_dates
    # column-major, as a DataFrame stores its float block (else pandas copies it over)
    flat = symptom_at[keep] * n_rows + region_at[keep] * n_dates + date_at[keep]
    if len(np.unique(flat)) != len(flat):
        raise ValueError("two published values for one (region, date, symptom)")
    block = np.full((n_rows, n_symptoms), np.nan, order="F")
    cells = block.ravel(order="K")  # a view of the column-major block
    cells[flat] = values["value"].to_numpy(np.float64)[keep]
    repeat = np.repeat(np.arange(len(meta)), n_dates)
    date_column = pd.Series(np.tile(np.array(dates, dtype=object), len(meta)), dtype="str")
    keys = pd.DataFrame({c: date_column if c == "date"
                         else meta[c].take(repeat).reset_index(drop=True)
                         for c in KEY_COLUMNS})
    return pd.concat([keys, pd.DataFrame(block, columns=columns, copy=False)], axis=1)


def _intervals(values: pd.DataFrame, regions: pd.DataFrame, symptoms: list[str]
               ) -> pd.DataFrame:
    """One row per published value of ``values`` (one resolution): the wide file's keys,
    the symptom, the value and its interval; sorted as the wide file, then by symptom in
    list order."""
    shown = values.loc[values["published"]]
    meta = regions[["region_id", *[c for c in KEY_COLUMNS if c != "date"]]]
    rows = shown[["region_id", "date", "symptom", "value", "low_value", "high_value"]].merge(
        meta, on="region_id", how="inner", validate="many_to_one")
    rows["order"] = pd.Index(symptoms).get_indexer(rows["symptom"])
    rows = rows[rows["order"] >= 0].sort_values(
        ["open_covid_region_code", "date", "order"], kind="stable")
    out = rows.rename(columns={"low_value": "low", "high_value": "high"})
    out = out[list(INTERVAL_COLUMNS)].reset_index(drop=True)
    out["symptom"] = out["symptom"].astype(str)
    return out


def _values(m: PeriodSummary, passing: pd.DataFrame, resolution: str) -> pd.DataFrame:
    """The passing values with their series' labels: all of them publishable."""
    cell = passing["cell"].to_numpy(np.int64)
    out = pd.DataFrame({k: m.cells[k].to_numpy()[cell] for k in ("level", "region_id",
                                                                  "symptom")})
    for c in passing.columns.drop("cell"):
        out[c] = passing[c].to_numpy()
    out["reliable"] = True
    out["resolution"] = resolution
    out["published"] = True
    return out


def build_candidate(daily: pd.DataFrame | DailyMatrix | PeriodSummary, regions: pd.DataFrame,
                    symptoms: list[str], cfg: SymptomsConfig, stored_scaling: pd.DataFrame,
                    frozen: pd.DataFrame | None = None,
                    recompute: set[str] | None = None) -> Candidate:
    """The candidate release from an unbroken run of days: their summary
    (:func:`dp_ops.reports.symptoms.period.load_period`), or, in tests, the per-day rows
    as a long table or a (days x cells) matrix."""
    if isinstance(daily, pd.DataFrame):
        daily = from_rows(daily)
    m = summarize(daily, cfg) if isinstance(daily, DailyMatrix) else daily
    first, last = m.days[0], m.days[-1]
    if len(m.days) != (last - first).days + 1:
        raise ValueError(f"the daily rows from {first} to {last} have gaps: every day of a "
                         "release must be reported")
    eligible = eligible_regions(regions, cfg)
    m = m.select(m.cells["region_id"].isin(set(eligible["region_id"])).to_numpy())

    resolutions = decide(m, cfg, frozen, recompute)
    is_daily = (resolutions["resolution"] == "daily").to_numpy()
    daily_passing = m.daily[is_daily[m.daily["cell"].to_numpy(np.int64)]]
    values = pd.concat([_values(m, daily_passing, "daily"),
                        _values(m, m.weekly, "weekly")], ignore_index=True)
    # the promise among the published values (dp_ops.reports.symptoms.selection)
    values = values[select_published(values, cfg.reliability_test_level)].drop(
        columns="off").reset_index(drop=True)
    scaling = scaling_factors(values, stored_scaling, cfg, last)
    values = values.merge(scaling[["region_id", "resolution", "c"]],
                          on=["region_id", "resolution"], how="left")
    values["value"] = np.round(values["c"] * np.maximum(values["ratio"], 0), 2)
    # outwards to the cent: the interval holds c x the true ratio whenever [low, high]
    # holds the true ratio
    values["low_value"] = np.floor(values["c"] * values["low"] * 100) / 100
    values["high_value"] = np.ceil(values["c"] * values["high"] * 100) / 100
    labels = {day: day.isoformat() for day in [*m.days, *m.mondays]}
    values["date"] = values["date"].map(labels)
    counts = {
        "daily": {"values": len(m.days) * len(m.cells),
                  "published": int((values["resolution"] == "daily").sum())},
        "weekly": {"values": len(m.mondays) * len(m.cells),
                   "published": int((values["resolution"] == "weekly").sum())},
    }
    return Candidate(
        first_date=first, last_date=last,
        daily=_wide(values[values["resolution"] == "daily"], eligible, symptoms,
                    [day.isoformat() for day in m.days]),
        weekly=_wide(values[values["resolution"] == "weekly"], eligible, symptoms,
                     [day.isoformat() for day in m.mondays]),
        values=values, counts=counts, resolutions=resolutions, scaling=scaling,
        daily_intervals=_intervals(values[values["resolution"] == "daily"], eligible,
                                   symptoms),
        weekly_intervals=_intervals(values[values["resolution"] == "weekly"], eligible,
                                    symptoms))
