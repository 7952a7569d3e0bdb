"""The synthetic input generator: layout, schema, determinism, population and truth."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dp_demo.generator import (
    LOCATION_SCHEMA,
    TRUTH_FILE,
    GenerateSummary,
    default_symptoms,
    generate,
    trajectory,
)
from dp_demo.geography import SPARSE_REGION_IDS, demo_population_weights, demo_regions
from support.dates import date_range

from dp_ops.layout import DataRoot
from dp_ops.regions import read_regions
from dp_ops.reports.mobility.config import PUBLISHED_CATEGORIES
from dp_ops.sources.location_history import ALL_STAY_CATEGORIES, PLACE_CATEGORIES
from dp_ops.sources.search_activity import symptom_list

START, END = date(2020, 1, 1), date(2020, 1, 10)
DAYS = date_range(START, END)
USERS = 500


def _generate(path: Path, seed: int = 11, start: date = START, end: date = END,
              progress: list[str] | None = None) -> GenerateSummary:
    return generate(DataRoot(path), start, end, users=USERS, seed=seed,
                    progress=None if progress is None else progress.append)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[DataRoot, GenerateSummary, list[str]]:
    messages: list[str] = []
    path = tmp_path_factory.mktemp("gen")
    return DataRoot(path), _generate(path, progress=messages), messages


@pytest.fixture(scope="module")
def stays(run: tuple[DataRoot, GenerateSummary, list[str]]) -> pd.DataFrame:
    root = run[0]
    frames = []
    for day in DAYS:
        path = root.raw_partition("location_history", day) / "part-0.parquet"
        df = pq.read_table(path).to_pandas()
        df["date"] = day
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def test_writes_the_reference_files(run: tuple[DataRoot, GenerateSummary, list[str]]) -> None:
    root, summary, _ = run
    pd.testing.assert_frame_equal(read_regions(root.regions_csv), demo_regions(), check_dtype=False)
    names = symptom_list(root).read_text(encoding="utf-8").splitlines()
    assert names == default_symptoms() and len(names) == 422 and "" not in names
    assert summary.days == len(DAYS) and summary.regions == len(demo_regions())
    assert str(root.regions_csv) in summary.paths
    assert f"{len(DAYS)} days" in summary.describe()


def test_partition_schema_is_exact(run: tuple[DataRoot, GenerateSummary, list[str]]) -> None:
    root = run[0]
    for day in DAYS:
        files = list(root.raw_partition("location_history", day).iterdir())
        assert [f.name for f in files] == ["part-0.parquet"]
        schema = pq.read_schema(files[0])
        assert schema.names == ["user_id", "region_id", "place_id", "place_category", "dwell_hours"]
        assert [f.type for f in schema] == [pa.string()] * 4 + [pa.float64()]
        assert schema.equals(LOCATION_SCHEMA)


def test_rows_are_valid(stays: pd.DataFrame,
                        run: tuple[DataRoot, GenerateSummary, list[str]]) -> None:
    regions = demo_regions()
    finest = set(regions.loc[regions["level"] == 2, "region_id"])
    assert set(stays["region_id"]) <= finest
    assert set(stays["place_category"]) == set(ALL_STAY_CATEGORIES)
    assert stays["dwell_hours"].gt(0).all() and stays["dwell_hours"].le(24).all()
    assert stays["user_id"].str.fullmatch(r"u[0-9a-f]{12}").all()
    assert stays["user_id"].nunique() <= USERS
    prefixes = "p-" + stays["region_id"] + "-"
    assert all(p.startswith(q) for p, q in zip(stays["place_id"], prefixes, strict=True))
    assert not stays.isna().any().any()
    assert run[1].rows == len(stays)


def test_population_behaviour(stays: pd.DataFrame) -> None:
    per_day = stays.groupby("date")["user_id"].nunique()
    assert per_day.between(0.78 * USERS, 0.92 * USERS).all()  # ~85% active
    home = stays[stays["place_category"] == "residential"]
    hours = home.groupby(["date", "user_id"])["dwell_hours"].sum()
    assert 10 <= hours.median() <= 16
    assert home.groupby(["date", "user_id"])["region_id"].nunique().eq(1).all()
    work = stays[stays["place_category"] == "workplace"]
    assert (work["dwell_hours"] < 1).any() and (work["dwell_hours"] > 6).mean() > 0.8
    totals = stays.groupby(["date", "user_id"])["dwell_hours"].sum()
    assert totals.max() <= 24


def test_some_user_days_exceed_four_pairs(stays: pd.DataFrame) -> None:
    places = stays[stays["place_category"].isin(PLACE_CATEGORIES)]
    pairs = places.drop_duplicates(["date", "user_id", "place_category", "region_id"]).groupby(
        ["date", "user_id"]).size()
    user_days = stays.groupby(["date", "user_id"]).ngroups
    assert (pairs > 4).sum() > 0
    assert 1 - (pairs > 3).sum() / user_days > 0.95  # users with no visits touch 0 pairs
    many = pairs[pairs > 4].index
    regions_touched = places.set_index(["date", "user_id"]).loc[many].groupby(
        level=[0, 1])["region_id"].nunique()
    assert (regions_touched > 1).any()


def test_sparse_regions_have_few_users(stays: pd.DataFrame) -> None:
    daily = stays.groupby(["region_id", "date"])["user_id"].nunique().unstack(fill_value=0)
    daily = daily.reindex(sorted(SPARSE_REGION_IDS), fill_value=0)
    assert (daily < 100).all(axis=None)


def test_deterministic_for_a_seed(tmp_path: Path,
                                  run: tuple[DataRoot, GenerateSummary, list[str]]) -> None:
    root = run[0]
    again = _generate(tmp_path / "again", start=DAYS[3], end=DAYS[4])
    for day in DAYS[3:5]:
        name = Path("raw") / "location_history" / f"date={day}" / "part-0.parquet"
        assert (root.root / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    assert (root.regions_csv.read_bytes()
            == DataRoot(tmp_path / "again").regions_csv.read_bytes())
    assert again.rows > 0
    other = _generate(tmp_path / "other", seed=12, start=DAYS[3], end=DAYS[3])
    name = Path("raw") / "location_history" / f"date={DAYS[3]}" / "part-0.parquet"
    assert (root.root / name).read_bytes() != (tmp_path / "other" / name).read_bytes()
    assert other.rows > 0


def test_whole_run_is_byte_identical(tmp_path: Path) -> None:
    a = _generate(tmp_path / "a", start=DAYS[0], end=DAYS[1])
    b = _generate(tmp_path / "b", start=DAYS[0], end=DAYS[1])
    files = sorted(p.relative_to(tmp_path / "a")
                   for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert any(f.name == TRUTH_FILE for f in files) and a.rows == b.rows
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_progress_is_reported(run: tuple[DataRoot, GenerateSummary, list[str]]) -> None:
    messages = run[2]
    assert [m for m in messages if "days written" in m][-1].endswith("10/10 days written "
                                                                      "(up to 2020-01-10)")
    assert messages[-1] == "truth: 1/1 batches of days computed"


def test_the_input_is_complete_before_the_truth(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`make demo` starts the scheduler once the last day's input files exist, while the
    generator computes the truth: every input file is written before any truth (here in
    batches of 3 days, so that there are several)."""
    from dp_demo import generator

    monkeypatch.setattr(generator, "_TRUTH_BATCH_DAYS", 3)
    root = DataRoot(tmp_path)
    seen: list[tuple[str, bool, bool]] = []

    def progress(message: str) -> None:
        last = [root.raw_partition(source, DAYS[-1]) / "part-0.parquet"
                for source in ("location_history", "search_activity")]
        seen.append((message, all(p.is_file() for p in last),
                     any(root.truth_dir.glob("*.parquet")) if root.truth_dir.exists()
                     else False))

    generate(root, START, END, users=USERS, seed=11, progress=progress)
    truth = [(inputs, written) for m, inputs, written in seen if m.startswith("truth")]
    assert len(truth) == 4 and all(inputs and not written for inputs, written in truth)
    assert any(root.truth_dir.glob("*.parquet"))


