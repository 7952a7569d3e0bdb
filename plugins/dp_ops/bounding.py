"""Shared plumbing of contribution bounding: DuckDB over one day's clean Parquet rows.

Each report has its own per-user bounding query (``include/sql/<report>_bound_
contributions.sql``); both are summed per cell by ``include/sql/aggregate_cells.sql``.
The output is true and private: only the noise step reads it.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from datetime import date
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.execution import ExecutionSettings, load_execution_settings
from dp_ops.ingest import IngestError
from dp_ops.paths import DataRoot
from dp_ops.results import StepResult
from dp_ops.sql import render_sql
from dp_ops.storage import atomic_copy_to_parquet


def register_ancestors(con: duckdb.DuckDBPyConnection, ancestors: pd.DataFrame) -> None:
    table = pa.table({
        "finest_region_id": pa.array(ancestors["finest_region_id"].astype(str), pa.string()),
        "level": pa.array(ancestors["level"].astype("int64"), pa.int64()),
        "region_id": pa.array(ancestors["region_id"].astype(str), pa.string()),
    })
    con.register("ancestors", table)


def aggregate_sql(contributions_sql: str) -> str:
    """True per-cell sums of the bounded contributions of ``contributions_sql``."""
    return render_sql("aggregate_cells", contributions=f"({contributions_sql})")


def shard_file(root: DataRoot, report: str, day: date, shard: int, shards: int) -> Path:
    """Private partial cell sums of one user shard (summed by :func:`combine_shards`)."""
    return root.bounded_file(report, day).parent / f"shard-{shard:05d}-of-{shards:05d}.parquet"


def duckdb_connection(root: DataRoot, settings: ExecutionSettings) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection capped at the configured memory, spilling under ``work/tmp``."""
    spill = root.root / "work" / "tmp"
    spill.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute("SET memory_limit = $limit", {"limit": settings.duckdb_memory_limit})
    con.execute("SET temp_directory = $dir", {"dir": str(spill)})
    con.execute("SET preserve_insertion_order = false")
    # DuckDB 2.0 rewrites "row_number() OVER (PARTITION BY user ...) <= k" into a grouped
    # top-N aggregate. On the earlier mobility query (every user ranked) that took 56 s
    # instead of 9 s at 1M stays and ran out of memory at 4M; the symptoms query keeps the
    # pattern (same speed either way on 1.1M searches of the demo's shape), so keep the
    # plain window where the shape is less kind. Results are the same either way.
    con.execute("SET disabled_optimizers = 'top_n_window_elimination'")
    if settings.duckdb_threads is not None:
        con.execute(f"SET threads = {int(settings.duckdb_threads)}")
    return con


def _shard_rows(relation: str, params: dict[str, object], settings: ExecutionSettings,
                shard: int | None, dialect: str) -> tuple[str, dict[str, object]]:
    """``relation`` restricted to one user shard (unchanged when unsharded)."""
    if shard is None:
        return relation, params
    rows = "(" + render_sql("shard_stays", rows=relation, dialect=dialect) + ")"
    return rows, params | {"shards": settings.bounding_shards, "shard": shard}


def _bound_to(root: DataRoot, clean: Path, target: Path, anc: pd.DataFrame,
              contributions_sql: Callable[[str], str], params: dict[str, object],
              settings: ExecutionSettings, shard: int | None) -> None:
    if settings.engine == "spark":
        # The same SQL over a Spark view of the clean file (shard_stays.sql parses hex in
        # Spark's dialect); spark_engine turns the $name parameters into Spark's :name.
        from dp_ops.spark_engine import CLEAN_VIEW, copy_query_to_parquet

        relation, params = _shard_rows(CLEAN_VIEW, params, settings, shard, "spark")
        copy_query_to_parquet(settings, aggregate_sql(contributions_sql(relation)), params,
                              anc, target, clean_file=clean)
        return
    relation, params = _shard_rows("read_parquet($clean_file, hive_partitioning=false)",
                                   params | {"clean_file": str(clean)}, settings, shard,
                                   "duckdb")
    parts = duckdb_parts(clean, settings)
    con = duckdb_connection(root, settings)
    try:
        register_ancestors(con, anc)
        if parts == 1:
            atomic_copy_to_parquet(con, aggregate_sql(contributions_sql(relation)), target,
                                   params)
            return
        # A big day is bounded in user parts, one after the other, so that DuckDB's memory
        # (and spilling) is that of one part: bounding is per user, so the parts' cell sums
        # add up to the whole day's exactly, whatever the split.
        partials = [target.parent / f".part-{k:04d}-of-{parts:04d}-{uuid.uuid4().hex}.parquet"
                    for k in range(parts)]
        try:
            for k, partial in enumerate(partials):
                part = (f"(SELECT * FROM {relation} AS r "
                        f"WHERE hash(r.user_id) % {parts} = {k})")
                atomic_copy_to_parquet(con, aggregate_sql(contributions_sql(part)), partial,
                                       params)
            atomic_copy_to_parquet(con, _sum_partials_sql(), target,
                                   {"parts": [str(x) for x in partials]})
        finally:
            for partial in partials:
                partial.unlink(missing_ok=True)
    finally:
        con.close()


