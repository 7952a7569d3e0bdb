"""Ingestion: file-level errors name the file; bad rows are quarantined with a reason;
every input row ends up in exactly one of clean or quarantine."""

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
from dp_ops.sources.location_history import SOURCE as LOCATION_HISTORY
from dp_ops.steps.ingest import ingest_source

DAY = date(2020, 1, 7)


@pytest.fixture()
def root(tmp_path: Path) -> DataRoot:
    root = DataRoot(tmp_path)
    root.regions_csv.parent.mkdir(parents=True)
    write_regions(demo_regions(), root.regions_csv)
    return root


def finest(root: DataRoot) -> str:
    regions = demo_regions()
    return str(regions.loc[regions["level"] == 2, "region_id"].iloc[0])


def write_raw(root: DataRoot, rows: dict[str, list[object]], name: str = "part-0.parquet",
              schema: pa.Schema | None = None) -> Path:
    part = root.raw_partition("location_history", DAY)
    part.mkdir(parents=True, exist_ok=True)
    path = part / name
    pq.write_table(pa.table(rows, schema=schema), path)
    return path


def good_row(region: str, user: str = "u1", hours: float = 2.0) -> dict[str, object]:
    return {"user_id": user, "region_id": region, "place_id": "p1",
            "place_category": "parks", "dwell_hours": hours}


def rows_of(*rows: dict[str, object]) -> dict[str, list[object]]:
    return {k: [r[k] for r in rows] for k in rows[0]}


SCHEMA = pa.schema([("user_id", pa.string()), ("region_id", pa.string()),
                    ("place_id", pa.string()), ("place_category", pa.string()),
                    ("dwell_hours", pa.float64())])


def test_bad_rows_are_quarantined_with_reasons(root: DataRoot) -> None:
    r = finest(root)
    bad = [
        good_row(r, user=""),
        good_row(r, user=None),  # type: ignore[arg-type]
        good_row("XX-99"),
        good_row("DM"),  # a country is not a finest-level region
        {**good_row(r), "place_category": "casino"},
        good_row(r, hours=-1.0),
        good_row(r, hours=25.0),
        good_row(r, hours=float("nan")),
        good_row(r, user="bad\x00id"),
        good_row(r, user="x" * 300),
    ]
    good = [good_row(r, user=f"ok{i}") for i in range(5)]
    dup = [good_row(r, user="ok0")]
    write_raw(root, rows_of(*(good + bad + dup)), schema=SCHEMA)
    result = ingest_source(root, LOCATION_HISTORY, DAY)
    clean = pq.read_table(root.clean_partition("location_history", DAY) / "part.parquet")
    quarantine = pq.read_table(root.quarantine_partition("location_history", DAY)
                               / "rows.parquet").to_pandas()
    assert clean.num_rows == 5
    assert len(quarantine) == len(bad) + 1
    assert set(quarantine["reason"]) == {
        "null or empty user_id", "unknown or non-finest region_id", "unknown place_category",
        "negative dwell_hours", "dwell_hours over 24", "dwell_hours is not finite",
        "control characters in user_id", "user_id longer than the limit", "duplicate row"}
    assert quarantine["source_file"].str.endswith("part-0.parquet").all()
    # the summary is safe to log: reasons and paths, no ids
    assert "ok0" not in result.summary and "quarantined" in result.summary


def test_missing_partition_is_an_error(root: DataRoot) -> None:
    with pytest.raises(IngestError, match="missing raw partition .*date=2020-01-07"):
        ingest_source(root, LOCATION_HISTORY, DAY)


def test_corrupt_file_names_the_file(root: DataRoot) -> None:
    part = root.raw_partition("location_history", DAY)
    part.mkdir(parents=True)
    (part / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(IngestError, match="broken.parquet"):
        ingest_source(root, LOCATION_HISTORY, DAY)


def test_truncated_file_names_the_file(root: DataRoot) -> None:
    path = write_raw(root, rows_of(*[good_row(finest(root), user=f"u{i}") for i in range(50)]),
                     schema=SCHEMA)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(IngestError, match="part-0.parquet"):
        ingest_source(root, LOCATION_HISTORY, DAY)


def test_missing_column_names_file_and_column(root: DataRoot) -> None:
    rows = rows_of(good_row(finest(root)))
    del rows["dwell_hours"]
    write_raw(root, rows)
    with pytest.raises(IngestError, match=r"part-0.parquet: missing required column.*dwell_hours"):
        ingest_source(root, LOCATION_HISTORY, DAY)


def test_wrong_type_names_the_column(root: DataRoot) -> None:
    rows = rows_of(good_row(finest(root)))
    rows["dwell_hours"] = ["two hours"]
    write_raw(root, rows)
    with pytest.raises(IngestError, match="dwell_hours.*expected a number"):
        ingest_source(root, LOCATION_HISTORY, DAY)


def test_rows_dated_outside_the_partition_are_quarantined(root: DataRoot) -> None:
    rows = rows_of(good_row(finest(root), user="a"), good_row(finest(root), user="b"))
    rows["date"] = [DAY, date(2020, 1, 8)]
    write_raw(root, rows)
    ingest_source(root, LOCATION_HISTORY, DAY)
    quarantine = pq.read_table(root.quarantine_partition("location_history", DAY)
                               / "rows.parquet").to_pandas()
    assert quarantine["reason"].tolist() == ["date outside the partition"]


def test_rerun_after_correction_clears_the_quarantine(root: DataRoot) -> None:
    r = finest(root)
    write_raw(root, rows_of(good_row(r), good_row("nowhere")), schema=SCHEMA)
    ingest_source(root, LOCATION_HISTORY, DAY)
    qfile = root.quarantine_partition("location_history", DAY) / "rows.parquet"
    assert qfile.exists()
    write_raw(root, rows_of(good_row(r)), schema=SCHEMA)
    ingest_source(root, LOCATION_HISTORY, DAY)
    assert not qfile.exists()


def test_an_engine_error_reaches_the_log_with_quoted_values_redacted() -> None:
    """A conversion error quotes the raw value; task logs are visible to every UI user."""
    import duckdb

    from dp_ops.steps.ingest import redacted

    with pytest.raises(duckdb.Error) as err:
        duckdb.sql("SELECT CAST('user-8841' AS INTEGER)").fetchall()
    text = redacted(err.value)
    assert "user-8841" not in text and "'<redacted>'" in text
    assert text.startswith("ConversionException: ") and "\n" not in text
    assert len(redacted(ValueError("x" * 1000))) < 330
