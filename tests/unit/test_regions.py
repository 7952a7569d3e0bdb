"""The public region table: the demo country, CSV round trip, validation, ancestors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dp_demo.geography import (
    CAPITAL_REGION_ID,
    SMALL_TOWN_ID,
    SPARSE_REGION_IDS,
    demo_population_weights,
    demo_regions,
)

from dp_ops.errors import RegionTableError
from dp_ops.regions import REGION_COLUMNS, TEXT_COLUMNS, ancestors, read_regions, write_regions


@pytest.fixture(scope="module")
def regions() -> pd.DataFrame:
    return demo_regions()


def test_demo_table_has_the_spec_columns_in_order(regions: pd.DataFrame) -> None:
    assert tuple(regions.columns) == REGION_COLUMNS
    assert regions["level"].dtype == np.int64
    assert regions["area_km2"].dtype == np.float64
    for column in TEXT_COLUMNS:
        assert regions[column].map(type).eq(str).all(), column


def test_demo_country_shape(regions: pd.DataFrame) -> None:
    counts = regions["level"].value_counts()
    assert counts[0] == 1
    assert counts[1] == 15
    assert 55 <= counts[2] <= 60
    country = regions.loc[regions["level"] == 0].iloc[0]
    assert (country["region_id"], country["parent_id"]) == ("DM", "")
    assert (country["country_region_code"], country["country_region"]) == ("DM", "Demoland")
    assert (regions["country_region_code"] == "DM").all()
    children = regions.loc[regions["level"] == 2].groupby("parent_id").size()
    assert children.min() <= 2
    assert children[CAPITAL_REGION_ID[:5]] >= 8  # the capital county is the largest


def test_demo_codes_and_place_ids(regions: pd.DataFrame) -> None:
    counties = regions.loc[regions["level"] == 1]
    assert counties["region_id"].str.fullmatch(r"DM-\d\d").all()
    assert (counties["iso_3166_2_code"] == counties["region_id"]).all()
    assert (counties["sub_region_1_code"] == counties["region_id"]).all()
    assert counties["sub_region_1"].str.endswith(" County").all()
    munis = regions.loc[regions["level"] == 2]
    assert munis["region_id"].str.fullmatch(r"DM-\d\d-\d\d\d").all()
    assert (munis["sub_region_2"] != "").all()
    assert (munis["open_covid_region_code"] == munis["region_id"]).all()
    assert (regions.loc[regions["level"] < 2, "sub_region_2"] == "").all()
    assert (regions["metro_area"] == "").all() and (regions["census_fips_code"] == "").all()
    assert regions["place_id"].str.fullmatch(r"ChIJ[A-Za-z0-9_-]{23}").all()
    assert regions["place_id"].is_unique


def test_areas_add_up_and_include_a_small_town(regions: pd.DataFrame) -> None:
    area = regions.set_index("region_id")["area_km2"]
    assert area[SMALL_TOWN_ID] < 3
    assert (regions.loc[regions["level"] == 2, "area_km2"] < 3).sum() >= 1
    for level in (1, 2):
        sums = regions.loc[regions["level"] == level].groupby("parent_id")["area_km2"].sum()
        assert np.allclose(area[sums.index], sums.to_numpy())


def test_demo_table_is_deterministic_and_seed_only_moves_areas() -> None:
    pd.testing.assert_frame_equal(demo_regions(7), demo_regions(7))
    other = demo_regions(8)
    pd.testing.assert_frame_equal(demo_regions(7).drop(columns="area_km2"),
                                  other.drop(columns="area_km2"))
    assert other.set_index("region_id").loc[SMALL_TOWN_ID, "area_km2"] < 3


def test_population_weights(regions: pd.DataFrame) -> None:
    weights = demo_population_weights(regions)
    assert set(weights.index) == set(regions.loc[regions["level"] == 2, "region_id"])
    assert weights.sum() == pytest.approx(1.0)
    assert weights.idxmax() == CAPITAL_REGION_ID
    assert len(SPARSE_REGION_IDS) >= 4
    assert set(weights.index) >= SPARSE_REGION_IDS
    # Sparse: under 60 daily users from a population of 100,000 even if all were active.
    assert (weights[sorted(SPARSE_REGION_IDS)] * 100_000 < 60).all()
    typical = weights.drop(sorted(SPARSE_REGION_IDS)).median()
    assert weights[sorted(SPARSE_REGION_IDS)].max() < typical / 5


# -- CSV round trip and validation -------------------------------------------------------

def test_round_trip_keeps_types_and_empty_strings(regions: pd.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "regions.csv"
    write_regions(regions, path)
    back = read_regions(path)
    pd.testing.assert_frame_equal(back, regions, check_dtype=False)
    assert back["level"].dtype == np.int64 and back["area_km2"].dtype == np.float64
    assert back.loc[0, "parent_id"] == "" and not back[list(TEXT_COLUMNS)].isna().any().any()
    assert path.read_text(encoding="utf-8").splitlines()[0] == ",".join(REGION_COLUMNS)


def _write_broken(tmp_path: Path, df: pd.DataFrame) -> Path:
    path = tmp_path / "broken_regions.csv"
    df.to_csv(path, index=False)
    return path


def test_missing_columns_are_named(regions: pd.DataFrame, tmp_path: Path) -> None:
    path = _write_broken(tmp_path, regions.drop(columns=["area_km2", "place_id"]))
    with pytest.raises(RegionTableError) as err:
        read_regions(path)
    assert str(path) in str(err.value)
    assert "place_id" in str(err.value) and "area_km2" in str(err.value)


def test_duplicate_region_id(regions: pd.DataFrame, tmp_path: Path) -> None:
    df = pd.concat([regions, regions.iloc[[5]]], ignore_index=True)
    path = _write_broken(tmp_path, df)
    with pytest.raises(RegionTableError, match="duplicate region_id") as err:
        read_regions(path)
    assert str(path) in str(err.value) and regions.iloc[5]["region_id"] in str(err.value)


def test_missing_parent(regions: pd.DataFrame, tmp_path: Path) -> None:
    df = regions.copy()
    df.loc[10, "parent_id"] = "DM-99"
    path = _write_broken(tmp_path, df)
    with pytest.raises(RegionTableError, match=r"parent_id 'DM-99' is not a region") as err:
        read_regions(path)
    assert str(path) in str(err.value) and df.loc[10, "region_id"] in str(err.value)


def test_parent_at_wrong_level(regions: pd.DataFrame, tmp_path: Path) -> None:
    df = regions.copy()
    muni = df.index[df["level"] == 2][0]
    df.loc[muni, "parent_id"] = "DM"
    with pytest.raises(RegionTableError, match="must be 1"):
        read_regions(_write_broken(tmp_path, df))


def test_cycle(regions: pd.DataFrame, tmp_path: Path) -> None:
    df = regions.copy()
    df.loc[df["region_id"] == "DM-02", "parent_id"] = "DM-02-001"
    path = _write_broken(tmp_path, df)
    with pytest.raises(RegionTableError, match="cycle") as err:
        read_regions(path)
    assert str(path) in str(err.value) and "DM-02" in str(err.value)


def test_two_country_rows(regions: pd.DataFrame, tmp_path: Path) -> None:
    df = regions.copy()
    df.loc[df["region_id"] == "DM-01", ["parent_id", "level"]] = ["", 0]
    df.loc[df["parent_id"] == "DM-01", "level"] = 1
    with pytest.raises(RegionTableError, match="'DM' has 2 level-0 rows"):
        read_regions(_write_broken(tmp_path, df))


@pytest.mark.parametrize("bad_area", [-4.0, 0.0, float("inf"), float("nan")])
def test_bad_area_names_file_row_and_region(regions: pd.DataFrame, tmp_path: Path,
                                            bad_area: float) -> None:
    df = regions.copy()
    df.loc[7, "area_km2"] = bad_area
    path = _write_broken(tmp_path, df)
    with pytest.raises(RegionTableError, match="area_km2") as err:
        read_regions(path)
    message = str(err.value)
    assert str(path) in message
    assert "row 8 (line 9)" in message and df.loc[7, "region_id"] in message


def test_non_numeric_level(regions: pd.DataFrame, tmp_path: Path) -> None:
    df = regions.astype({"level": str})
    df.loc[3, "level"] = "two"
    with pytest.raises(RegionTableError, match=re.escape("level='two'")):
        read_regions(_write_broken(tmp_path, df))


# -- ancestors -----------------------------------------------------------------------

def test_ancestors_maps_every_region_to_itself_and_its_ancestors(regions: pd.DataFrame) -> None:
    anc = ancestors(regions)
    assert list(anc.columns) == ["finest_region_id", "level", "region_id"]
    counts = regions["level"].value_counts()
    assert len(anc) == counts[0] + 2 * counts[1] + 3 * counts[2]
    rows = anc.loc[anc["finest_region_id"] == "DM-03-002"]
    assert rows[["level", "region_id"]].values.tolist() == [
        [0, "DM"], [1, "DM-03"], [2, "DM-03-002"]]
    assert not anc.duplicated(["finest_region_id", "level"]).any()
    level_of = regions.set_index("region_id")["level"]
    assert (level_of[anc["region_id"]].to_numpy() == anc["level"].to_numpy()).all()


def test_a_validated_table_is_reused_until_its_file_changes(regions: pd.DataFrame,
                                                            tmp_path: Path) -> None:
    import os

    path = tmp_path / "regions.csv"
    write_regions(regions, path)
    old = path.stat().st_mtime_ns - 10_000_000_000
    os.utime(path, ns=(old, old))  # older than the 2 s racy window: reusable
    first = read_regions(path)
    first.loc[0, "name"] = "changed by the caller"  # a copy: the kept table is untouched
    again = read_regions(path)
    pd.testing.assert_frame_equal(again, regions.loc[:, list(REGION_COLUMNS)]
                                  .astype({"level": "int64", "area_km2": "float64"}),
                                  check_dtype=False)
    bad = regions.copy()
    bad.loc[1, "parent_id"] = "NOPE"
    write_regions(bad, path)  # a new size and mtime: read and validated again
    with pytest.raises(RegionTableError, match="NOPE"):
        read_regions(path)
