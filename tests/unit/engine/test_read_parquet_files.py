"""Reading many small Parquet files as one table (``dp_ops.engine.files.read_parquet_files``,
how a release gate reads its per-day files)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dp_ops.engine.files import read_parquet_files


def _day(directory: Path, day: str, rows: int, **columns: pa.Array) -> Path:
    path = directory / f"date={day}" / "rows.parquet"  # a Hive-style directory name
    path.parent.mkdir(parents=True)
    frame = pd.DataFrame({"region_id": [f"R{i}" for i in range(rows)], "date": day,
                          "value": pd.array(range(rows), dtype="Int64")})
    table = pa.Table.from_pandas(frame, preserve_index=False)
    for name, array in columns.items():
        table = table.set_column(table.schema.get_field_index(name), name, array)
    pq.write_table(table, path)
    return path


def test_rows_in_file_order_with_the_files_types(tmp_path: Path) -> None:
    paths = [_day(tmp_path, f"2020-03-0{d}", rows=d) for d in (3, 1, 2)]
    expected = pd.concat([pq.read_table(p).to_pandas() for p in paths], ignore_index=True)
    got = read_parquet_files(paths).to_pandas()
    pd.testing.assert_frame_equal(got, expected)  # nullable Int64 kept, no "date" from the path
    assert list(got["date"]) == ["2020-03-03"] * 3 + ["2020-03-01"] + ["2020-03-02"] * 2


def test_files_of_other_types_are_unified_one_by_one(tmp_path: Path) -> None:
    first = _day(tmp_path, "2020-03-01", rows=2)
    odd = _day(tmp_path, "2020-03-02", rows=2,
               value=pa.array([0.5, 1.5], pa.float64()))  # not castable to the last file's
    last = _day(tmp_path, "2020-03-03", rows=2)
    table = read_parquet_files([first, odd, last])
    assert table.schema.field("value").type == pa.float64()  # promoted, nothing truncated
    assert table.column("value").to_pylist() == [0, 1, 0.5, 1.5, 0, 1]


def test_no_files_is_an_error() -> None:
    with pytest.raises(ValueError, match="no Parquet files"):
        read_parquet_files([])
