"""The release CSV writer: a wide, sparse table (the symptoms files) is written by the
fast path byte for byte as ``DataFrame.to_csv`` writes it; anything else goes through
``to_csv`` itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dp_ops.steps import release


def _wide(rows: int, columns: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    keys = pd.DataFrame({
        "code": [f"XX-{i % 7}" for i in range(rows)],
        # names a CSV must quote: a comma, a quote, non-ASCII, empty, missing
        "name": [["Plain", "Comma, Place", 'Quote "Q" Town', "Zürich", "", None][i % 6]
                 for i in range(rows)],
        "date": [f"2020-01-{1 + i % 28:02d}" for i in range(rows)],
    })
    values = rng.choice([np.nan] * 20 + [100.0, 0.1, 1e-05, 12.34, 123456.78, 0.0, 7.0],
                        size=(rows, columns))
    more = rng.random(values.shape) < 0.05  # published values: two decimals, up to 150
    values[more] = np.round(rng.random(int(more.sum())) * 150, 2)
    frame = pd.DataFrame(values, columns=[f"symptom:S{i}" for i in range(columns)])
    return pd.concat([keys, frame], axis=1)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_fast_path_writes_what_pandas_writes(tmp_path: Path, seed: int) -> None:
    frame = _wide(300, 60, seed)
    assert release._wide_csv_text(frame) is not None  # the fast path is taken
    release.write_csv(frame, tmp_path / "fast.csv")
    frame.to_csv(tmp_path / "pandas.csv", index=False, na_rep="", lineterminator="\n",
                 encoding="utf-8")
    assert (tmp_path / "fast.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_the_fast_path_on_a_sparse_table_with_empty_rows(tmp_path: Path, seed: int) -> None:
    """As sparse as a year of symptoms (a value in ~1% of cells): rows with no value, rows
    whose only value is in the first or the last column."""
    frame = _wide(400, 80, seed)
    rng = np.random.default_rng(seed)
    values = frame.iloc[:, 3:].to_numpy(copy=True)
    values[rng.random(values.shape) < 0.95] = np.nan
    values[::7] = np.nan  # empty rows
    values[1::11, 1:] = np.nan  # only the first column (or nothing)
    values[2::13, :-1] = np.nan  # only the last column (or nothing)
    values[2::13, -1] = 42.5
    frame.iloc[:, 3:] = values
    assert release._wide_csv_text(frame) is not None
    release.write_csv(frame, tmp_path / "fast.csv")
    frame.to_csv(tmp_path / "pandas.csv", index=False, na_rep="", lineterminator="\n",
                 encoding="utf-8")
    assert (tmp_path / "fast.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()
    all_empty = frame.copy()
    all_empty.iloc[:, 3:] = np.nan
    release.write_csv(all_empty, tmp_path / "empty.csv")
    all_empty.to_csv(tmp_path / "pandas_empty.csv", index=False, na_rep="",
                     lineterminator="\n", encoding="utf-8")
    assert (tmp_path / "empty.csv").read_bytes() == (tmp_path / "pandas_empty.csv").read_bytes()


def test_narrow_empty_or_multiline_tables_go_through_pandas(tmp_path: Path) -> None:
    narrow = _wide(10, 5, 1)
    assert release._wide_csv_text(narrow) is None
    assert release._wide_csv_text(_wide(10, 60, 1).iloc[:0]) is None
    multiline = _wide(10, 60, 1)
    multiline.loc[3, "name"] = "two\nlines"
    assert release._wide_csv_text(multiline) is None
    release.write_csv(multiline, tmp_path / "m.csv")
    back = pd.read_csv(tmp_path / "m.csv", keep_default_na=False)
    assert back.loc[3, "name"] == "two\nlines"
