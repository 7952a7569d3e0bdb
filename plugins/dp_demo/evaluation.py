r"""Evaluation on synthetic data: compare a published release with the generator's truth
and with an oracle.

This is the only code that reads ``truth/``; the pipeline never does. It also reads the
pipeline's private bounded aggregates (``work/bounded``), the true values the noise was
added to. Nothing here may ever run on real data.

Against the truth (as before): the share of published mobility changes within +/-10
points of the true percent change (un-noised, unbounded metrics against the true
baseline), the share of cells published per category and level, and the share of
published symptoms values within +/-25% of ``c`` times the true ratio.

Against an oracle (:mod:`dp_demo.oracle`) that knows the bounded true values and the
exact noise law, and publishes a value exactly when the report's promise holds for it
(docs/design.md, Evaluation). *Release coverage* is the share of eligible values the
release publishes, *oracle coverage* the share the oracle publishes, and their *ratio*
release / oracle (docs/design.md asks for >= 85% while the realised share within the
threshold stays above the promise); *of oracle* is the share of the oracle's values that
the release publishes too.

Mobility
--------
Eligible cells: (region, date, category) of the release period (the manifest's first to
last date) whose report row (``report/mobility/date=D/rows.parquet``) passed the row
rules, i.e. ``row_reason`` is ``published`` or ``all_values_unreliable`` (not
``area_under_minimum`` or ``contributors_under_minimum``). A cell is published when the
release's ``Global_Mobility_Report.csv`` has its value.

True values: the bounded aggregates ``work/bounded/mobility/date=D/aggregates.parquet``
(a cell absent from the file is 0, as in the noise step). A count category's true value
``v`` is the sum of its cells (``COUNT_CATEGORY_CELLS``); the true baseline ``b`` is the
median of its five true values of the same weekday in the baseline window
(``MobilityConfig.baseline_dates``); the true change ``c = 100 (v / b - 1)`` (undefined,
so never oracle-publishable, if ``b <= 0``). Residential: hours
``h = clamp(s / (g n) + 12, 0, 24)`` from ``residential_sum_units`` ``s`` and
``residential_users`` ``n`` (``g`` = ``residential_grid_per_hour``), the baseline the
median of the five days' hours, ``c = 100 (h / h_b - 1)``.

Noise law: each cell gets an independent discrete Laplace draw with its group's
``cell_epsilon`` and ``sensitivity`` (``MobilityConfig.budget``, groups from
``GROUP_CELLS``). The pipeline's published change is ``C = round-half-up(100 (max(V, 0) /
B - 1))`` with ``V = v + Z`` and ``B = median_j(b_j + W_j)`` (undefined when ``B <= 0``;
residential: the noisy hours, undefined when a noisy count is <= 0). The oracle publishes
a cell iff ``P(|C - c| > max_error_points (10) or C undefined) < 5%``, estimated with
``draws`` (2,000) simulated baselines per cell (``numpy.random.default_rng(seed)``), the
probability over ``V`` given each baseline being exact for count categories
(:func:`dp_demo.oracle.count_change_miss_probability`) and simulated for residential.
Pooled figures are over the five count categories (not residential), overall and per level.

Within the threshold: the share of published changes within 10 points of the true change
of the truth file (``within_10_truth``) and of the bounded true change ``c`` above
(``within_10_bounded``).

Symptoms
--------
A value is a (region, symptom, date) at a resolution. Eligible values: the series of
``series_resolution.parquet`` (every symptom of every region eligible for the release:
configured levels, area >= ``min_area_km2``); for a series decided daily, its daily values
on every day of the release period; for every series (decided daily or weekly: the weekly
file carries both), its weekly values, Monday..Sunday sums labelled by the Monday, on the
complete weeks of the period. A value is published when the release's daily (weekly)
file has it. (The manifest's ``suppression.values.daily.values`` counts every series'
daily values, so its daily share has a larger denominator than the release coverage.)

True counts: the bounded aggregates ``work/bounded/symptoms/date=D/aggregates.parquet``,
``a`` the symptom's cell (``symptom:<name>``), ``b`` the volume cell
(``users_with_any_search``); weekly, their 7-day sums. Noise law: ``A = a + Z_A``,
``B = b + Z_B``, independent discrete Laplace at the cells' epsilon and sensitivity
(``SymptomsConfig.budget``; a weekly noise is the sum of 7 daily draws). The oracle
publishes a value iff ``P((1 - t) R <= r <= (1 + t) R) >= p`` with ``R = A / B``, ``r =
a / b``, ``t = reliability_tolerance`` (25%) and ``p = reliability_probability`` (50%),
computed exactly (:func:`dp_demo.oracle.oracle_publishes_ratio`).

Within the threshold, for published values ``v`` of scaling factor ``c``:
``|v - c r| <= 0.25 c r`` (the earlier measure; ``within_25_truth`` with ``r`` from the
truth file, ``within_25_bounded`` with the bounded ``r``), and the promise's own
definition ``|c r - v| <= 0.25 v`` (``promise_truth``, ``promise_bounded``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from numpy.typing import NDArray

from dp_demo.oracle import (
    MOBILITY_MAX_MISS_PROBABILITY,
    CellNoise,
    count_change_miss_probability,
    oracle_publishes_ratio,
    residential_miss_probability,
    simulate_baseline_hours,
    simulate_baselines,
    sum_law,
    true_change,
    true_hours,
)
from dp_ops.layout import DataRoot
from dp_ops.regions import read_regions
from dp_ops.reports.mobility.config import GROUP_CELLS, MobilityConfig, load_mobility_config
from dp_ops.reports.mobility.estimates import (
    CATEGORIES,
    COUNT_CATEGORY_CELLS,
    RESIDENTIAL_COUNT,
    RESIDENTIAL_SUM,
)
from dp_ops.reports.symptoms.assemble import complete_weeks
from dp_ops.reports.symptoms.config import (
    SYMPTOM_CELL_PREFIX,
    SYMPTOM_METRIC,
    VOLUME_CELL,
    VOLUME_METRIC,
    SymptomsConfig,
    load_symptoms_config,
)

TRUTH_FILE = "mobility_truth.parquet"
ORACLE_DRAWS = 2000
ORACLE_SEED = 2020
ELIGIBLE_ROW_REASONS = ("published", "all_values_unreliable")
COUNT_CATEGORIES: tuple[str, ...] = tuple(COUNT_CATEGORY_CELLS)
RESIDENTIAL = "residential"
ALL = "all"
# Columns of a coverage table (then one column per share within the threshold).
COVERAGE_COLUMNS = ("eligible", "published", "oracle", "release_coverage", "oracle_coverage",
                    "coverage_ratio", "release_of_oracle")
MOBILITY_WITHIN = ("within_10_truth", "within_10_bounded", "interval_bounded", "interval_truth")
SYMPTOMS_WITHIN = ("within_25_truth", "within_25_bounded", "promise_truth", "promise_bounded",
                   "interval_bounded", "interval_truth")
_HEADERS = {"eligible": "eligible", "release_coverage": "release", "oracle_coverage": "oracle",
            "coverage_ratio": "ratio", "release_of_oracle": "of oracle",
            "within_10_truth": "<=10 truth", "within_10_bounded": "<=10 bounded",
            "within_25_truth": "25% truth", "within_25_bounded": "25% bounded",
            "promise_truth": "promise truth", "promise_bounded": "promise bounded",
            "interval_bounded": "95% int. bounded", "interval_truth": "95% int. truth"}


def coverage_table(values: pd.DataFrame, by: list[str],
                   within: Sequence[str] = ()) -> pd.DataFrame:
    """Per group of ``by``: eligible values, how many the release (``published``) and the
    oracle (``oracle``) publish, their shares of the eligible values, the ratio release /
    oracle, the share of the oracle's values the release publishes too, and the mean of
    each ``within`` column (1.0 / 0.0, NaN when unpublished) over the published values."""
    both = values["published"] & values["oracle"]
    grouped = values.assign(both=both).groupby(by, sort=True, observed=True)
    table = pd.DataFrame({
        "eligible": grouped.size(),
        "published": grouped["published"].sum().astype("int64"),
        "oracle": grouped["oracle"].sum().astype("int64"),
        "both": grouped["both"].sum().astype("int64"),
    })
    with np.errstate(divide="ignore", invalid="ignore"):
        table["release_coverage"] = table["published"] / table["eligible"]
        table["oracle_coverage"] = table["oracle"] / table["eligible"]
        table["coverage_ratio"] = (table["published"] / table["oracle"]).where(
            table["oracle"] > 0)
        table["release_of_oracle"] = (table["both"] / table["oracle"]).where(table["oracle"] > 0)
    for col in within:
        table[col] = grouped[col].mean()
    return table[[*COVERAGE_COLUMNS, *within]]


def _pooled(values: pd.DataFrame, by: str | None, within: Sequence[str]) -> pd.DataFrame:
    """``coverage_table`` with a first row ``all`` over every value, then one row per
    value of ``by`` (if given); the index is named ``by`` (or ``pool``)."""
    overall = coverage_table(values.assign(pool=ALL), ["pool"], within)
    if by is None:
        return overall
    per = coverage_table(values, [by], within)
    out = pd.concat([overall, per.set_axis(per.index.astype(object))])
    out.index.name = by
    return out


def format_coverage(table: pd.DataFrame) -> str:
    """Shares as percentages, the ratio as a number; NaN shown as ``-``."""
    shown = pd.DataFrame(index=table.index)
    for col in table.columns:
        if col in ("published", "oracle"):
            continue
        values = table[col]
        if col == "eligible":
            shown[_HEADERS[col]] = values.astype("int64").astype(str)
        elif col == "coverage_ratio":
            shown[_HEADERS[col]] = values.map(lambda v: "-" if pd.isna(v) else f"{v:.2f}")
        else:
            shown[_HEADERS.get(col, col)] = values.map(
                lambda v: "-" if pd.isna(v) else f"{100 * v:.1f}%")
    return str(shown.to_string())


def table_records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """A coverage table as JSON-ready rows (index columns first, NaN as None)."""
    rows = table.reset_index().astype(object).where(table.reset_index().notna(), None)
    return [{str(k): (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
            for row in rows.to_dict(orient="records")]


def _release_days(release_dir: Path) -> tuple[dict[str, Any], list[date]]:
    manifest = json.loads((release_dir / "manifest.json").read_text())
    first = date.fromisoformat(manifest["first_date"])
    last = date.fromisoformat(manifest["last_date"])
    return manifest, [first + timedelta(days=i) for i in range((last - first).days + 1)]


class TruthMismatch(ValueError):
    """The release covers days the synthetic truth does not: it was published from other
    input (an earlier, longer demo on the same data root), so no figure would be sound."""


def require_truth_covers(release_dir: Path, days: list[date], truth_file: Path,
                         truth_dates: pd.Series) -> None:
    """Refuse to compare the release in ``release_dir`` (its ``days``) with a truth
    (``truth_file``, its ``truth_dates``) that lacks some of them: the comparison would
    count them as misses and print figures about another input."""
    known = set(pd.to_datetime(truth_dates).dt.date)
    missing = [d for d in days if d not in known]
    if missing:
        raise TruthMismatch(
            f"{release_dir}: the release covers {days[0]}..{days[-1]}, but {truth_file} has "
            f"no truth for {len(missing)} of its days (first {missing[0]}): the release was "
            "published from other input, e.g. an earlier demo over a longer range on this "
            "data root. Evaluate on a fresh data root (delete it, or set DP_DATA_ROOT).")


# -- mobility ----------------------------------------------------------------------------

@dataclass(frozen=True)
class MobilityEvaluation:
    published_values: int
    within_10_points: float
    within_by_category: dict[str, float]
    published_share: pd.DataFrame  # rows: level, columns: category, of all region-days
    # index (level, category): COVERAGE_COLUMNS + MOBILITY_WITHIN over the eligible cells
    coverage: pd.DataFrame
    # the five count categories pooled: index "all", then each level
    pooled: pd.DataFrame
    draws: int

    def figures(self) -> dict[str, Any]:
        """The evaluation as JSON-ready values (for the demo's results file)."""
        return {"published_values": self.published_values,
                "within_10_points": self.within_10_points,
                "within_by_category": self.within_by_category,
                "pooled": table_records(self.pooled),
                "coverage": table_records(self.coverage), "oracle_draws": self.draws}

    def describe(self) -> str:
        lines = [
            f"published values: {self.published_values}",
            f"share within +/-10 points of the true percent change: "
            f"{100 * self.within_10_points:.2f}%",
            "  by category: " + ", ".join(f"{c} {100 * v:.2f}%"
                                          for c, v in self.within_by_category.items()),
            "share of cells published (of all region-days in the release period):",
            (100 * self.published_share).round(1).to_string(),
            "",
            "oracle: knows the bounded true values and the noise law, publishes a change iff "
            "P(|C - c| > 10 points) < 5%",
            f"  ({self.draws} simulated baselines per cell); eligible cells: rows that pass "
            "the area and contributor rules.",
            "  release / oracle = coverage (published share of eligible cells); ratio = "
            "release / oracle; of oracle = share of the",
            "  oracle's cells the release publishes; <=10 truth / bounded = published "
            "changes within 10 points of the",
            "  truth file's change / of the bounded true change.",
            format_coverage(self.coverage),
            "pooled over the five count categories (not residential):",
            format_coverage(self.pooled),
        ]
        return "\n".join(lines)


def _mobility_domain(root: DataRoot, cfg: MobilityConfig) -> pd.MultiIndex:
    regions = read_regions(root.regions_csv)
    regions = regions[regions["level"].isin(cfg.levels)]
    return pd.MultiIndex.from_arrays([regions["level"].astype("int64").to_numpy(),
                                      regions["region_id"].astype(str).to_numpy()],
                                     names=["level", "region_id"])


def _bounded_mobility(root: DataRoot, days: list[date], domain: pd.MultiIndex
                      ) -> dict[str, NDArray[np.int64]]:
    """metric -> (days, regions of ``domain``) true bounded values (absent cells are 0)."""
    metrics = sorted({m for cells in GROUP_CELLS.values() for m in cells})
    out = {m: np.zeros((len(days), len(domain)), dtype=np.int64) for m in metrics}
    for i, day in enumerate(days):
        cells = pq.read_table(root.bounded_file("mobility", day)).to_pandas()
        pos = domain.get_indexer(pd.MultiIndex.from_arrays([
            cells["level"].astype("int64").to_numpy(), cells["region_id"].astype(str).to_numpy()]))
        metric = cells["metric"].astype(str).to_numpy()
        value = cells["value"].to_numpy(dtype=np.int64)
        for m in metrics:
            keep = (metric == m) & (pos >= 0)
            out[m][i, pos[keep]] = value[keep]
    return out


def _cell_noise(cfg: MobilityConfig, cell: str) -> CellNoise:
    for group, cells in GROUP_CELLS.items():
        if cell in cells:
            budget = cfg.budget(group)
            return (float(budget.cell_epsilon), int(budget.sensitivity))
    raise KeyError(f"cell {cell!r} is in no noise group")


def mobility_oracle(root: DataRoot, cfg: MobilityConfig, cells: pd.DataFrame, *,
                    draws: int = ORACLE_DRAWS, seed: int = ORACLE_SEED) -> pd.DataFrame:
    """``cells`` (date, level, region_id, category) with the bounded true change
    ``c_bounded``, the oracle's miss probability ``miss`` and its decision ``oracle``."""
    rng = np.random.default_rng(seed)
    domain = _mobility_domain(root, cfg)
    window = list(cfg.baseline_dates)
    cell_days = sorted({date.fromisoformat(d) for d in cells["date"].unique()})
    days = sorted(set(window) | set(cell_days))
    day_index = {d: i for i, d in enumerate(days)}
    bounded = _bounded_mobility(root, days, domain)
    # window_days[w] = indices of the five window days of weekday w
    window_days = np.array([[day_index[d] for d in window if d.weekday() == w]
                            for w in range(7)], dtype=np.intp)
    g = cfg.residential_grid_per_hour
    points = cfg.max_error_points
    out = []
    for category, part in cells.groupby("category", sort=False):
        part = part.reset_index(drop=True)
        dates = [date.fromisoformat(d) for d in part["date"]]
        day = np.array([day_index[d] for d in dates], dtype=np.intp)
        weekday = np.array([d.weekday() for d in dates], dtype=np.intp)
        region = domain.get_indexer(pd.MultiIndex.from_arrays([
            part["level"].astype("int64").to_numpy(), part["region_id"].astype(str).to_numpy()]))
        if (region < 0).any():
            raise ValueError("a mobility report row names a region outside the region table")
        groups, group = np.unique(region * 7 + weekday, return_inverse=True)
        g_days = window_days[groups % 7]                  # (groups, 5) day indices
        g_region = (groups // 7)[:, None]
        if category == RESIDENTIAL:
            s, n = bounded[RESIDENTIAL_SUM], bounded[RESIDENTIAL_COUNT]
            hours = true_hours(s, n, g)
            base = np.median(hours[g_days, g_region], axis=1)
            change = true_change(hours[day, region], base[group])
            sum_cell = _cell_noise(cfg, RESIDENTIAL_SUM)
            count_cell = _cell_noise(cfg, RESIDENTIAL_COUNT)
            baselines = simulate_baseline_hours(s[g_days, g_region], n[g_days, g_region],
                                                sum_cell, count_cell, draws, g, rng)
            miss = residential_miss_probability(s[day, region], n[day, region], change,
                                                baselines, group, sum_cell, count_cell, g,
                                                points, rng)
        else:
            parts = COUNT_CATEGORY_CELLS[str(category)]
            noise = tuple(_cell_noise(cfg, c) for c in parts)
            values = np.sum([bounded[c] for c in parts], axis=0)
            base = np.median(values[g_days, g_region], axis=1)
            change = true_change(values[day, region], base[group])
            baselines = simulate_baselines(values[g_days, g_region], noise, draws, rng)
            miss = count_change_miss_probability(values[day, region], change, baselines,
                                                 group, sum_law(noise), points)
        out.append(part.assign(c_bounded=change, miss=miss,
                               oracle=miss < MOBILITY_MAX_MISS_PROBABILITY))
    return pd.concat(out, ignore_index=True)


def _eligible_mobility_cells(root: DataRoot, days: list[date]) -> pd.DataFrame:
    rows = pd.concat([pq.read_table(root.report_file("mobility", d),
                                    columns=["level", "region_id", "date", "row_reason"]
                                    ).to_pandas() for d in days], ignore_index=True)
    rows = rows[rows["row_reason"].isin(ELIGIBLE_ROW_REASONS)]
    keys = rows[["date", "level", "region_id"]].astype({"level": "int64", "region_id": str,
                                                        "date": str})
    return keys.merge(pd.DataFrame({"category": list(CATEGORIES)}), how="cross")


def _mobility_intervals(release_dir: Path, regions: pd.DataFrame) -> pd.DataFrame:
    """(date, level, region_id, category, low, high) of the published changes' intervals
    (the release's sidecar; no rows for a release without one). ``regions`` maps the
    sidecar's place_id to (region_id, level)."""
    path = release_dir / "Global_Mobility_Report_intervals.csv"
    columns = {"date": str, "level": "int64", "region_id": str, "category": str,
               "low": float, "high": float}
    if not path.exists():
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})
    ends = [f"{c}_percent_change_from_baseline_{e}" for c in CATEGORIES for e in ("low", "high")]
    side = pd.read_csv(path, dtype={"date": str, "place_id": str}, keep_default_na=False,
                       na_values={c: [""] for c in ends})
    side = side.merge(regions, on="place_id", how="left")
    frames = [pd.DataFrame({"date": side["date"], "level": side["level"],
                            "region_id": side["region_id"], "category": cat,
                            "low": side[f"{cat}_percent_change_from_baseline_low"],
                            "high": side[f"{cat}_percent_change_from_baseline_high"]})
              for cat in CATEGORIES]
    out = pd.concat(frames, ignore_index=True).dropna(subset=["low"])
    return out.astype({"level": "int64", "region_id": str, "low": float, "high": float})


