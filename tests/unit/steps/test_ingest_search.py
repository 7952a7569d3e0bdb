"""Ingestion of search activity: unknown symptoms and regions, null ids and stray dates
are quarantined with their reason; a search matching no symptom (null) is valid; the
symptom list itself is checked; nothing is lost."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dp_demo.geography import demo_regions

from dp_ops.errors import IngestError
from dp_ops.layout import DataRoot
from dp_ops.regions import write_regions
from dp_ops.sources.search_activity import SOURCE as SEARCH_ACTIVITY
from dp_ops.sources.search_activity import read_symptoms, symptom_list
from dp_ops.steps.ingest import ingest_source

DAY = date(2020, 3, 20)
SCHEMA = pa.schema([("user_id", pa.string()), ("region_id", pa.string()),
                    ("symptom", pa.string())])


@pytest.fixture()
def root(tmp_path: Path) -> DataRoot:
    root = DataRoot(tmp_path)
    root.regions_csv.parent.mkdir(parents=True)
    write_regions(demo_regions(), root.regions_csv)
    symptom_list(root).write_text("Fever\nCough\nAnosmia\n")
    return root


def finest() -> str:
    regions = demo_regions()
    return str(regions.loc[regions["level"] == 2, "region_id"].iloc[0])


def write_raw(root: DataRoot, rows: list[tuple[object, ...]], name: str = "part-0.parquet",
              schema: pa.Schema = SCHEMA, dates: list[date] | None = None) -> Path:
    part = root.raw_partition("search_activity", DAY)
    part.mkdir(parents=True, exist_ok=True)
    columns = {f.name: [r[i] for r in rows] for i, f in enumerate(schema)}
    table = pa.table(columns, schema=schema)
    if dates is not None:
        table = table.append_column("date", pa.array(dates, pa.date32()))
    pq.write_table(table, part / name)
    return part / name


def test_bad_rows_are_quarantined_and_null_symptoms_kept(root: DataRoot) -> None:
    r = finest()
    good = [("u1", r, "Fever"), ("u1", r, "Fever"), ("u2", r, None), ("u3", r, "Anosmia")]
    bad = [("u4", r, "Flu-like feelings"), ("u5", "XX-01", "Cough"), ("u6", "DM", "Cough"),
           (None, r, "Cough"), ("", r, None), ("bad\x01id", r, "Fever")]
    write_raw(root, good + bad)
    result = ingest_source(root, SEARCH_ACTIVITY, DAY)
    clean = pq.read_table(root.clean_partition("search_activity", DAY) / "part.parquet")
    quarantine = pq.read_table(root.quarantine_partition("search_activity", DAY)
                               / "rows.parquet").to_pandas()
    # repeated identical searches are kept: bounding counts a user once per symptom
    assert clean.num_rows == len(good)
    assert clean.column("symptom").null_count == 1
    assert len(quarantine) == len(bad)
    assert set(quarantine["reason"]) == {
        "unknown symptom", "unknown or non-finest region_id", "null or empty user_id",
        "control characters in user_id"}
    assert quarantine["source_file"].str.endswith("part-0.parquet").all()
    assert sorted(quarantine["source_row"]) == list(range(len(good), len(good) + len(bad)))
    assert "u4" not in result.summary and "Flu-like" not in result.summary


def test_rows_dated_outside_the_partition_are_quarantined(root: DataRoot) -> None:
    r = finest()
    write_raw(root, [("a", r, "Fever"), ("b", r, "Cough")], dates=[DAY, date(2020, 3, 21)])
    ingest_source(root, SEARCH_ACTIVITY, DAY)
    quarantine = pq.read_table(root.quarantine_partition("search_activity", DAY)
                               / "rows.parquet").to_pandas()
    assert quarantine["reason"].tolist() == ["date outside the partition"]


def test_file_errors_name_the_file(root: DataRoot) -> None:
    with pytest.raises(IngestError, match="missing raw partition .*search_activity"):
        ingest_source(root, SEARCH_ACTIVITY, DAY)
    write_raw(root, [("a", finest())], schema=pa.schema([("user_id", pa.string()),
                                                         ("region_id", pa.string())]))
    with pytest.raises(IngestError, match=r"part-0.parquet: missing required column.*symptom"):
        ingest_source(root, SEARCH_ACTIVITY, DAY)


def test_symptom_list_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "symptoms.txt"
    path.write_text("Fever\nCough\n\n")
    assert read_symptoms(path) == ["Fever", "Cough"]  # trailing newlines are fine
    path.write_text("Fever\n\nCough\n")
    with pytest.raises(IngestError, match="symptoms.txt, line 2: empty"):
        read_symptoms(path)
    path.write_text("Fever\nCough\nFever\n")
    with pytest.raises(IngestError, match="line 3: symptom 'Fever' repeats line 1"):
        read_symptoms(path)
    with pytest.raises(IngestError, match="not found"):
        read_symptoms(tmp_path / "nope.txt")
