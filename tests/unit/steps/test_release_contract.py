"""The versioned release contract (issue 15, point 7): the shipped schemas agree with the
code that writes the files, the checks catch every kind of break and name the file, and
the gate and publish refuse a release that breaks its contract."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from dp_ops.reports.mobility.release import write_release_files
from dp_ops.reports.mobility.report import CHANGE_COLUMNS, PUBLISHED_COLUMNS, ROW_KEY
from dp_ops.reports.symptoms.assemble import KEY_COLUMNS, SCALING_COLUMNS
from dp_ops.steps import release_contract
from dp_ops.steps.release_contract import (
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    check_manifest,
    check_release_files,
    load_columns,
    load_schema,
)

CONTRACTS = {report: load_columns(f"dp_ops.reports.{report}", report)
             for report in ("mobility", "symptoms")}


def _names(report: str, pattern: str) -> list[str]:
    for entry in CONTRACTS[report]["files"]:
        if entry["pattern"] == pattern:
            return [c.get("name", c.get("name_prefix")) for c in entry["columns"]]
    raise AssertionError(pattern)


def test_the_shipped_column_schemas_are_the_columns_the_code_writes() -> None:
    assert _names("mobility", "Global_Mobility_Report.csv") == list(PUBLISHED_COLUMNS)
    assert _names("symptoms", "*_daily_symptoms_dataset.csv") == [*KEY_COLUMNS, "symptom:"]
    assert _names("symptoms", "scaling_factors.parquet") == list(SCALING_COLUMNS)
    for report in ("mobility", "symptoms"):
        assert CONTRACTS[report]["schema_version"] == SCHEMA_VERSION
    versions = load_schema("manifest.schema.json")["properties"]["schema_version"]["enum"]
    assert versions == list(READABLE_VERSIONS) and versions[-1] == SCHEMA_VERSION


def _published(rows: int = 4) -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series([None] * rows, dtype="object")
                          for c in PUBLISHED_COLUMNS})
    frame["country_region_code"] = "DM"
    frame["country_region"] = "Demoland"
    frame["place_id"] = "ChIJ-x"
    frame["date"] = [f"2020-03-0{i + 1}" for i in range(rows)]
    for c in PUBLISHED_COLUMNS[9:]:
        frame[c] = pd.array([3, None, -12, 0][:rows], dtype="Int64")
    return frame


def _intervals(published: pd.DataFrame) -> pd.DataFrame:
    """The sidecar of ``published``: each change's interval, 3 below to 4 above it."""
    frame = published[list(ROW_KEY)].copy()
    for c in CHANGE_COLUMNS:
        frame[f"{c}_low"] = published[c] - 3
        frame[f"{c}_high"] = published[c] + 4
    return frame


@pytest.fixture
def mobility_release(tmp_path: Path) -> Path:
    target = tmp_path / "release"
    write_release_files(_published(), target, _intervals(_published()))
    return target


def test_a_release_written_by_the_code_conforms(mobility_release: Path) -> None:
    """Including columns with no value at all in this release (here every sub-region
    column): the writer types them as the contract says, not as Arrow's null type."""
    assert check_release_files("mobility", mobility_release, CONTRACTS["mobility"]) == []


@pytest.mark.parametrize("edit, expected", [
    (lambda f: f.rename(columns={"parks_percent_change_from_baseline": "parks"}),
     "column 12 is 'parks', expected 'parks_percent_change_from_baseline'"),
    (lambda f: f.drop(columns=["residential_percent_change_from_baseline"]),
     "'residential_percent_change_from_baseline' is missing"),
    (lambda f: f.assign(date="03/01/2020"), "'date' is not a date on line 2"),
    (lambda f: f.assign(place_id=""), "'place_id' is empty on line 2"),
    (lambda f: f.assign(parks_percent_change_from_baseline="12.5"),
     "'parks_percent_change_from_baseline' is not a integer"),
    (lambda f: f.assign(extra="x"), "unexpected column 'extra' at position 16"),
])
def test_each_kind_of_break_is_named_with_its_file(mobility_release: Path, edit: Any,
                                                   expected: str) -> None:
    path = mobility_release / "Global_Mobility_Report.csv"
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    edit(frame).to_csv(path, index=False)
    problems = check_release_files("mobility", mobility_release, CONTRACTS["mobility"])
    assert problems and all(p.startswith("Global_Mobility_Report.csv: ") for p in problems)
    assert any(expected in p for p in problems), problems


