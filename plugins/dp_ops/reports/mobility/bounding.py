"""Contribution bounding for the mobility report, run by DuckDB over Parquet.

The SQL lives in ``include/sql/mobility_bound_contributions.sql`` (per-user bounded
contributions) and ``include/sql/aggregate_cells.sql`` (sum per cell). The
bounds it enforces per user-day and level are what the noise step's sensitivities
assume; ``tests/unit/steps/test_bound.py`` checks them with property tests.
"""

from __future__ import annotations

from datetime import date

from dp_ops.contract import LOCATION_SOURCE, PLACE_CATEGORIES
from dp_ops.engine.base import aggregate_sql
from dp_ops.engine.sql import render_sql
from dp_ops.layout import DataRoot
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.steps.bound import bound_clean_day
from dp_ops.steps.result import StepResult

__all__ = ["bound_day", "bounded_contributions_sql", "bounding_params", "cell_aggregates_sql"]


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
    return render_sql("mobility_bound_contributions", stays=stays)


def cell_aggregates_sql(stays: str) -> str:
    """True per-cell sums of bounded contributions over ``stays``."""
    return aggregate_sql(bounded_contributions_sql(stays))


def bound_day(root: DataRoot, cfg: MobilityConfig, day: date, *,
              shard: int | None = None) -> StepResult:
    """Bound one day's clean stays and write the true cell sums (private) for noising."""
    return bound_clean_day(root, "mobility", LOCATION_SOURCE, day, bounded_contributions_sql,
                           bounding_params(cfg, day), shard=shard)
