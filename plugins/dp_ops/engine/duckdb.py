"""The embedded engine: DuckDB over the day's clean Parquet rows, in one process.

Memory is capped (``DP_DUCKDB_MEMORY_LIMIT``, spilling under ``work/tmp``), and a big day
is bounded in user parts of about ``DP_DUCKDB_ROWS_PER_PART`` rows, one after the other:
bounding is per user, so the parts' cell sums add up to the whole day's exactly.
"""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.engine.base import BoundingSql, shard_relation
from dp_ops.engine.files import atomic_copy_to_parquet, make_dirs
from dp_ops.engine.sql import render_sql
from dp_ops.errors import RegionTableError
from dp_ops.layout import DataRoot
from dp_ops.settings import ExecutionSettings

# mobility_cell_sums.sql packs three levels' region numbers into one BIGINT, 21 bits each
# (all ones marks "no region at that level").
MAX_REGIONS = 2**21 - 1


def register_ancestors(con: duckdb.DuckDBPyConnection, ancestors: pd.DataFrame) -> None:
    """The public region tree as the view ``ancestors`` (finest region -> its region at
    every level) that the bounding SQL joins to, each region also numbered
    (``region_idx``, its rank among the sorted region ids)."""
    names = pd.Index(sorted(set(ancestors["region_id"].astype(str))))
    if len(names) >= MAX_REGIONS:
        raise RegionTableError(
            f"the region table has {len(names):,} regions: the DuckDB bounding query packs "
            f"region numbers in 21 bits, so at most {MAX_REGIONS - 1:,} (split the country "
            "into several region tables, or run DP_ENGINE=spark)")
    table = pa.table({
        "finest_region_id": pa.array(ancestors["finest_region_id"].astype(str), pa.string()),
        "level": pa.array(ancestors["level"].astype("int64"), pa.int64()),
        "region_id": pa.array(ancestors["region_id"].astype(str), pa.string()),
        "region_idx": pa.array(names.get_indexer(ancestors["region_id"].astype(str)),
                               pa.int32()),
    })
    con.register("ancestors", table)


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


class DuckDBEngine:
    """:class:`dp_ops.engine.base.Engine` on an embedded DuckDB."""

    name = "duckdb"

    def __init__(self, settings: ExecutionSettings) -> None:
        self.settings = settings

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
