"""Whether the files of a release agree with each other, as ``verify-release`` checks them:
an edit of one copy of a value (the CSV, not its Parquet; a data file, not its
intervals) is found even when every checksum was recomputed to match.

- ``X.csv`` and its twin ``X.parquet``: the same columns, rows and values (numbers equal
  as the CSV writer formats them: shortest repr, so parsing gives the value back);
- a CSV without a twin (a per-country extract): each of its lines is a line of the CSV
  with the same header that has a twin;
- ``X_intervals.parquet`` and ``X.parquet``: the same rows and keys, every interval holds
  its published value, and a withheld value has an empty interval. Two layouts: wide
  (``<column>_low`` and ``<column>_high`` beside the data's keys, row for row) and long
  (one row per published value: the keys, a name column ``N`` whose values name the
  data's ``N:<name>`` columns, ``value``, ``low``, ``high``).

Names are release-relative paths that already matched their checksums.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

_INTERVALS = "_intervals"
# a value equal to its CSV text, or its interval bound, up to float rounding
_TOLERANCE = 1e-9


def _csv_table(path: Path) -> pa.Table:
    from pyarrow import csv as pacsv

    with open(path, newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh), [])
    return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
        column_types=dict.fromkeys(header, pa.string()), strings_can_be_null=False,
        quoted_strings_can_be_null=False))


def _is_numeric(column: pa.ChunkedArray) -> bool:
    return bool(pa.types.is_integer(column.type) or pa.types.is_floating(column.type))


def _numbers(column: pa.ChunkedArray) -> np.ndarray:
    """A numeric or textual column as float64, null or empty text as NaN."""
    if _is_numeric(column):
        return np.asarray(column.cast(pa.float64()).to_numpy(zero_copy_only=False),
                          dtype=np.float64)
    texts = column.to_pylist()
    return np.array([float(t) if t not in (None, "") else np.nan for t in texts],
                    dtype=np.float64)


def _same_numbers(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise: both missing, or equal up to float rounding."""
    both_nan = np.isnan(a) & np.isnan(b)
    with np.errstate(invalid="ignore"):
        close = np.abs(a - b) <= _TOLERANCE * np.maximum(1.0, np.abs(b))
    same: np.ndarray = both_nan | close
    return same


def _texts(column: pa.ChunkedArray) -> list[str]:
    return ["" if v is None else str(v) for v in column.to_pylist()]


def csv_twin_problems(csv_path: Path, parquet_path: Path, name: str) -> list[str]:
    """How the CSV ``name`` differs from its Parquet twin (empty: it does not)."""
    text, table = _csv_table(csv_path), pq.read_table(parquet_path)
    if text.column_names != table.column_names:
        return [f"{name}: its columns are not those of its Parquet twin"]
    if text.num_rows != table.num_rows:
        return [f"{name}: {text.num_rows} rows, its Parquet twin has {table.num_rows}"]
    for column in table.column_names:
        written, typed = text.column(column), table.column(column)
        if _is_numeric(typed):
            try:
                same = _same_numbers(_numbers(written), _numbers(typed))
            except ValueError:
                return [f"{name}: column {column[:60]!r} holds text where its Parquet twin "
                        "has numbers"]
        else:
            same = np.array(_texts(written)) == np.array(_texts(typed))
        if not same.all():
            line = int(np.flatnonzero(~same)[0]) + 2
            return [f"{name}: line {line}, column {column[:60]!r} differs from its Parquet "
                    "twin (one of the two was edited)"]
    return []


