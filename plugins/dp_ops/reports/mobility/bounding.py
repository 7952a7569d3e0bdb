"""Contribution bounding for the mobility report, run by DuckDB (or Spark) over Parquet.

The SQL lives in ``include/sql/mobility/bound_contributions.sql`` (per-user bounded
contributions; the statement of the bounds, which every engine can run),
``include/sql/mobility/cell_sums.sql`` (the same cell sums computed directly, faster, run by
DuckDB) and ``include/sql/mobility/cell_sums_spark.sql`` (its counterpart run by Spark),
each summed per cell by ``include/sql/aggregate_cells.sql``. The bounds
enforced per user-day and level are what the noise step's sensitivities assume;
``tests/unit/steps/test_bound.py`` checks them with property tests, and that both queries
give the same cell sums.
"""

from __future__ import annotations

from datetime import date

from dp_ops.api import BoundingSql
from dp_ops.contract import LEVELS
from dp_ops.engine.base import aggregate_sql
from dp_ops.engine.sql import render_sql
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.sources.location_history import PLACE_CATEGORIES

__all__ = ["BOUNDING", "bounded_contributions_sql", "bounding_params",
           "cell_aggregates_sql", "cell_sums_sql", "portable_cell_aggregates_sql",
           "spark_cell_sums_sql"]


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


def bounded_contributions_sql(stays: str) -> str:
    """The per-user bounding query over the relation ``stays`` (an identifier/expression)."""
    return render_sql("mobility/bound_contributions", stays=stays)


def cell_sums_sql(stays: str) -> str:
    """Rows whose per-cell sums are the bounded cell sums over ``stays`` (DuckDB only)."""
    return render_sql("mobility/cell_sums", stays=stays, levels=LEVELS)


def spark_cell_sums_sql(stays: str) -> str:
    """The same rows' sums in Spark's dialect (Spark only): ``mobility/cell_sums_spark.sql``,
    keyed by integers and shuffled once by user, as Spark runs fastest."""
    return render_sql("mobility/cell_sums_spark", stays=stays, levels=LEVELS)


BOUNDING = BoundingSql(bounded_contributions_sql, cell_sums_by_dialect={
    "duckdb": cell_sums_sql, "spark": spark_cell_sums_sql})


def cell_aggregates_sql(stays: str) -> str:
    """True per-cell sums of bounded contributions over ``stays``, as DuckDB computes them
    in the pipeline."""
    return BOUNDING.cell_sums(stays, "duckdb")


def portable_cell_aggregates_sql(stays: str) -> str:
    """The same sums from the per-user query (the statement of the bounds, which every
    engine can run)."""
    return aggregate_sql(bounded_contributions_sql(stays))
