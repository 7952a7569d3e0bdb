"""Ingest on Spark: read a raw file's column types and judge a day's raw rows, with the
work done where the SparkSession runs (in a local JVM, on a cluster, or on a Spark
Connect server); the calling process reads no raw row.

The judging query is the one DuckDB runs (``include/sql/<source>/ingest.sql``, Spark
spellings from :func:`dp_ops.engine.base.ingest_dialect`), over a view of the day's files
that has the columns DuckDB's ``read_parquet(..., filename=true, file_row_number=true)``
gives: each file is read on its own, with Spark's ``_metadata.row_index`` (the row's
0-based position in its file) as ``file_row_number``, and the files are stacked by column
name. ``filename`` is the file's rank among the day's files (zero-padded text, so it sorts
as the paths do: ``partition_files`` lists them sorted), not its path: a path on every row
would be most of what the query shuffles. The quarantine gets the paths back from a small
table of the files (:func:`quarantined`). A file without a ``date`` column gets an empty
one: the query gives its rows the partition's day, as on DuckDB. So both engines
quarantine the same rows for the same reasons and keep the same clean rows (the bad-input
corpus runs on both).

Privacy: nothing here collects, logs or shows a row; the only values brought back are
the number of rows of each outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from dp_ops.engine.base import (
    ColumnType,
    Judging,
    ingest_dialect,
    redacted,
    repeated,
    unreadable,
)
from dp_ops.errors import IngestError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RAW_VIEW = "raw_rows"
FILES_VIEW = "raw_files"
JUDGED_VIEW = "judged_rows"

# Spark's names of the types a raw file may have, as Arrow (and so the DuckDB engine's
# errors) names them, and the kinds of input column each may stand for.
_ALL = frozenset({"string", "number", "date"})
_SPARK_TYPES: dict[str, tuple[str, frozenset[str]]] = {
    "void": ("null", _ALL),
    "string": ("string", frozenset({"string", "date"})),
    "tinyint": ("int8", frozenset({"number"})),
    "smallint": ("int16", frozenset({"number"})),
    "int": ("int32", frozenset({"number"})),
    "bigint": ("int64", frozenset({"number"})),
    "float": ("float", frozenset({"number"})),
    "double": ("double", frozenset({"number"})),
    "date": ("date32[day]", frozenset({"date"})),
    "timestamp_ntz": ("timestamp without time zone", frozenset({"date"})),
    # a zoned timestamp's day depends on the reader's time zone, so it is no date
    "timestamp": ("timestamp with time zone", frozenset()),
    "boolean": ("bool", frozenset()),
    "binary": ("binary", frozenset()),
}


def spark_column_type(simple_string: str) -> ColumnType:
    """How the ingest step judges a Spark column type (``DataType.simpleString()``)."""
    name, kinds = _SPARK_TYPES.get(simple_string, (simple_string, frozenset()))
    return ColumnType(name, kinds)


def _condition(exc: BaseException) -> str | None:
    """Spark's error condition (``COLUMN_ALREADY_EXISTS``...), if the error has one."""
    for getter in ("getCondition", "getErrorClass"):
        method = getattr(exc, getter, None)
        if method is not None:
            try:
                value = method()
            except Exception:  # noqa: BLE001  (a Py4J error without a condition)
                return None
            return str(value) if value else None
    return None


def _parameters(exc: BaseException) -> dict[str, str]:
    method = getattr(exc, "getMessageParameters", None)
    try:
        return dict(method()) if method is not None else {}
    except Exception:  # noqa: BLE001
        return {}


def file_columns(spark: SparkSession, uri: str, path: Path) -> list[tuple[str, ColumnType]]:
    """The columns of the raw file ``path`` (read at ``uri``) from its footer, read by
    Spark. Spark skips files whose name starts with ``_`` (and ``.``), even named
    explicitly: such a file is refused rather than silently left out."""
    if path.name.startswith(("_", ".")):
        raise IngestError(f"{path}: the Spark engine does not read a file whose name starts "
                          "with '_' or '.'; rename it")
    if path.stat().st_size == 0:  # stat only: the file is not opened here
        raise IngestError(f"cannot read Parquet file {path}: the file is 0 bytes")
    try:
        schema = spark.read.parquet(uri).schema
    except Exception as exc:  # noqa: BLE001  (Py4J, Spark Connect and analysis errors)
        if _condition(exc) == "COLUMN_ALREADY_EXISTS":
            name = _parameters(exc).get("columnName", "").strip("`")
            raise repeated(path, [name]) from exc
        raise unreadable(path, exc) from exc
    return [(f.name, spark_column_type(f.dataType.simpleString())) for f in schema.fields]


