"""The fixed list of DAG tags.

Tags are how people filter the Airflow UI, so they come from this list only (the DAG
integrity test enforces it) instead of being invented per DAG. Add a member here, with a
reason, before using a new tag.
"""

from __future__ import annotations

from enum import StrEnum


class Tag(StrEnum):
    """Every tag a DAG of this project may carry."""

    # Which public dataset the DAG produces.
    MOBILITY = "mobility"
    SYMPTOMS = "symptoms"
    # How the DAG runs.
    DAILY = "daily"
    ON_CALL = "on-call"
    # What it touches: every DAG that draws noise spends privacy budget.
    SPENDS_BUDGET = "spends-privacy-budget"
    PUBLISHES = "publishes-release"
    # An example for downstream teams, scheduled on a release asset (never spends).
    CONSUMER = "example-consumer"


ALLOWED_TAGS: frozenset[str] = frozenset(tag.value for tag in Tag)


def tags(*members: Tag) -> list[str]:
    """Plain strings for ``@dag(tags=...)`` (Airflow stores and shows tags as strings)."""
    return [Tag(m).value for m in members]