def test_a_missing_file_and_a_wrong_parquet_type_are_problems(mobility_release: Path) -> None:
    frame = _published()
    for column in ("sub_region_1", "sub_region_2", "metro_area", "iso_3166_2_code",
                   "census_fips_code"):
        frame[column] = "x"  # typed strings: only the parks column is wrong
    frame["parks_percent_change_from_baseline"] = "high"
    frame.to_parquet(mobility_release / "Global_Mobility_Report.parquet", index=False)
    for csv_file in (mobility_release / "Region_Mobility_Report_CSVs").glob("*.csv"):
        csv_file.unlink()
    problems = check_release_files("mobility", mobility_release, CONTRACTS["mobility"])
    assert any("Region_Mobility_Report_CSVs/*_Region_Mobility_Report.csv: no such file" in p
               for p in problems)
    assert any(p.startswith("Global_Mobility_Report.parquet: 'parks_percent_change_from_"
                            "baseline' has type") for p in problems)


@pytest.mark.parametrize("statistics", [True, False], ids=["footer", "no-statistics"])
def test_parquet_nulls_and_dates_are_found_with_or_without_statistics(
        mobility_release: Path, statistics: bool) -> None:
    """Null counts come from the row groups' statistics, or from the column itself when
    the file has none; a date column's values are read and matched."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = mobility_release / "Global_Mobility_Report.parquet"
    table = pq.read_table(path).to_pandas()
    table.loc[1, "country_region"] = None
    table.loc[2, "date"] = "03/03/2020"
    pq.write_table(pa.Table.from_pandas(table, schema=pq.read_schema(path)),
                   path, write_statistics=statistics, row_group_size=2)
    problems = check_release_files("mobility", mobility_release, CONTRACTS["mobility"])
    assert "Global_Mobility_Report.parquet: 'country_region' has 1 null value(s)" in problems
    assert "Global_Mobility_Report.parquet: 'date': 1 value(s) not YYYY-MM-DD" in problems
    assert not any("country_region_code" in p for p in problems)


def _manifest() -> dict[str, Any]:
    sha = "a" * 64
    return {
        "schema_version": SCHEMA_VERSION, "report": "mobility",
        "release_id": "2020-03-31-0123456789ab", "run_id": "backfill__2020-03-31",
        "software_version": "0.1.0", "method_version": "v1",
        "first_date": "2020-02-15", "last_date": "2020-03-31",
        "inputs": {"region_table_sha256": sha, "baseline_sha256": sha,
                   "baseline_window": ["2020-01-03", "2020-02-06"]},
        "method_updates": [], "rows": {"published": 10, "domain": 12}, "suppression": {},
        "epsilon": {"privacy_unit": "user-day", "delta": 0, "composition": "basic",
                    "per_user_day_max": 8.58, "per_user_day_normal_run": 8.58,
                    "cap": 18.018, "dates_accounted": 81, "dates_over_normal_run": [],
                    "sum_over_dates": 694.98},
        "files": {"Global_Mobility_Report.csv": {"bytes": 10, "sha256": sha}},
        "gate": {"success": True, "evaluated": 43, "data_docs": None},
        "ledger": {"ledger_id": "x", "chain_seq": 3830, "chain_sha256": sha},
        "signature": {"format": "sshsig", "file": "manifest.json.sig",
                      "namespace": "dp-ops-release", "signer": "release-signing@dp-ops",
                      "public_key_fingerprint": "SHA256:" + "A" * 43},
    }


@pytest.mark.parametrize("break_it, where", [
    (lambda m: m.pop("schema_version"), "'schema_version' is a required property"),
    (lambda m: m.update(schema_version="0.9"), "schema_version"),
    (lambda m: m["gate"].update(success=False), "gate"),
    (lambda m: m["epsilon"].update(delta=1e-9), "epsilon"),
    (lambda m: m.pop("method_updates"), "'method_updates' is a required property"),
    (lambda m: m.update(last_date="20200331"), "last_date"),
    (lambda m: m.pop("ledger"), "'ledger' is a required property"),
    (lambda m: m.pop("signature"), "'signature' is a required property"),
    (lambda m: m["signature"].update(file="../elsewhere.sig"), "signature"),
])
def test_the_manifest_schema(break_it: Any, where: str) -> None:
    assert check_manifest(_manifest()) == []
    broken = copy.deepcopy(_manifest())
    break_it(broken)
    problems = check_manifest(broken)
    assert any(where in p for p in problems), problems


def test_every_demo_manifest_shape_is_in_the_schema() -> None:
    """The schema names every top-level field publish writes (additions need a version)."""
    schema = load_schema("manifest.schema.json")
    written = set(_manifest()) | {"parameters"}
    assert written <= set(schema["properties"])
    assert json.dumps(schema)  # serialisable, as shipped


def test_the_gate_refuses_a_release_that_breaks_the_contract(
        monkeypatch: pytest.MonkeyPatch, mobility_release: Path) -> None:
    contract = copy.deepcopy(CONTRACTS["mobility"])
    contract["files"][0]["columns"].append(
        {"name": "retail_percent_change_from_baseline", "type": "integer", "nullable": True})
    with pytest.raises(release_contract.GateFailed, match="release contract mobility"):
        release_contract.require_contract("mobility", mobility_release, contract)


def _symptoms_wide(rows: int = 40, symptoms: int = 60) -> pd.DataFrame:
    """A sparse wide symptoms table: the key columns, then ``symptom:S<i>`` floats."""
    import numpy as np

    rng = np.random.default_rng(7)
    keys = pd.DataFrame({c: [f"{c[:3]}-{i % 5}" for i in range(rows)] for c in KEY_COLUMNS})
    keys["date"] = [f"2020-03-{1 + i % 28:02d}" for i in range(rows)]
    keys["sub_region_2"] = None  # a key column empty throughout (nullable)
    values = np.where(rng.random((rows, symptoms)) < 0.03,
                      np.round(rng.random((rows, symptoms)) * 150, 2), np.nan)
    return pd.concat([keys, pd.DataFrame(values, columns=[f"symptom:S{i}"
                                                         for i in range(symptoms)])], axis=1)


@pytest.mark.parametrize("bad", ["12,5", "1e5x", "nan", "-"])  # "12,5": quoted, one field
def test_a_bad_value_deep_in_a_wide_csv_is_named(tmp_path: Path, bad: str) -> None:
    """The wide check runs one kind of column at a time; a break anywhere in it is still
    reported column by column, with its name and line."""
    spec = next(e for e in CONTRACTS["symptoms"]["files"]
                if e["pattern"] == "*_daily_symptoms_dataset.csv")
    frame = _symptoms_wide().astype({f"symptom:S{i}": object for i in range(60)})
    path = tmp_path / "2020_XX_daily_symptoms_dataset.csv"
    frame.to_csv(path, index=False)
    assert release_contract._check_csv(path, spec["columns"]) == []
    frame.loc[29, "symptom:S37"] = bad
    frame.to_csv(path, index=False)
    problems = release_contract._check_csv(path, spec["columns"])
    assert problems == ["'symptom:S37' is not a number on line 31"]
    frame.loc[29, "symptom:S37"] = 1.5
    frame.loc[3, "open_covid_region_code"] = ""
    frame.to_csv(path, index=False)
    assert release_contract._check_csv(path, spec["columns"]) == [
        "'open_covid_region_code' is empty on line 5"]


def test_a_wide_table_is_typed_as_from_pandas_types_it() -> None:
    """The block conversion of a wide table's float columns gives the table, schema and
    pandas metadata that ``Table.from_pandas`` gives, nulls where values are NaN."""
    import pyarrow as pa

    frame = _symptoms_wide()
    pattern = "*_daily_symptoms_dataset.parquet"
    fast = release_contract.arrow_table(frame, "symptoms", pattern, CONTRACTS["symptoms"])
    entry = next(e for e in CONTRACTS["symptoms"]["files"]
                 if e["pattern"] == pattern)
    specs = release_contract._expected(entry["columns"], list(frame.columns))
    assert not isinstance(specs, str)
    schema = pa.schema([pa.field(s["name"], release_contract._ARROW_TYPES[s["type"]])
                        for s in specs])
    slow = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    assert fast.equals(slow, check_metadata=True)
    assert fast.column("symptom:S0").null_count == int(frame["symptom:S0"].isna().sum())