def evaluate_mobility(root: DataRoot, release_dir: Path | None = None, *,
                      draws: int = ORACLE_DRAWS, seed: int = ORACLE_SEED,
                      cfg: MobilityConfig | None = None) -> MobilityEvaluation:
    cfg = cfg or load_mobility_config()
    release_dir = release_dir or root.latest_release("mobility")
    published = pd.read_csv(release_dir / "Global_Mobility_Report.csv", dtype={"date": str},
                            keep_default_na=False, na_values={c: [""] for c in (
                                f"{cat}_percent_change_from_baseline" for cat in CATEGORIES)})
    regions = read_regions(root.regions_csv)[["region_id", "level", "place_id"]]
    published = published.merge(regions, on="place_id", how="left")
    truth = pq.read_table(root.truth_dir / TRUTH_FILE).to_pandas()
    _, period = _release_days(release_dir)
    require_truth_covers(release_dir, period, root.truth_dir / TRUTH_FILE, truth["date"])
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

    # the oracle, on the eligible cells of the release period
    eligible = mobility_oracle(root, cfg, _eligible_mobility_cells(root, period),
                               draws=draws, seed=seed)
    keys = ["date", "level", "region_id"]
    long = joined.astype({"level": "int64", "region_id": str}).melt(
        id_vars=keys, value_vars=[f"{c}_percent_change_from_baseline" for c in CATEGORIES],
        var_name="category", value_name="value")
    long["category"] = long["category"].str.removesuffix("_percent_change_from_baseline")
    long = long.dropna(subset=["value"])
    truth_long = truth.astype({"level": "int64", "region_id": str}).melt(
        id_vars=keys, value_vars=[f"{c}_percent_change" for c in CATEGORIES],
        var_name="category", value_name="c_truth")
    truth_long["category"] = truth_long["category"].str.removesuffix("_percent_change")
    eligible = eligible.merge(long, on=[*keys, "category"], how="left", validate="one_to_one")
    eligible = eligible.merge(truth_long, on=[*keys, "category"], how="left",
                              validate="one_to_one")
    eligible = eligible.merge(_mobility_intervals(release_dir, regions),
                              on=[*keys, "category"], how="left", validate="one_to_one")
    eligible["published"] = eligible["value"].notna()
    for col, reference in (("within_10_truth", "c_truth"), ("within_10_bounded", "c_bounded")):
        close_enough = ((eligible["value"] - eligible[reference]).abs()
                        <= cfg.max_error_points).astype(float)
        eligible[col] = close_enough.where(eligible["published"])
    for col, reference in (("interval_bounded", "c_bounded"), ("interval_truth", "c_truth")):
        covered = ((eligible["low"] <= eligible[reference])
                   & (eligible[reference] <= eligible["high"])).astype(float)
        eligible[col] = covered.where(eligible["published"] & eligible["low"].notna())
    eligible["category"] = pd.Categorical(eligible["category"], categories=list(CATEGORIES))
    coverage = coverage_table(eligible, ["level", "category"], MOBILITY_WITHIN)
    counts = eligible[eligible["category"].isin(COUNT_CATEGORIES)]
    pooled = _pooled(counts, "level", MOBILITY_WITHIN)
    return MobilityEvaluation(total, close / total if total else float("nan"), by_cat, share,
                              coverage, pooled, draws)


