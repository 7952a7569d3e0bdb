"""The location history: one row per stay of a user at a place, the mobility reports'
input (``raw/location_history/date=D/*.parquet``; docs/design.md, Input contract).

Its columns: ``user_id``, ``region_id`` (a finest region), ``place_id``,
``place_category`` (one of :data:`ALL_STAY_CATEGORIES`) and ``dwell_hours``. Rows repeated
exactly are kept once (the copies are quarantined as duplicates of a clean row).
"""

from __future__ import annotations

from functools import partial

from dp_ops.engine.sql import render_sql
from dp_ops.sources.spec import FINEST_REGIONS, Lookup, SourceSchema, SourceSpec

# Source categories of the place stays ...
PLACE_CATEGORIES: tuple[str, ...] = (
    "retail",
    "recreation",
    "eateries",
    "groceries",
    "pharmacies",
    "transit",
    "parks",
)
# ... and every category a stay may carry.
ALL_STAY_CATEGORIES: tuple[str, ...] = PLACE_CATEGORIES + ("residential", "workplace")

NAME = "location_history"
SOURCE = SourceSpec(
    name=NAME,
    label="location history",
    schema=SourceSchema(string_columns=("user_id", "region_id", "place_id", "place_category"),
                        numeric_columns=("dwell_hours",)),
    judging_sql=partial(render_sql, "location_history/ingest"),
    lookups=(FINEST_REGIONS,
             Lookup("stay_categories", "category", lambda root: ALL_STAY_CATEGORIES)),
)
