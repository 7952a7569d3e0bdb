"""The embedded engine: DuckDB over a day's raw or clean Parquet rows, in one process.

Ingest reads each raw file's footer with pyarrow and judges the day's rows in one query
(results keep the input's row order). Memory is capped (``DP_DUCKDB_MEMORY_LIMIT``,
spilling under ``work/tmp``), and a big day is bounded in user parts of about
``DP_DUCKDB_ROWS_PER_PART`` rows, one after the other: bounding is per user, so the
parts' cell sums add up to the whole day's exactly.
"""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.engine.base import (
    BoundingSql,
    ColumnType,
    Judging,
    ancestors_table,
    ingest_dialect,
    redacted,
    shard_relation,
    unreadable,
)
from dp_ops.engine.files import atomic_copy_to_parquet, make_dirs
from dp_ops.engine.sql import render_sql
from dp_ops.errors import IngestError
from dp_ops.layout import DataRoot
from dp_ops.settings import ExecutionSettings


def register_ancestors(con: duckdb.DuckDBPyConnection, ancestors: pd.DataFrame) -> None:
    """The public region tree as the view ``ancestors`` (finest region -> its region at
    every level) that the bounding SQL joins to, each region also numbered
    (``region_idx``): :func:`dp_ops.engine.base.ancestors_table`, as Spark registers it."""
    con.register("ancestors", ancestors_table(ancestors))


