"""Evaluation on synthetic data: compare a published release with the generator's truth.

This is the only code that reads ``truth/``; the pipeline never does. It joins the
published mobility CSV to the true percent changes (un-noised, unbounded metrics against
the true baseline) and reports the share of published values within +/-10 points of the
truth and the share of cells published per category and level.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from dp_ops.geography import read_regions
from dp_ops.mobility.estimates import CATEGORIES
from dp_ops.paths import DataRoot

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