# -- symptoms --------------------------------------------------------------------------

SYMPTOMS_TRUTH_FILE = "symptoms_truth.parquet"
RESOLUTIONS = ("daily", "weekly")


@dataclass(frozen=True)
class SymptomsEvaluation:
    series: dict[str, int]           # resolution -> number of (region, symptom) series
    published: dict[str, int]        # resolution -> published values
    published_share: dict[str, float]  # resolution -> of all values of the domain (manifest)
    within_25: dict[str, float]      # resolution -> share within +/-25% of c x true ratio
    within_25_by_level: pd.DataFrame
    # the same against the true ratio after contribution bounding (what the rule is about)
    within_25_bounded: dict[str, float]
    median_relative_error: dict[str, float]  # value / (c x true ratio) - 1
    # the same against the ratio after contribution bounding: what is left without bounding
    median_relative_error_bounded: dict[str, float]
    # index (level, resolution): COVERAGE_COLUMNS + SYMPTOMS_WITHIN over the eligible values
    coverage: pd.DataFrame
    # per resolution over every level: index resolution
    pooled: pd.DataFrame

    def figures(self) -> dict[str, Any]:
        """The evaluation as JSON-ready values (for the demo's results file)."""
        return {"series": self.series, "published": self.published,
                "published_share": self.published_share, "within_25": self.within_25,
                "within_25_bounded": self.within_25_bounded,
                "median_relative_error": self.median_relative_error,
                "median_relative_error_bounded": self.median_relative_error_bounded,
                "within_25_by_level": table_records(self.within_25_by_level),
                "pooled": table_records(self.pooled),
                "coverage": table_records(self.coverage)}

    def describe(self) -> str:
        lines = [f"series decided daily: {self.series.get('daily', 0)}, weekly: "
                 f"{self.series.get('weekly', 0)}"]
        for res in RESOLUTIONS:
            lines.append(
                f"{res}: {self.published.get(res, 0)} values published "
                f"({100 * self.published_share.get(res, 0.0):.2f}% of the {res} cells of "
                f"eligible regions); {100 * self.within_25.get(res, float('nan')):.2f}% "
                "within +/-25% of c x the true ratio "
                f"({100 * self.within_25_bounded.get(res, float('nan')):.2f}% of c x the true "
                "ratio after contribution bounding; median relative error "
                f"{100 * self.median_relative_error.get(res, float('nan')):+.1f}%, "
                f"{100 * self.median_relative_error_bounded.get(res, float('nan')):+.1f}% "
                "against the ratio after contribution bounding)")
        lines.append("within +/-25% by level (rows) and resolution (columns), %:")
        lines.append((100 * self.within_25_by_level).round(2).to_string())
        lines += [
            "",
            "oracle: knows the bounded true counts and the noise law, publishes a value iff "
            "P(true ratio within +/-25% of A/B) >= 50%.",
            "  eligible values: daily values of the series decided daily, weekly values of "
            "every series (complete weeks).",
            "  release / oracle = coverage (published share of eligible values); ratio = "
            "release / oracle; of oracle = share of",
            "  the oracle's values the release publishes; 25% = |v - c r| <= 0.25 c r; "
            "promise = |c r - v| <= 0.25 v;",
            "  truth / bounded: r from the truth file / from the bounded counts.",
            format_coverage(self.coverage),
            "per resolution, every level:",
            format_coverage(self.pooled),
        ]
        return "\n".join(lines)


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
    for resolution in RESOLUTIONS:
        v, s = volume.copy(), searches.copy()
        if resolution == "weekly":
            for frame in (v, s):
                frame["date"] = frame["date"] - pd.to_timedelta(frame["date"].dt.day_of_week,
                                                                unit="D")
            v = v.groupby(["date", "region_id"], as_index=False)["b_true"].sum()
            s = s.groupby(["date", "region_id", "symptom"], as_index=False)["a_true"].sum()
        frames.append(s.merge(v, on=["date", "region_id"], how="left").assign(
            resolution=resolution))
    out = pd.concat(frames, ignore_index=True)
    out["true_ratio"] = out["a_true"] / out["b_true"]
    out["date"] = out["date"].dt.strftime("%Y-%m-%d")
    return out[["resolution", "date", "region_id", "symptom", "true_ratio"]]