def file_labels(job: Judging) -> dict[Path, str]:
    """Each raw file's label: its rank among the day's files, zero-padded."""
    return {f: f"{k:06d}" for k, f in enumerate(job.files)}


def _file_rows(spark: SparkSession, uri: str, label: str, has_date: bool,
               columns: tuple[str, ...]) -> DataFrame:
    """One raw file's rows, with the columns of DuckDB's ``read_parquet`` (see the module
    docstring)."""
    from pyspark.sql import functions as F  # noqa: N812  (Spark's usual name)

    date = "CAST(`date` AS STRING)" if has_date else "CAST(NULL AS STRING)"
    return spark.read.parquet(uri).select(
        *[F.col(f"`{c}`") for c in columns], F.expr(date).alias("date"),
        F.lit(label).alias("filename"),
        F.col("_metadata.row_index").alias("file_row_number"))


def register_raw(spark: SparkSession, job: Judging, uri: Callable[[Path], str],
                 files: dict[Path, bool] | None = None) -> None:
    """The view ``raw_rows`` over ``files`` (default all of ``job``'s), stacked by name,
    and the view ``raw_files`` (label, path) of all of them."""
    files = dict(job.files) if files is None else files
    labels = file_labels(job)
    frames = [_file_rows(spark, uri(f), labels[f], dated, job.clean_columns)
              for f, dated in files.items()]
    stacked = frames[0]
    for frame in frames[1:]:
        stacked = stacked.unionByName(frame)
    stacked.createOrReplaceTempView(RAW_VIEW)
    spark.createDataFrame(pa.table({
        "label": pa.array(list(labels.values()), pa.string()),
        "path": pa.array([str(f) for f in labels], pa.string()),
    })).createOrReplaceTempView(FILES_VIEW)


def judging_params(job: Judging, files: dict[Path, bool] | None = None) -> dict[str, object]:
    """The judging query's parameters, the dated files named by their labels."""
    return job.params(files, name=file_labels(job).__getitem__)


def quarantined(spark: SparkSession, judged: DataFrame) -> DataFrame:
    """The quarantined rows of ``judged``, in DuckDB's columns and order: each row's file
    path back in ``source_file``, sorted by file and row."""
    judged.createOrReplaceTempView(JUDGED_VIEW)
    select = ", ".join("f.path AS source_file" if c == "source_file" else f"j.`{c}`"
                       for c in judged.columns)
    return spark.sql(f"SELECT {select} FROM {JUDGED_VIEW} AS j "
                     f"JOIN {FILES_VIEW} AS f ON f.label = j.source_file "
                     "WHERE j.reason IS NOT NULL ORDER BY j.source_file, j.source_row")


def register_lookups(spark: SparkSession, job: Judging) -> None:
    """The public one-column lookup tables, as Arrow tables (no Python workers; works over
    Spark Connect too)."""
    for name, table in job.lookup_tables().items():
        spark.createDataFrame(table).createOrReplaceTempView(name)


def judging_sql(job: Judging, files: dict[Path, bool] | None = None) -> str:
    files = dict(job.files) if files is None else files
    return job.sql(source=RAW_VIEW, has_date=any(files.values()),
                      **ingest_dialect("spark"))


def outcome_counts(judged: DataFrame) -> dict[str, int]:
    """The number of judged rows per reason (``clean`` for the clean rows)."""
    rows = judged.selectExpr("coalesce(reason, 'clean') AS outcome").groupBy(
        "outcome").count().collect()
    return {str(r["outcome"]): int(r["count"]) for r in rows}


def unreadable_file(spark: SparkSession, job: Judging, uri: Callable[[Path], str],
                    translate: Callable[[str, dict[str, object]],
                                        tuple[str, dict[str, object]]],
                    exc: BaseException) -> IngestError:
    """The error for a day Spark could not judge, naming the file at fault: the query is
    rerun file by file (only on this failure path) to find which."""
    for f, has_date in job.files.items():
        one = {f: has_date}
        try:
            register_raw(spark, job, uri, one)
            sql, args = translate(judging_sql(job, one), judging_params(job, one))
            spark.sql(sql, args=args).selectExpr("count(*)").collect()
        except Exception as file_exc:  # noqa: BLE001
            return unreadable(f, file_exc)
    return IngestError(f"cannot read raw partition {job.partition} (files "
                       f"{[f.name for f in job.files]}): {redacted(exc)}")
