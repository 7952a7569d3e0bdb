"""Contribution bounding for the mobility report, run by DuckDB over Parquet.

The SQL lives in ``include/sql/mobility_bound_contributions.sql`` (per-user bounded
contributions) and ``include/sql/mobility_aggregate_cells.sql`` (sum per cell). The
bounds it enforces per user-day and level are what the noise step's sensitivities
assume; ``tests/unit/test_bounding.py`` checks them with property tests.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from dp_ops.config import PLACE_CATEGORIES, MobilityConfig
from dp_ops.ingest import LOCATION_SOURCE, IngestError
from dp_ops.paths import DataRoot
from dp_ops.results import StepResult
from dp_ops.sql import render_sql
from dp_ops.storage import atomic_copy_to_parquet


def bounding_params(cfg: MobilityConfig, day: date) -> dict[str, object]:
    return {
        "day": day.isoformat(),
        "salt": cfg.bounding_salt,
        "max_pairs": cfg.max_place_pairs,
        "workplace_min_hours": cfg.workplace_min_hours,
        "grid_per_hour": cfg.residential_grid_per_hour,
        "levels": list(cfg.levels),
        "place_categories": list(PLACE_CATEGORIES),
    }


def register_ancestors(con: duckdb.DuckDBPyConnection, ancestors: pd.DataFrame) -> None:
    table = pa.table({
        "finest_region_id": pa.array(ancestors["finest_region_id"].astype(str), pa.string()),
        "level": pa.array(ancestors["level"].astype("int64"), pa.int64()),
        "region_id": pa.array(ancestors["region_id"].astype(str), pa.string()),
    })
    con.register("ancestors", table)


def bounded_contributions_sql(stays: str) -> str:
    """The per-user bounding query over the relation ``stays`` (an identifier/expression)."""
    return render_sql("mobility_bound_contributions", stays=stays)


def cell_aggregates_sql(stays: str) -> str:
    """True per-cell sums of bounded contributions over ``stays``."""
    inner = bounded_contributions_sql(stays)
    return render_sql("mobility_aggregate_cells", contributions=f"({inner})")


def bound_day(root: DataRoot, cfg: MobilityConfig, day: date) -> StepResult:
    """Bound one day's clean stays and write the true cell sums (private) for noising."""
    from dp_ops.geography import ancestors, read_regions

    clean = root.clean_partition(LOCATION_SOURCE, day) / "part.parquet"
    if not clean.is_file():
        raise IngestError(f"no clean stays for {day} at {clean}: run the ingest step first")
    target: Path = root.bounded_file("mobility", day)
    con = duckdb.connect()
    try:
        register_ancestors(con, ancestors(read_regions(root.regions_csv)))
        stays = "read_parquet($clean_file, hive_partitioning=false)"
        params = bounding_params(cfg, day) | {"clean_file": str(clean)}
        atomic_copy_to_parquet(con, cell_aggregates_sql(stays), target, params)
    finally:
        con.close()
    return StepResult(f"bounded contributions for {day}; private cell sums in {target}",
                      (str(target),))
