"""Shared plumbing of contribution bounding: DuckDB over one day's clean Parquet rows.

Each report has its own per-user bounding query (``include/sql/<report>_bound_
contributions.sql``); both are summed per cell by ``include/sql/aggregate_cells.sql``.
The output is true and private: only the noise step reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

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


def bound_clean_day(root: DataRoot, report: str, source: str, day: date,
                    contributions_sql: Callable[[str], str],
                    params: dict[str, object]) -> StepResult:
    """Bound one day's clean rows of ``source`` and write the true cell sums (private)."""
    from dp_ops.geography import ancestors, read_regions

    clean = root.clean_partition(source, day) / "part.parquet"
    if not clean.is_file():
        raise IngestError(f"no clean {source} rows for {day} at {clean}: run the ingest "
                          "step first")
    target: Path = root.bounded_file(report, day)
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        register_ancestors(con, ancestors(read_regions(root.regions_csv)))
        relation = "read_parquet($clean_file, hive_partitioning=false)"
        atomic_copy_to_parquet(con, aggregate_sql(contributions_sql(relation)), target,
                               params | {"clean_file": str(clean)})
    finally:
        con.close()
    return StepResult(f"bounded contributions for {day}; private cell sums in {target}",
                      (str(target),))
