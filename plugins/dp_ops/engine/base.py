"""The engine contract: what the bounding step asks of whatever runs its SQL.

An engine runs one report's bounding query (``include/sql/<report>_bound_contributions.sql``
summed per cell by ``include/sql/aggregate_cells.sql``) over one day's clean Parquet rows
and writes the true cell sums, atomically, as one Parquet file. The steps never name an
engine: :func:`dp_ops.engine.registry.engine_for` picks it from the execution settings
(``DP_ENGINE``).

Both engines run the same SQL text and give identical cell sums for the same input and
bounding salt (``tests/integration/test_spark_engine.py``). The rows read and the sums
written are private: an engine logs, prints and returns neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pandas as pd

from dp_ops.engine.sql import render_sql
from dp_ops.layout import DataRoot
from dp_ops.settings import ExecutionSettings

# A report's bounding query over a relation of clean rows (a view name or a subquery).
ContributionsSql = Callable[[str], str]


@dataclass(frozen=True)
class BoundingSql:
    """A report's bounding queries over a relation of clean rows.

    ``contributions`` is the per-user query (``<report>_bound_contributions.sql``): it
    states the bounds, runs on every engine, and its rows summed per cell are the truth.
    ``duckdb_cell_sums``, when a report has one, gives rows with exactly the same sums per
    cell, faster, in DuckDB's dialect only (mobility: ``mobility_cell_sums.sql``); tests
    hold it equal to ``contributions``."""

    contributions: ContributionsSql
    duckdb_cell_sums: ContributionsSql | None = None

    def cell_sums(self, relation: str, engine: str) -> str:
        """The true per-cell sums over ``relation`` in the SQL the ``engine`` runs best."""
        if engine == "duckdb" and self.duckdb_cell_sums is not None:
            return aggregate_sql(self.duckdb_cell_sums(relation))
        return aggregate_sql(self.contributions(relation))


class Engine(Protocol):
    """Runs the bounding SQL of one day (or one user shard of it) into a Parquet file."""

    name: str

    def bound_to_parquet(self, root: DataRoot, clean: Path, target: Path,
                         ancestors: pd.DataFrame, bounding: BoundingSql,
                         params: dict[str, object], shard: int | None) -> None:
        """Write the true cell sums of the bounded contributions of ``clean`` (restricted
        to user ``shard`` when given) to ``target``, atomically."""
        ...


def aggregate_sql(contributions_sql: str) -> str:
    """True per-cell sums of the bounded contributions of ``contributions_sql``."""
    return render_sql("aggregate_cells", contributions=f"({contributions_sql})")


def shard_relation(relation: str, params: dict[str, object], settings: ExecutionSettings,
                   shard: int | None, dialect: str) -> tuple[str, dict[str, object]]:
    """``relation`` restricted to one user shard (unchanged when unsharded), in the SQL
    ``dialect`` of the engine (``shard_stays.sql`` parses hex differently in each)."""
    if shard is None:
        return relation, params
    rows = "(" + render_sql("shard_stays", rows=relation, dialect=dialect) + ")"
    return rows, params | {"shards": settings.bounding_shards, "shard": shard}
