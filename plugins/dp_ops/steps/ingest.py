"""Ingestion: validate one day's raw partition, split it into clean rows and quarantine.

Input contract (docs/design.md). File-level problems fail the task with a message naming the
file: a missing partition, a partition with no Parquet file or with a non-Parquet file, a
file that cannot be read (zero bytes, truncated, corrupt footer or data page, not
Parquet), a missing, unexpected or repeated column, a column of the wrong type. A file
with no rows is valid and adds nothing. Row-level problems send the row to
``quarantine/<source>/date=D/rows.parquet`` with its reason, file and row number; such
rows never reach an aggregate. Every input row lands in exactly one of the two outputs, so
nothing is lost. ``tests/data/bad/`` holds a corpus of bad inputs with the outcome of each.

A file may carry an optional ``date`` column (a date, a naive timestamp or ISO text): its
rows must fall on the partition's day (a null or unparsable date is outside it). Rows of a
file without the column take the partition's day. Location history rows repeated exactly
are kept once (the copies are quarantined as duplicates of a clean row); repeated searches
are kept, as a second search of the same thing.

Logs and summaries name paths and reasons, never rows, ids or counts of people.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.contract import ALL_STAY_CATEGORIES, LOCATION_SOURCE, SEARCH_SOURCE
from dp_ops.engine.duckdb import duckdb_connection
from dp_ops.engine.files import atomic_copy_to_parquet, write_json_atomic
from dp_ops.engine.sql import render_sql
from dp_ops.errors import IngestError
from dp_ops.layout import DataRoot
from dp_ops.settings import execution_settings
from dp_ops.steps.result import StepResult

MAX_ID_LENGTH = 256


@dataclass(frozen=True)
class SourceSchema:
    name: str
    string_columns: tuple[str, ...]
    numeric_columns: tuple[str, ...]
    optional_columns: tuple[str, ...] = ("date",)
    nullable_string_columns: tuple[str, ...] = ()

    @property
    def required(self) -> tuple[str, ...]:
        return self.string_columns + self.numeric_columns


LOCATION_SCHEMA = SourceSchema(
    name=LOCATION_SOURCE,
    string_columns=("user_id", "region_id", "place_id", "place_category"),
    numeric_columns=("dwell_hours",),
)
SEARCH_SCHEMA = SourceSchema(
    name=SEARCH_SOURCE,
    string_columns=("user_id", "region_id", "symptom"),
    numeric_columns=(),
)


def _is_string(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return _is_string(t.value_type)
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t))


def _is_numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t))


def _is_date(t: pa.DataType) -> bool:
    # a zoned timestamp's day depends on the reader's time zone, so it is refused
    return (pa.types.is_date(t) or (pa.types.is_timestamp(t) and t.tz is None)
            or _is_string(t))


def check_file_schema(path: Path, schema: SourceSchema) -> bool:
    """Raise :class:`IngestError` naming ``path`` unless its columns match ``schema``.

    Returns whether the optional ``date`` column is present.
    """
    try:
        file_schema = pq.read_schema(path)
        # reading the footer is not enough to catch a truncated body
        pq.ParquetFile(path).metadata  # noqa: B018
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise IngestError(f"cannot read Parquet file {path}: {redacted(exc)}") from exc
    names = file_schema.names
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise IngestError(f"{path}: repeated column(s) {repeated}")
    missing = [c for c in schema.required if c not in names]
    if missing:
        raise IngestError(f"{path}: missing required column(s) {missing}; "
                          f"expected {list(schema.required)}")
    extra = [c for c in names if c not in schema.required + schema.optional_columns]
    if extra:
        raise IngestError(f"{path}: unexpected column(s) {extra}; "
                          f"expected {list(schema.required)} (optional: "
                          f"{list(schema.optional_columns)})")
    for col in schema.string_columns:
        t = file_schema.field(col).type
        if not _is_string(t):
            raise IngestError(f"{path}: column {col!r} has type {t}, expected string")
    for col in schema.numeric_columns:
        t = file_schema.field(col).type
        if not _is_numeric(t):
            raise IngestError(f"{path}: column {col!r} has type {t}, expected a number")
    if "date" in names and not _is_date(file_schema.field("date").type):
        raise IngestError(f"{path}: column 'date' has type {file_schema.field('date').type}, "
                          "expected a date, a timestamp without time zone or ISO text")
    return "date" in names


def partition_files(root: DataRoot, source: str, day: date) -> list[Path]:
    part = root.raw_partition(source, day)
    if not part.is_dir():
        raise IngestError(f"missing raw partition {part}: a missing partition is an error, "
                          "not an empty day (write the partition, or exclude the date)")
    files = sorted(p for p in part.iterdir() if p.is_file() and not p.name.startswith("."))
    parquet = [p for p in files if p.suffix == ".parquet"]
    strays = [p.name for p in files if p.suffix != ".parquet"]
    if strays:
        raise IngestError(f"raw partition {part} holds non-Parquet file(s) {strays}")
    if not parquet:
        raise IngestError(f"raw partition {part} holds no Parquet file")
    return parquet


def _lookup_tables(con: duckdb.DuckDBPyConnection, tables: dict[str, tuple[str, Iterable[str]]]
                   ) -> None:
    """Register one-column lookup tables: name -> (column, values)."""
    for name, (column, values) in tables.items():
        con.register(name, pa.table({column: pa.array(sorted(set(values)), pa.string())}))


@dataclass(frozen=True)
class _Ingestion:
    """What differs between the sources: schema, SQL, lookups and the clean columns."""

    schema: SourceSchema
    sql: str
    clean_columns: tuple[str, ...]
    label: str


def _ingest(root: DataRoot, day: date, spec: _Ingestion,
            lookups: dict[str, tuple[str, Iterable[str]]]) -> StepResult:
    source_name = spec.schema.name
    files = partition_files(root, source_name, day)
    dated = {f: check_file_schema(f, spec.schema) for f in files}
    # capped at DP_DUCKDB_MEMORY_LIMIT and spilling under work/tmp, like the bounding: a
    # big day's judged rows do not fit in memory
    con = duckdb_connection(root, execution_settings(), keep_row_order=True)
    try:
        _lookup_tables(con, lookups)
        query, params = _judging_query(spec.sql, day, dated)
        try:
            con.execute(f"CREATE TEMP TABLE judged AS {query}", params)
        except duckdb.Error as exc:
            raise _unreadable(con, spec.sql, day, dated,
                              root.raw_partition(source_name, day), exc) from exc
        clean = root.clean_partition(source_name, day) / "part.parquet"
        quarantine = root.quarantine_partition(source_name, day) / "rows.parquet"
        atomic_copy_to_parquet(
            con, f"SELECT {', '.join(spec.clean_columns)} FROM judged WHERE reason IS NULL",
            clean)
        reasons = [r for (r,) in con.execute(
            "SELECT DISTINCT reason FROM judged WHERE reason IS NOT NULL ORDER BY 1").fetchall()]
        counts = dict(con.execute("SELECT coalesce(reason, 'clean'), count(*) FROM judged "
                                  "GROUP BY 1").fetchall())
        if reasons:
            atomic_copy_to_parquet(
                con, "SELECT * FROM judged WHERE reason IS NOT NULL "
                     "ORDER BY source_file, source_row", quarantine)
        elif quarantine.exists():
            quarantine.unlink()  # a corrected partition leaves no stale quarantine
    finally:
        con.close()
    # Row counts stay in the private work area; the summary names reasons and paths only.
    write_json_atomic(clean.parent / "ingest_report.json",
                      {"date": day.isoformat(), "files": [str(f) for f in dated],
                       "rows_by_outcome": counts})
    if reasons:
        return StepResult(f"ingested {spec.label} for {day}: clean rows in {clean.parent}; "
                          f"rows quarantined for: {', '.join(reasons)} (see {quarantine})",
                          (str(clean),))
    return StepResult(f"ingested {spec.label} for {day}: clean rows in {clean.parent}",
                      (str(clean),))


def _judging_query(sql: str, day: date, dated: dict[Path, bool]
                   ) -> tuple[str, dict[str, object]]:
    """The judging query of ``sql`` over ``dated`` (each file mapped to whether it has a
    ``date`` column), and its bind parameters."""
    # hive_partitioning=false: the path's date=... must not overwrite a date column
    source = ("read_parquet($files, filename=true, file_row_number=true, "
              "hive_partitioning=false, union_by_name=true)")
    has_date = any(dated.values())
    params: dict[str, object] = {"files": [str(f) for f in dated], "day": day.isoformat(),
                                 "max_id_length": MAX_ID_LENGTH}
    if has_date:
        # rows of a file without the column take the partition's day
        params["dated_files"] = [str(f) for f, d in dated.items() if d]
    return render_sql(sql, source=source, has_date=has_date), params


def _unreadable(con: duckdb.DuckDBPyConnection, sql: str, day: date,
                dated: dict[Path, bool], part: Path, exc: duckdb.Error) -> IngestError:
    """The error for a partition DuckDB could not read, naming the file at fault.

    The footers were fine (``check_file_schema``), so a data page is corrupt: the query is
    rerun file by file (only on this failure path) to find which."""
    for f, has_date in dated.items():
        query, params = _judging_query(sql, day, {f: has_date})
        try:
            con.execute(f"CREATE OR REPLACE TEMP TABLE probe AS {query}", params)
        except duckdb.Error as file_exc:
            return IngestError(f"cannot read Parquet file {f}: {redacted(file_exc)}")
        finally:
            con.execute("DROP TABLE IF EXISTS probe")
    return IngestError(f"cannot read raw partition {part} (files "
                       f"{[f.name for f in dated]}): {redacted(exc)}")


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def redacted(exc: BaseException, limit: int = 300) -> str:
    """An engine's error text fit for a task log: its type and message with every quoted
    string replaced (a conversion error may quote a raw value) and cut to ``limit``."""
    text = _QUOTED.sub("'<redacted>'", str(exc)).replace("\n", " ")
    text = text if len(text) <= limit else text[:limit] + "..."
    return f"{type(exc).__name__}: {text}"


def _finest_regions(root: DataRoot) -> set[str]:
    from dp_ops.regions import read_regions

    regions = read_regions(root.regions_csv)
    return set(regions["region_id"]) - set(regions["parent_id"])


def ingest_location_history(root: DataRoot, day: date) -> StepResult:
    """Validate ``raw/location_history/date=day`` into clean rows and quarantine."""
    spec = _Ingestion(LOCATION_SCHEMA, "ingest_location_history",
                      ("user_id", "region_id", "place_id", "place_category", "dwell_hours"),
                      "location history")
    return _ingest(root, day, spec, {
        "finest_regions": ("region_id", _finest_regions(root)),
        "stay_categories": ("category", ALL_STAY_CATEGORIES),
    })


def read_symptoms(path: Path) -> list[str]:
    """The public symptom list, one name a line, in output column order. Raises naming
    the file and line for an empty name, a duplicate, or a missing file."""
    if not path.is_file():
        raise IngestError(f"symptom list {path} not found (run `python -m dp_ops generate` "
                          "or copy the list there)")
    names: list[str] = []
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8").rstrip("\n")  # trailing newlines are fine
    for number, line in enumerate(text.splitlines(), start=1):
        name = line.strip()
        if not name:
            raise IngestError(f"{path}, line {number}: empty symptom name")
        if name in seen:
            raise IngestError(f"{path}, line {number}: symptom {name!r} repeats line "
                              f"{seen[name]}")
        seen[name] = number
        names.append(name)
    if not names:
        raise IngestError(f"symptom list {path} is empty")
    return names


def ingest_search_activity(root: DataRoot, day: date) -> StepResult:
    """Validate ``raw/search_activity/date=day`` into clean rows and quarantine.

    Repeated identical rows are kept: without a timestamp a second identical row is a
    second search of the same thing, which is normal, and bounding counts a user once
    per symptom anyway.
    """
    spec = _Ingestion(SEARCH_SCHEMA, "ingest_search_activity",
                      ("user_id", "region_id", "symptom"), "search activity")
    return _ingest(root, day, spec, {
        "finest_regions": ("region_id", _finest_regions(root)),
        "symptom_names": ("symptom", read_symptoms(root.symptoms_txt)),
    })