def duckdb_connection(root: DataRoot, settings: ExecutionSettings, *,
                      keep_row_order: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection capped at the configured memory, spilling under ``work/tmp``
    (``keep_row_order``: results keep their input's row order, as ingest's clean file
    does; the bounding does not need it and is faster without)."""
    spill = root.root / "work" / "tmp"
    make_dirs(spill)  # private (0700): the spill files hold raw rows
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute("SET memory_limit = $limit", {"limit": settings.duckdb_memory_limit})
    con.execute("SET temp_directory = $dir", {"dir": str(spill)})
    con.execute(f"SET preserve_insertion_order = {'true' if keep_row_order else 'false'}")
    # DuckDB 2.0 rewrites "row_number() OVER (PARTITION BY user ...) <= k" into a grouped
    # top-N aggregate. On a query that ranks every user that was several times slower and
    # ran out of memory at a few million stays; the symptoms query keeps the pattern
    # (no faster either way on the demo's shape), so keep the plain window where the
    # shape is less kind. Results are the same either way.
    con.execute("SET disabled_optimizers = 'top_n_window_elimination'")
    if settings.duckdb_threads is not None:
        con.execute(f"SET threads = {int(settings.duckdb_threads)}")
    return con


def duckdb_parts(clean: Path, settings: ExecutionSettings) -> int:
    """How many user parts DuckDB bounds a day in: one per ``duckdb_rows_per_part`` input
    rows (from the Parquet footer, no scan)."""
    rows: int = pq.ParquetFile(clean).metadata.num_rows
    return max(1, math.ceil(rows / settings.duckdb_rows_per_part))


def sum_partials_sql() -> str:
    return render_sql("aggregate_cells", contributions=(
        "(SELECT level, region_id, metric, value "
        "FROM read_parquet($parts, hive_partitioning=false))"))


def sum_partials(partials: list[Path], target: Path) -> None:
    """Add up partial cell sums (user shards or parts) into ``target``, atomically."""
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        atomic_copy_to_parquet(con, sum_partials_sql(), target,
                               {"parts": [str(p) for p in partials]})
    finally:
        con.close()


# -- ingest ----------------------------------------------------------------------------

def arrow_column_type(t: pa.DataType) -> ColumnType:
    """How the ingest step judges an Arrow column type."""
    if pa.types.is_dictionary(t):
        return ColumnType(str(t), arrow_column_type(t.value_type).kinds)
    if pa.types.is_null(t):
        return ColumnType(str(t), frozenset({"string", "number", "date"}))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ColumnType(str(t), frozenset({"string", "date"}))
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return ColumnType(str(t), frozenset({"number"}))
    # a zoned timestamp's day depends on the reader's time zone, so it is no date
    if pa.types.is_date(t) or (pa.types.is_timestamp(t) and t.tz is None):
        return ColumnType(str(t), frozenset({"date"}))
    return ColumnType(str(t), frozenset())


def judging_query(job: Judging, files: dict[Path, bool] | None = None
                  ) -> tuple[str, dict[str, object]]:
    """``job``'s judging query over ``files`` (default all) in DuckDB, and its parameters."""
    files = dict(job.files) if files is None else files
    # hive_partitioning=false: the path's date=... must not overwrite a date column
    source = ("read_parquet($files, filename=true, file_row_number=true, "
              "hive_partitioning=false, union_by_name=true)")
    params = job.params(files) | {"files": [str(f) for f in files]}
    return job.sql(source=source, has_date=any(files.values()),
                      **ingest_dialect("duckdb")), params


class DuckDBEngine:
    """:class:`dp_ops.engine.base.Engine` on an embedded DuckDB."""

    name = "duckdb"

    def __init__(self, settings: ExecutionSettings) -> None:
        self.settings = settings

    def file_columns(self, path: Path) -> list[tuple[str, ColumnType]]:
        try:
            schema = pq.read_schema(path)
            # reading the footer is not enough to catch a truncated body
            pq.ParquetFile(path).metadata  # noqa: B018
        except Exception as exc:  # pyarrow raises several types for corrupt files
            raise unreadable(path, exc) from exc
        return [(f.name, arrow_column_type(f.type)) for f in schema]

    def judge_to_parquet(self, root: DataRoot, job: Judging) -> dict[str, int]:
        # capped at DP_DUCKDB_MEMORY_LIMIT and spilling under work/tmp, like the
        # bounding: a big day's judged rows do not fit in memory
        con = duckdb_connection(root, self.settings, keep_row_order=True)
        try:
            for name, table in job.lookup_tables().items():
                con.register(name, table)
            query, params = judging_query(job)
            try:
                con.execute(f"CREATE TEMP TABLE judged AS {query}", params)
            except duckdb.Error as exc:
                raise _unreadable(con, job, exc) from exc
            atomic_copy_to_parquet(
                con, f"SELECT {', '.join(job.clean_columns)} FROM judged WHERE reason IS NULL",
                job.clean)
            counts = dict(con.execute("SELECT coalesce(reason, 'clean'), count(*) FROM judged "
                                      "GROUP BY 1").fetchall())
            if set(counts) - {"clean"}:
                atomic_copy_to_parquet(
                    con, "SELECT * FROM judged WHERE reason IS NOT NULL "
                         "ORDER BY source_file, source_row", job.quarantine)
            else:
                job.quarantine.unlink(missing_ok=True)  # no stale quarantine stays
            return counts
        finally:
            con.close()

    def bound_to_parquet(self, root: DataRoot, clean: Path, target: Path,
                         ancestors: pd.DataFrame, bounding: BoundingSql,
                         params: dict[str, object], shard: int | None) -> None:
        settings = self.settings
        relation, params = shard_relation(
            "read_parquet($clean_file, hive_partitioning=false)",
            params | {"clean_file": str(clean)}, settings, shard, "duckdb")
        parts = duckdb_parts(clean, settings)
        con = duckdb_connection(root, settings)
        try:
            register_ancestors(con, ancestors)
            if parts == 1:
                atomic_copy_to_parquet(con, bounding.cell_sums(relation, self.name),
                                       target, params)
                return
            # A big day is bounded in user parts, one after the other, so that DuckDB's
            # memory (and spilling) is that of one part: bounding is per user, so the
            # parts' cell sums add up to the whole day's exactly, whatever the split.
            partials = [target.parent / f".part-{k:04d}-of-{parts:04d}-{uuid.uuid4().hex}"
                        ".parquet" for k in range(parts)]
            try:
                for k, partial in enumerate(partials):
                    part = (f"(SELECT * FROM {relation} AS r "
                            f"WHERE hash(r.user_id) % {parts} = {k})")
                    atomic_copy_to_parquet(con, bounding.cell_sums(part, self.name),
                                           partial, params)
                atomic_copy_to_parquet(con, sum_partials_sql(), target,
                                       {"parts": [str(x) for x in partials]})
            finally:
                for partial in partials:
                    partial.unlink(missing_ok=True)
        finally:
            con.close()


def _unreadable(con: duckdb.DuckDBPyConnection, job: Judging, exc: duckdb.Error
                ) -> IngestError:
    """The error for a partition DuckDB could not read, naming the file at fault.

    The footers were fine (``file_columns``), so a data page is corrupt: the query is
    rerun file by file (only on this failure path) to find which."""
    for f, has_date in job.files.items():
        query, params = judging_query(job, {f: has_date})
        try:
            con.execute(f"CREATE OR REPLACE TEMP TABLE probe AS {query}", params)
        except duckdb.Error as file_exc:
            return unreadable(f, file_exc)
        finally:
            con.execute("DROP TABLE IF EXISTS probe")
    return IngestError(f"cannot read raw partition {job.partition} (files "
                       f"{[f.name for f in job.files]}): {redacted(exc)}")
