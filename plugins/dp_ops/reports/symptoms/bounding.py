"""Contribution bounding for the Search Trends Symptoms dataset, run by DuckDB.

The SQL lives in ``include/sql/symptoms/bound_contributions.sql`` (per-user bounded
contributions; its header states the bounds) and ``include/sql/aggregate_cells.sql``
(sum per cell). Per user-day and level: one region, once in B, at most once per symptom
and in at most ``max_symptoms_per_day`` symptoms.
``tests/unit/reports/symptoms/test_symptoms_bounding.py`` checks those bounds with property tests.
"""

from __future__ import annotations

from datetime import date

from dp_ops.api import BoundingSql
from dp_ops.engine.base import aggregate_sql
from dp_ops.engine.sql import render_sql
from dp_ops.reports.symptoms.config import SYMPTOM_CELL_PREFIX, VOLUME_CELL, SymptomsConfig


def bounding_params(cfg: SymptomsConfig, day: date) -> dict[str, object]:
    return {
        "day": day.isoformat(),
        "salt": cfg.bounding_salt,
        "max_symptoms": cfg.max_symptoms_per_day,
        "levels": list(cfg.levels),
        "symptom_prefix": SYMPTOM_CELL_PREFIX,
        "volume_cell": VOLUME_CELL,
    }


def bounded_contributions_sql(searches: str) -> str:
    """The per-user bounding query over the relation ``searches``."""
    return render_sql("symptoms/bound_contributions", searches=searches)


def cell_aggregates_sql(searches: str) -> str:
    return aggregate_sql(bounded_contributions_sql(searches))


BOUNDING = BoundingSql(bounded_contributions_sql)
