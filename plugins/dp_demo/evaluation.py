"""Evaluation on synthetic data: compare a published release with the generator's truth.

This is the only code that reads ``truth/``; the pipeline never does. It joins the
published mobility CSV to the true percent changes (un-noised, unbounded metrics against
the true baseline) and reports the share of published values within +/-10 points of the
truth and the share of cells published per category and level.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from dp_ops.layout import DataRoot
from dp_ops.regions import read_regions
from dp_ops.reports.mobility.estimates import CATEGORIES

TRUTH_FILE = "mobility_truth.parquet"


@dataclass(frozen=True)
class MobilityEvaluation:
    published_values: int
    within_10_points: float
    within_by_category: dict[str, float]
    published_share: pd.DataFrame  # rows: level, columns: category, of all region-days

    def describe(self) -> str:
        lines = [
            f"published values: {self.published_values}",
            f"share within +/-10 points of the true percent change: "
            f"{100 * self.within_10_points:.2f}%",
            "  by category: " + ", ".join(f"{c} {100 * v:.2f}%"
                                          for c, v in self.within_by_category.items()),
            "share of cells published (of all region-days in the release period):",
            (100 * self.published_share).round(1).to_string(),
        ]
        return "\n".join(lines)


def evaluate_mobility(root: DataRoot, release_dir: Path | None = None) -> MobilityEvaluation:
    release_dir = release_dir or root.latest_release("mobility")
    published = pd.read_csv(release_dir / "Global_Mobility_Report.csv", dtype={"date": str},
                            keep_default_na=False, na_values={c: [""] for c in (
                                f"{cat}_percent_change_from_baseline" for cat in CATEGORIES)})
    regions = read_regions(root.regions_csv)[["region_id", "level", "place_id"]]
    published = published.merge(regions, on="place_id", how="left")
    truth = pq.read_table(root.truth_dir / TRUTH_FILE).to_pandas()
    truth["date"] = pd.to_datetime(truth["date"]).dt.strftime("%Y-%m-%d")
    joined = published.merge(truth, on=["region_id", "level", "date"], how="left",
                             validate="one_to_one")
    total, close = 0, 0
    by_cat: dict[str, float] = {}
    for cat in CATEGORIES:
        col = joined[f"{cat}_percent_change_from_baseline"]
        ok = col.notna()
        err = (col[ok] - joined.loc[ok, f"{cat}_percent_change"]).abs()
        total += int(ok.sum())
        close += int((err <= 10).sum())
        by_cat[cat] = float((err <= 10).mean()) if ok.any() else float("nan")
    dates = sorted(published["date"].unique())
    domain = truth[truth["date"].isin(dates)][["region_id", "level", "date"]]
    cells = domain.merge(joined[["region_id", "level", "date"] + [
        f"{c}_percent_change_from_baseline" for c in CATEGORIES]], how="left",
        on=["region_id", "level", "date"])
    share = pd.DataFrame({c: cells.groupby("level")[f"{c}_percent_change_from_baseline"]
                          .apply(lambda s: s.notna().mean()) for c in CATEGORIES})
    return MobilityEvaluation(total, close / total if total else float("nan"), by_cat, share)


# -- symptoms --------------------------------------------------------------------------

SYMPTOMS_TRUTH_FILE = "symptoms_truth.parquet"


@dataclass(frozen=True)
class SymptomsEvaluation:
    series: dict[str, int]           # resolution -> number of (region, symptom) series
    published: dict[str, int]        # resolution -> published values
    published_share: dict[str, float]  # resolution -> of all values of the domain
    within_25: dict[str, float]      # resolution -> share within +/-25% of c x true ratio
    within_25_by_level: pd.DataFrame
    # the same against the true ratio after contribution bounding (what the rule is about)
    within_25_bounded: dict[str, float]
    median_relative_error: dict[str, float]  # value / (c x true ratio) - 1

    def describe(self) -> str:
        lines = [f"series decided daily: {self.series.get('daily', 0)}, weekly: "
                 f"{self.series.get('weekly', 0)}"]
        for res in ("daily", "weekly"):
            lines.append(
                f"{res}: {self.published.get(res, 0)} values published "
                f"({100 * self.published_share.get(res, 0.0):.2f}% of the {res} cells of "
                f"eligible regions); {100 * self.within_25.get(res, float('nan')):.2f}% "
                "within +/-25% of c x the true ratio "
                f"({100 * self.within_25_bounded.get(res, float('nan')):.2f}% of c x the true "
                "ratio after contribution bounding; median relative error "
                f"{100 * self.median_relative_error.get(res, float('nan')):+.1f}%)")
        lines.append("within +/-25% by level (rows) and resolution (columns), %:")
        lines.append((100 * self.within_25_by_level).round(2).to_string())
        return "\n".join(lines)


def _bounded_truth(root: DataRoot, dates: list[str]) -> pd.DataFrame:
    """The true counts *after* contribution bounding (the pipeline's private per-day
    aggregates), in the truth file's long format: what the reliability rule is about."""
    frames = []
    for day in dates:
        cells = pq.read_table(root.bounded_file("symptoms", date.fromisoformat(day))).to_pandas()
        symptom = cells["metric"].where(cells["metric"].str.startswith("symptom:"))
        frames.append(pd.DataFrame({"date": day, "region_id": cells["region_id"],
                                    "symptom": symptom.str.slice(len("symptom:")),
                                    "users": cells["value"]}))
    return pd.concat(frames, ignore_index=True)