def duckdb_parts(clean: Path, settings: ExecutionSettings) -> int:
    """How many user parts DuckDB bounds a day in: one per ``duckdb_rows_per_part`` input
    rows (from the Parquet footer, no scan)."""
    rows = pq.ParquetFile(clean).metadata.num_rows
    return max(1, math.ceil(rows / settings.duckdb_rows_per_part))


def _sum_partials_sql() -> str:
    return render_sql("aggregate_cells", contributions=(
        "(SELECT level, region_id, metric, value "
        "FROM read_parquet($parts, hive_partitioning=false))"))


def combine_shards(root: DataRoot, report: str, day: date, shards: int) -> Path:
    """Sum the partial cell sums of all ``shards`` into the day's bounded aggregates file.

    Refuses if a shard is missing: a missing shard would silently undercount its users."""
    parts = [shard_file(root, report, day, k, shards) for k in range(shards)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise IngestError(f"bounding of {report} for {day} is incomplete: {len(missing)} of "
                          f"{shards} shard file(s) missing ({', '.join(missing[:3])}"
                          f"{', ...' if len(missing) > 3 else ''}) under {parts[0].parent}; "
                          "rerun the bound_contributions task(s) of that day")
    target = root.bounded_file(report, day)
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        atomic_copy_to_parquet(con, _sum_partials_sql(), target,
                               {"parts": [str(p) for p in parts]})
    finally:
        con.close()
    return target


def bound_clean_day(root: DataRoot, report: str, source: str, day: date,
                    contributions_sql: Callable[[str], str],
                    params: dict[str, object], *, shard: int | None = None,
                    settings: ExecutionSettings | None = None) -> StepResult:
    """Bound one day's clean rows of ``source`` and write the true cell sums (private).

    Unsharded (``bounding_shards`` = 1) it writes the day's aggregates file. Sharded, a
    given ``shard`` writes that shard's partial sums (one mapped Airflow task each; the
    noise step combines them); ``shard=None`` runs every shard here, then combines."""
    settings = settings or load_execution_settings()
    shards = settings.bounding_shards
    clean = root.clean_partition(source, day) / "part.parquet"
    if not clean.is_file():
        raise IngestError(f"no clean {source} rows for {day} at {clean}: run the ingest "
                          "step first")
    if shard is not None and not 0 <= shard < shards:
        raise ValueError(f"shard={shard!r}: expected 0..{shards - 1} "
                         f"(bounding_shards={shards})")
    from dp_ops.geography import ancestors, read_regions

    anc = ancestors(read_regions(root.regions_csv))  # public: the region tree
    engine = settings.engine
    if shards == 1:
        target: Path = root.bounded_file(report, day)
        _bound_to(root, clean, target, anc, contributions_sql, params, settings, None)
        return StepResult(f"bounded contributions for {day} ({engine}); private cell sums "
                          f"in {target}", (str(target),))
    todo = range(shards) if shard is None else [shard]
    written = []
    for k in todo:
        part = shard_file(root, report, day, k, shards)
        _bound_to(root, clean, part, anc, contributions_sql, params, settings, k)
        written.append(str(part))
    if shard is None:
        target = combine_shards(root, report, day, shards)
        return StepResult(f"bounded contributions for {day} in {shards} shards ({engine}); "
                          f"private cell sums in {target}", (*written, str(target)))
    return StepResult(f"bounded shard {shard} of {shards} for {day} ({engine}); private "
                      f"partial sums in {written[0]}", tuple(written))