def test_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="end=2020-01-01 is before start=2020-01-02"):
        generate(DataRoot(tmp_path), date(2020, 1, 2), date(2020, 1, 1))
    with pytest.raises(ValueError, match="users=0"):
        generate(DataRoot(tmp_path), START, END, users=0)


# -- truth -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def truth(run: tuple[DataRoot, GenerateSummary, list[str]]) -> pd.DataFrame:
    return pd.read_parquet(run[0].truth_dir / TRUTH_FILE)


def test_truth_has_every_region_and_date(truth: pd.DataFrame,
                                         run: tuple[DataRoot, GenerateSummary, list[str]]) -> None:
    regions = demo_regions()
    assert len(truth) == len(regions) * len(DAYS)
    assert not truth.duplicated(["date", "region_id"]).any()
    assert set(truth["region_id"]) == set(regions["region_id"])
    assert set(truth["date"]) == set(DAYS)
    schema = pq.read_schema(run[0].truth_dir / TRUTH_FILE)
    assert schema.field("date").type == pa.date32()
    expected = ["date", "region_id", "level", *PUBLISHED_CATEGORIES, "contributors",
                *(f"{m}_percent_change" for m in PUBLISHED_CATEGORIES)]
    assert schema.names == expected
    # The generated range does not cover the baseline window: no true baseline.
    assert truth[[c for c in expected if c.endswith("_percent_change")]].isna().all(axis=None)
    assert "non-private" in (run[0].truth_dir / "README.md").read_text().lower() or \
        "not private" in (run[0].truth_dir / "README.md").read_text().lower()