def _bounded_symptoms(root: DataRoot, days: list[date], series: pd.MultiIndex,
                      regions: pd.Index) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``(a, b)``: the bounded true symptom counts (days x series) and volumes (days x
    regions); cells absent from a day's file are 0."""
    a = np.zeros((len(days), len(series)), dtype=np.int64)
    b = np.zeros((len(days), len(regions)), dtype=np.int64)
    for i, day in enumerate(days):
        cells = pq.read_table(root.bounded_file("symptoms", day)).to_pandas()
        metric = cells["metric"].astype(str)
        region_id = cells["region_id"].astype(str).to_numpy()
        value = cells["value"].to_numpy(dtype=np.int64)
        volume = (metric == VOLUME_CELL).to_numpy()
        pos = regions.get_indexer(region_id[volume])
        b[i, pos[pos >= 0]] = value[volume][pos >= 0]
        symptom = metric.str.startswith(SYMPTOM_CELL_PREFIX).to_numpy()
        pos = series.get_indexer(pd.MultiIndex.from_arrays([
            region_id[symptom], metric[symptom].str.slice(len(SYMPTOM_CELL_PREFIX)).to_numpy()]))
        a[i, pos[pos >= 0]] = value[symptom][pos >= 0]
    return a, b


def _published_symptoms(release_dir: Path) -> pd.DataFrame:
    published = []
    for res in RESOLUTIONS:
        for path in sorted(release_dir.glob(f"*_{res}_symptoms_dataset.parquet")):
            wide = pq.read_table(path).to_pandas()
            cols = [c for c in wide.columns if c.startswith("symptom:")]
            long = wide.melt(id_vars=["open_covid_region_code", "date"], value_vars=cols,
                             var_name="symptom", value_name="value").dropna(subset=["value"])
            long["symptom"] = long["symptom"].str.slice(len("symptom:"))
            published.append(long.assign(resolution=res))
    return pd.concat(published, ignore_index=True)