def _true_ratios(root: DataRoot, truth: pd.DataFrame | None = None) -> pd.DataFrame:
    """True daily and weekly (Monday..Sunday sums) ratio per (region, symptom, date)."""
    if truth is None:
        truth = pq.read_table(root.truth_dir / SYMPTOMS_TRUTH_FILE).to_pandas()
    truth = truth.copy()
    truth["date"] = pd.to_datetime(truth["date"])
    volume = truth[truth["symptom"].isna()][["date", "region_id", "users"]].rename(
        columns={"users": "b_true"})
    searches = truth[truth["symptom"].notna()][["date", "region_id", "symptom", "users"]].rename(
        columns={"users": "a_true"})
    frames = []
    for resolution in ("daily", "weekly"):
        v, s = volume.copy(), searches.copy()
        if resolution == "weekly":
            for frame in (v, s):
                frame["date"] = frame["date"] - pd.to_timedelta(frame["date"].dt.dayofweek,
                                                                unit="D")
            v = v.groupby(["date", "region_id"], as_index=False)["b_true"].sum()
            s = s.groupby(["date", "region_id", "symptom"], as_index=False)["a_true"].sum()
        frames.append(s.merge(v, on=["date", "region_id"], how="left").assign(
            resolution=resolution))
    out = pd.concat(frames, ignore_index=True)
    out["true_ratio"] = out["a_true"] / out["b_true"]
    out["date"] = out["date"].dt.strftime("%Y-%m-%d")
    return out[["resolution", "date", "region_id", "symptom", "true_ratio"]]


def evaluate_symptoms(root: DataRoot, release_dir: Path | None = None) -> SymptomsEvaluation:
    """Compare the published symptoms values with c x the true ratio (evaluation only).

    A published value v of scaling factor c is "within 25%" when |v - c r| <= 0.25 c r,
    r the true ratio of users searching the symptom to users searching anything (a
    symptom cell absent from the truth has r = 0, which no published value is near).
    The same share is given against the true ratio after contribution bounding (read
    from the pipeline's private per-day aggregates: evaluation only), which separates
    the bias of bounding (a user counts in at most k symptoms a day) from the noise.
    """
    release_dir = release_dir or root.latest_release("symptoms")
    resolutions = pq.read_table(release_dir / "series_resolution.parquet").to_pandas()
    scaling = pq.read_table(release_dir / "scaling_factors.parquet").to_pandas()
    manifest = json.loads((release_dir / "manifest.json").read_text())
    regions = read_regions(root.regions_csv)[["region_id", "level", "open_covid_region_code"]]
    published = []
    for res in ("daily", "weekly"):
        for path in sorted(release_dir.glob(f"*_{res}_symptoms_dataset.parquet")):
            wide = pq.read_table(path).to_pandas()
            cols = [c for c in wide.columns if c.startswith("symptom:")]
            long = wide.melt(id_vars=["open_covid_region_code", "date"], value_vars=cols,
                             var_name="symptom", value_name="value").dropna(subset=["value"])
            long["symptom"] = long["symptom"].str.slice(len("symptom:"))
            published.append(long.assign(resolution=res))
    values = pd.concat(published, ignore_index=True).merge(regions, on="open_covid_region_code")
    values = values.merge(scaling[["region_id", "resolution", "c"]],
                          on=["region_id", "resolution"], how="left")
    keys = ["resolution", "date", "region_id", "symptom"]
    values = values.merge(_true_ratios(root), on=keys, how="left")
    days = json.loads((release_dir / "manifest.json").read_text())
    all_days = pd.date_range(days["first_date"], days["last_date"]).strftime("%Y-%m-%d")
    bounded = _true_ratios(root, _bounded_truth(root, list(all_days))).rename(
        columns={"true_ratio": "bounded_ratio"})
    values = values.merge(bounded, on=keys, how="left")
    for col, flag in (("true_ratio", "within"), ("bounded_ratio", "within_bounded")):
        expected = values["c"] * values[col].fillna(0.0)
        values[flag] = (values["value"] - expected).abs() <= 0.25 * expected
    suppression = manifest["suppression"]["values"]
    return SymptomsEvaluation(
        series={str(k): int(v) for k, v in resolutions["resolution"].value_counts().items()},
        published={res: int((values["resolution"] == res).sum()) for res in ("daily", "weekly")},
        published_share={res: float(suppression[res]["published_share"])
                         for res in suppression},
        within_25={str(res): float(part["within"].mean())
                   for res, part in values.groupby("resolution")},
        within_25_bounded={str(res): float(part["within_bounded"].mean())
                           for res, part in values.groupby("resolution")},
        median_relative_error={str(res): float(
            (part["value"] / (part["c"] * part["true_ratio"]) - 1).median())
            for res, part in values.groupby("resolution")},
        within_25_by_level=values.pivot_table(index="level", columns="resolution",
                                              values="within", aggfunc="mean"),
    )