def _expected_truth(day: pd.DataFrame, region: str) -> dict[str, float]:
    """The mobility metrics (docs/design.md, Mobility report) for one region, straight from
    the stays (pandas, no SQL)."""
    inside = day[day["region_id"].str.startswith(region)]
    users = lambda cats: inside.loc[inside["place_category"].isin(cats), "user_id"].nunique()  # noqa: E731
    out: dict[str, float] = {name: sum(users([c]) for c in sources)
                             for name, sources in PUBLISHED_CATEGORIES.items()
                             if set(sources) <= set(PLACE_CATEGORIES)}
    work = inside[inside["place_category"] == "workplace"].groupby("user_id")["dwell_hours"].sum()
    out["workplaces"] = int((work > 1).sum())
    home = inside[inside["place_category"] == "residential"].groupby("user_id")["dwell_hours"].sum()
    out["residential"] = float(home.clip(upper=24).mean())
    out["contributors"] = inside["user_id"].nunique()
    return out


@pytest.mark.parametrize("region", ["DM", "DM-01", "DM-01-001", "DM-03-002", "DM-09"])
def test_truth_matches_a_direct_computation(truth: pd.DataFrame, stays: pd.DataFrame,
                                            region: str) -> None:
    day = DAYS[2]
    expected = _expected_truth(stays[stays["date"] == day], region)
    row = truth[(truth["date"] == day) & (truth["region_id"] == region)].iloc[0]
    for metric, value in expected.items():
        assert row[metric] == pytest.approx(value), metric


def test_truth_counts_a_user_once_per_region(truth: pd.DataFrame) -> None:
    by_level = truth.pivot_table(index="date", columns="level", values="contributors",
                                 aggfunc="sum")
    # Users visiting several municipalities are counted once at the country level.
    assert (by_level[0] <= by_level[1]).all() and (by_level[1] <= by_level[2]).all()
    assert (by_level[0] < by_level[2]).any()


# -- trajectory --------------------------------------------------------------------------

def test_trajectory_is_flat_in_the_baseline_window() -> None:
    factors = trajectory(demo_regions(), date(2020, 1, 3), date(2020, 2, 6))
    weekday = pd.to_datetime(factors["date"]).dt.day_of_week
    by = factors.groupby(["region_id", "category", weekday])["factor"]
    assert (by.max() - by.min()).max() == pytest.approx(0.0)


def test_trajectory_drops_in_april() -> None:
    factors = trajectory(demo_regions(), date(2020, 4, 8), date(2020, 4, 8))
    f = factors.groupby("category")["factor"].mean()
    assert f["transit"] < 0.55 and f["residential"] > 1.1 and f["groceries"] > f["transit"]


@pytest.mark.slow
def test_spring_drop_in_transit(tmp_path: Path) -> None:
    """A longer run: the country's true transit metric in April is at least 40% below its
    baseline-period mean (the trajectory puts it near -65%; 3000 users keep sampling noise
    to a few percent)."""
    generate(DataRoot(tmp_path), date(2020, 1, 1), date(2020, 4, 30), users=3000, seed=5)
    truth = pd.read_parquet(DataRoot(tmp_path).truth_dir / TRUTH_FILE)
    country = truth[truth["region_id"] == "DM"].set_index("date")
    dates = pd.Series(country.index, index=country.index)
    baseline = country.loc[dates.between(date(2020, 1, 3), date(2020, 2, 6)), "transit_stations"]
    april = country.loc[dates.between(date(2020, 4, 1), date(2020, 4, 30)), "transit_stations"]
    assert april.mean() <= 0.6 * baseline.mean()
    changes = country.loc[dates.between(date(2020, 4, 1), date(2020, 4, 30)),
                          "transit_stations_percent_change"]
    assert changes.notna().all() and changes.max() < -40
    # No trend in the window: weekday workplace counts (~1,300 users, sampling sd ~3%)
    # stay within 10% of their same-weekday median.
    weekdays = dates.between(date(2020, 1, 3), date(2020, 2, 6)) & (
        pd.to_datetime(dates).dt.day_of_week < 5)
    assert country.loc[weekdays, "workplaces_percent_change"].abs().max() < 10


def test_runs_on_another_region_table(tmp_path: Path) -> None:
    regions = demo_regions()
    regions = regions[~regions["region_id"].str.startswith("DM-15")].copy()
    regions.loc[regions["region_id"] == "DM-14-004", "region_id"] = "DM-14-900"  # not in demo
    generate(DataRoot(tmp_path), START, START, users=300, seed=3, regions=regions)
    back = read_regions(DataRoot(tmp_path).regions_csv)
    assert set(back["region_id"]) == set(regions["region_id"])
    day = pq.read_table(DataRoot(tmp_path).raw_partition("location_history", START)).to_pandas()
    finest = set(regions.loc[regions["level"] == 2, "region_id"])
    assert set(day["region_id"]) <= finest
    weights = demo_population_weights(regions)
    others = weights.drop("DM-14-900")
    assert others.min() < weights["DM-14-900"] < others.max()  # unknown ids: a median share