def _symptoms_intervals(release_dir: Path) -> pd.DataFrame:
    """(resolution, open_covid_region_code, date, symptom, low, high) of the release's
    interval tables (no rows for a release without them)."""
    frames = [pq.read_table(path, columns=["open_covid_region_code", "date", "symptom",
                                           "low", "high"]).to_pandas().assign(resolution=res)
              for res in RESOLUTIONS
              for path in sorted(release_dir.glob(f"*_{res}_symptoms_dataset_intervals.parquet"))]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in (
            ("resolution", str), ("open_covid_region_code", str), ("date", str),
            ("symptom", str), ("low", float), ("high", float))})
    return pd.concat(frames, ignore_index=True)


def _covered(low: pd.Series, high: pd.Series, c: pd.Series, ratio: pd.Series) -> pd.Series:
    """1.0 where ``[low, high]`` holds ``c x ratio`` (a cent's rounding of slack: the
    interval is rounded outwards to the cent), 0.0 where not, NaN without an interval."""
    expected = c * ratio.fillna(0.0)
    covered = ((low - 1e-9 <= expected) & (expected <= high + 1e-9)).astype(float)
    return covered.where(low.notna())


def _within(value: pd.Series, c: pd.Series, ratio: pd.Series, *, promise: bool) -> pd.Series:
    expected = c * ratio.fillna(0.0)
    scale = value if promise else expected
    return ((value - expected).abs() <= 0.25 * scale).astype(float)


