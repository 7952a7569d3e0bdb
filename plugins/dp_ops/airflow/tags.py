"""The fixed list of DAG tags.

Tags are how people filter the Airflow UI, so they come from this list only (the DAG
integrity test enforces it) instead of being invented per DAG: which report a DAG
produces (each installed report's name, from its spec), then these fixed tags. Add a
member here, with a reason, before using a new tag.
"""

from __future__ import annotations

from enum import StrEnum

from dp_ops.reports.spec import report_names, report_spec


class Tag(StrEnum):
    """Every tag a DAG of this project may carry."""

    # How the DAG runs.
    DAILY = "daily"
    ON_CALL = "on-call"
    # What it touches: every DAG that draws noise spends privacy budget.
    SPENDS_BUDGET = "spends-privacy-budget"
    PUBLISHES = "publishes-release"
    # An example for downstream teams, scheduled on a release asset (never spends).
    CONSUMER = "example-consumer"


def allowed_tags() -> frozenset[str]:
    """Every installed report's name and the fixed tags."""
    return frozenset(report_names()) | frozenset(tag.value for tag in Tag)


def tags(report: str, *members: Tag) -> list[str]:
    """Plain strings for ``@dag(tags=...)`` (Airflow stores and shows tags as strings):
    the report the DAG produces (an unknown one is a ``ValueError``), then ``members``."""
    return [report_spec(report).name, *(Tag(m).value for m in members)]