def _intervals_problems(data: pa.Table, intervals: pa.Table, name: str) -> list[str]:
    columns = intervals.column_names
    if {"value", "low", "high"} <= set(columns):
        return _long_problems(data, intervals, name)
    bounded = [c[:-4] for c in columns if c.endswith("_low") and f"{c[:-4]}_high" in columns]
    keys = [c for c in columns if not c.endswith(("_low", "_high"))]
    if not bounded or any(c not in data.column_names for c in bounded + keys):
        return [f"{name}: its columns do not match its data file's"]
    if intervals.num_rows != data.num_rows:
        return [f"{name}: {intervals.num_rows} rows, its data file has {data.num_rows}"]
    for key in keys:
        if _texts(intervals.column(key)) != _texts(data.column(key)):
            return [f"{name}: column {key[:60]!r} is not its data file's, row for row"]
    for column in bounded:
        value = _numbers(data.column(column))
        low = _numbers(intervals.column(f"{column}_low"))
        high = _numbers(intervals.column(f"{column}_high"))
        withheld = np.isnan(value)
        with np.errstate(invalid="ignore"):
            bad = np.where(withheld, ~(np.isnan(low) & np.isnan(high)),
                           ~((low <= value + _TOLERANCE) & (value <= high + _TOLERANCE)))
        if bad.any():
            row = int(np.flatnonzero(bad)[0]) + 1
            return [f"{name}: row {row}, {column[:60]!r}: the interval does not hold the "
                    "published value (or a withheld value has an interval)"]
    return []


def _long_problems(data: pa.Table, intervals: pa.Table, name: str) -> list[str]:
    extra = [c for c in intervals.column_names
             if c not in data.column_names and c not in ("value", "low", "high")]
    if len(extra) != 1:
        return [f"{name}: its columns do not match its data file's"]
    label = extra[0]
    keys = [c for c in intervals.column_names if c not in (label, "value", "low", "high")]
    if any(k not in data.column_names for k in keys):
        return [f"{name}: its key columns are not its data file's"]
    prefix = f"{label}:"
    published: dict[tuple[str, ...], float] = {}
    data_keys = list(zip(*(_texts(data.column(k)) for k in keys), strict=True))
    for column in data.column_names:
        if not column.startswith(prefix):
            continue
        values = _numbers(data.column(column))
        for row in np.flatnonzero(~np.isnan(values)).tolist():
            published[(*data_keys[row], column[len(prefix):])] = float(values[row])
    labelled = list(zip(*(_texts(intervals.column(k)) for k in [*keys, label]),
                        strict=True))
    value, low = _numbers(intervals.column("value")), _numbers(intervals.column("low"))
    high = _numbers(intervals.column("high"))
    if len(labelled) != len(published) or len(set(labelled)) != len(labelled):
        return [f"{name}: {len(labelled)} intervals for {len(published)} published values"]
    for i, cell in enumerate(labelled):
        want = published.get(cell)
        if want is None or not _same_numbers(np.array([value[i]]), np.array([want]))[0]:
            return [f"{name}: row {i + 1} is not a published value of its data file"]
        if not (low[i] <= want + _TOLERANCE and want <= high[i] + _TOLERANCE):
            return [f"{name}: row {i + 1}: the interval does not hold the published value"]
    return []


def consistency_problems(root: Path, names: list[str]) -> list[str]:
    """Every disagreement between the files ``names`` of the release in ``root``."""
    listed = set(names)
    problems: list[str] = []
    twinned: dict[str, set[str]] = {}  # a twinned CSV's header line: its lines
    loose: list[str] = []
    for name in sorted(listed):
        if not name.endswith(".csv"):
            continue
        twin = name.removesuffix(".csv") + ".parquet"
        if twin in listed:
            problems += csv_twin_problems(root / name, root / twin, name)
            lines = (root / name).read_text(encoding="utf-8").splitlines()
            if lines:
                twinned.setdefault(lines[0], set()).update(lines[1:])
        else:
            loose.append(name)
    for name in loose:
        lines = (root / name).read_text(encoding="utf-8").splitlines()
        whole = twinned.get(lines[0]) if lines else None
        if whole is None:
            continue  # a CSV of its own kind: its column schema is all there is to check
        stray = next((i for i, line in enumerate(lines[1:], start=2) if line not in whole),
                     None)
        if stray is not None:
            problems.append(f"{name}: line {stray} is in no file with its header that has a "
                            "Parquet twin (it was edited)")
    for name in sorted(listed):
        stem = name.removesuffix(".parquet")
        if name.endswith(".parquet") and stem.endswith(_INTERVALS):
            data = stem.removesuffix(_INTERVALS) + ".parquet"
            if data not in listed:
                problems.append(f"{name}: its data file {data} is not in the release")
                continue
            problems += _intervals_problems(pq.read_table(root / data),
                                            pq.read_table(root / name), name)
    return problems