def evaluate_symptoms(root: DataRoot, release_dir: Path | None = None, *,
                      cfg: SymptomsConfig | None = None) -> SymptomsEvaluation:
    """Compare the published symptoms values with c x the true ratio and with the oracle
    (evaluation only; definitions in the module docstring).

    A published value v of scaling factor c is "within 25%" when |v - c r| <= 0.25 c r,
    r the true ratio of users searching the symptom to users searching anything (a
    symptom cell absent from the truth has r = 0, which no published value is near).
    The same share is given against the true ratio after contribution bounding (read
    from the pipeline's private per-day aggregates: evaluation only), which separates
    the bias of bounding (a user counts in at most k symptoms a day) from the noise.
    """
    cfg = cfg or load_symptoms_config()
    release_dir = release_dir or root.latest_release("symptoms")
    manifest, days = _release_days(release_dir)
    truth = pq.read_table(root.truth_dir / SYMPTOMS_TRUTH_FILE).to_pandas()
    require_truth_covers(release_dir, days, root.truth_dir / SYMPTOMS_TRUTH_FILE,
                         truth["date"])
    resolutions = pq.read_table(release_dir / "series_resolution.parquet").to_pandas()
    scaling = pq.read_table(release_dir / "scaling_factors.parquet").to_pandas()
    regions = read_regions(root.regions_csv)
    values = _published_symptoms(release_dir).merge(
        regions[["region_id", "level", "open_covid_region_code"]], on="open_covid_region_code")
    values = values.merge(scaling[["region_id", "resolution", "c"]],
                          on=["region_id", "resolution"], how="left")
    keys = ["resolution", "date", "region_id", "symptom"]
    values = values.merge(_true_ratios(root, truth), on=keys, how="left")
    values = values.merge(_symptoms_intervals(release_dir),
                          on=["resolution", "open_covid_region_code", "date", "symptom"],
                          how="left", validate="one_to_one")

    # the eligible domain, its bounded true counts and where the published values sit
    mondays = complete_weeks(days[0], days[-1])
    series = pd.MultiIndex.from_arrays([resolutions["region_id"].astype(str).to_numpy(),
                                        resolutions["symptom"].astype(str).to_numpy()])
    region_ids = pd.Index(sorted(set(series.get_level_values(0))))
    series_region = region_ids.get_indexer(series.get_level_values(0))
    series_level = regions.set_index("region_id")["level"].reindex(
        series.get_level_values(0)).to_numpy(dtype=np.int64)
    a_day, b_day = _bounded_symptoms(root, days, series, region_ids)
    starts = [(m - days[0]).days for m in mondays]
    a_week = np.array([a_day[i:i + 7].sum(axis=0) for i in starts]).reshape(
        len(mondays), len(series))
    b_week = np.array([b_day[i:i + 7].sum(axis=0) for i in starts]).reshape(
        len(mondays), len(region_ids))
    daily_series = np.flatnonzero((resolutions["resolution"] == "daily").to_numpy())
    chosen = {"daily": daily_series, "weekly": np.arange(len(series))}
    counts = {"daily": (a_day, b_day), "weekly": (a_week, b_week)}
    labels = {"daily": {d.isoformat(): i for i, d in enumerate(days)},
              "weekly": {m.isoformat(): i for i, m in enumerate(mondays)}}
    values["series"] = series.get_indexer(pd.MultiIndex.from_arrays([
        values["region_id"].astype(str).to_numpy(), values["symptom"].astype(str).to_numpy()]))
    values["bounded_ratio"] = np.nan
    values["position"] = -1
    for res in RESOLUTIONS:
        rows = (values["resolution"] == res).to_numpy()
        a_mat, b_mat = counts[res]
        t = values.loc[rows, "date"].map(labels[res]).fillna(-1).to_numpy(dtype=np.int64)
        s = values.loc[rows, "series"].to_numpy(dtype=np.int64)
        ok = (t >= 0) & (s >= 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(ok, a_mat[t, s] / b_mat[t, series_region[s]], np.nan)
        values.loc[rows, "bounded_ratio"] = ratio
        column = np.full(len(series), -1, dtype=np.int64)
        column[chosen[res]] = np.arange(len(chosen[res]))
        values.loc[rows, "position"] = np.where(ok & (column[s] >= 0),
                                                t * len(chosen[res]) + column[s], -1)

    for col, flag in (("true_ratio", "within"), ("bounded_ratio", "within_bounded")):
        values[flag] = _within(values["value"], values["c"], values[col], promise=False) > 0
    within_columns = {
        "within_25_truth": _within(values["value"], values["c"], values["true_ratio"],
                                   promise=False),
        "within_25_bounded": _within(values["value"], values["c"], values["bounded_ratio"],
                                     promise=False),
        "promise_truth": _within(values["value"], values["c"], values["true_ratio"],
                                 promise=True),
        "promise_bounded": _within(values["value"], values["c"], values["bounded_ratio"],
                                   promise=True),
        "interval_bounded": _covered(values["low"], values["high"], values["c"],
                                     values["bounded_ratio"]),
        "interval_truth": _covered(values["low"], values["high"], values["c"],
                                   values["true_ratio"]),
    }

    # the oracle on every eligible value, and the release's decisions beside it
    cell_a = cfg.budget(SYMPTOM_METRIC)
    cell_b = cfg.budget(VOLUME_METRIC)
    noise_a: CellNoise = (float(cell_a.cell_epsilon), int(cell_a.sensitivity))
    noise_b: CellNoise = (float(cell_b.cell_epsilon), int(cell_b.sensitivity))
    frames = []
    for res, n_days in (("daily", 1), ("weekly", 7)):
        a_mat, b_mat = counts[res]
        cols = chosen[res]
        a = a_mat[:, cols].ravel()
        b = b_mat[:, series_region[cols]].ravel()
        oracle = oracle_publishes_ratio(a, b, sum_law((noise_a,) * n_days),
                                        sum_law((noise_b,) * n_days),
                                        tolerance=cfg.reliability_tolerance,
                                        probability=cfg.reliability_probability)
        frame = pd.DataFrame({"level": np.tile(series_level[cols], a_mat.shape[0]),
                              "resolution": res, "oracle": oracle, "published": False})
        for col in SYMPTOMS_WITHIN:
            frame[col] = np.nan
        mine = (values["resolution"] == res).to_numpy() & (values["position"] >= 0).to_numpy()
        position = values.loc[mine, "position"].to_numpy(dtype=np.int64)
        frame.loc[position, "published"] = True
        for col in SYMPTOMS_WITHIN:
            frame.loc[position, col] = within_columns[col][mine].to_numpy()
        frames.append(frame)
    eligible = pd.concat(frames, ignore_index=True)
    eligible["resolution"] = pd.Categorical(eligible["resolution"], categories=RESOLUTIONS)
    coverage = coverage_table(eligible, ["level", "resolution"], SYMPTOMS_WITHIN)
    pooled = coverage_table(eligible, ["resolution"], SYMPTOMS_WITHIN).reindex(
        pd.Index(RESOLUTIONS, name="resolution"))
    pooled[["eligible", "published", "oracle"]] = pooled[
        ["eligible", "published", "oracle"]].fillna(0).astype("int64")

    suppression = manifest["suppression"]["values"]
    return SymptomsEvaluation(
        series={str(k): int(v) for k, v in resolutions["resolution"].value_counts().items()},
        published={res: int((values["resolution"] == res).sum()) for res in RESOLUTIONS},
        published_share={res: float(suppression[res]["published_share"])
                         for res in suppression},
        within_25={str(res): float(part["within"].mean())
                   for res, part in values.groupby("resolution")},
        within_25_bounded={str(res): float(part["within_bounded"].mean())
                           for res, part in values.groupby("resolution")},
        median_relative_error={str(res): float(
            (part["value"] / (part["c"] * part["true_ratio"]) - 1).median())
            for res, part in values.groupby("resolution")},
        median_relative_error_bounded={str(res): float(
            (part["value"] / (part["c"] * part["bounded_ratio"]) - 1).median())
            for res, part in values.groupby("resolution")},
        within_25_by_level=values.pivot_table(index="level", columns="resolution",
                                              values="within", aggfunc="mean"),
        coverage=coverage,
        pooled=pooled,
    )
