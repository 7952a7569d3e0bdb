"""The symptoms dataset's configuration: one typed, frozen object, validated when built.

Errors name the field and the bad value. Epsilons are per user-day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

from dp_ops.api import BudgetedConfig, MetricBudget, check
from dp_ops.privacy.plan import EPSILON_TOO_LARGE, MAX_EPSILON_PER_SENSITIVITY
from dp_ops.reports.symptoms.spec import SPEC

# The report's name in paths, the ledger and the DAGs.
REPORT: str = SPEC.name

SYMPTOM_METRIC = "symptom_searches"   # A: users searching a symptom (ledger metric group)
VOLUME_METRIC = "search_users"        # B: users with any search (ledger metric group)
VOLUME_CELL = "users_with_any_search"  # the noised cell name of B
SYMPTOM_CELL_PREFIX = "symptom:"      # A cells are named "symptom:<Name>", as the columns


def group_cells(symptoms: list[str]) -> dict[str, tuple[str, ...]]:
    """The cells each ledger metric group noises per region and level: A one cell per
    symptom of the public list (each noised with epsilon_A / k, sensitivity 1; a user-day
    touches at most k of them), B one cell. Every cell of the public domain (region table
    x symptom list) is noised, zeros included."""
    return {SYMPTOM_METRIC: tuple(SYMPTOM_CELL_PREFIX + s for s in symptoms),
            VOLUME_METRIC: (VOLUME_CELL,)}


@dataclass(frozen=True)
class SymptomsConfig(BudgetedConfig):
    """Parameters of the Search Trends Symptoms dataset (docs/design.md, Symptoms dataset).

    Budget: ``total_epsilon`` per user-day is split evenly over the levels and, within a
    level, ``volume_share`` of it goes to B (users with any search, sensitivity 1) and the
    rest to A (users per symptom). A user-day counts in at most
    ``max_symptoms_per_day`` symptom cells of a level, once each, so A's cells get
    ``epsilon_A / max_symptoms_per_day`` each (L1 sensitivity of the A vector is k).
    B needs less budget than A: it is a count of every searcher, far larger than any
    symptom count, so its relative noise is already small.
    """

    total_epsilon: float = 1.68
    volume_share: float = 0.2
    max_symptoms_per_day: int = 3
    first_public_date: date = date(2020, 1, 1)
    # Reliability rule: the true ratio lies within +/- tolerance of A/B with at least
    # this probability (docs/design.md, Symptoms dataset); the rule inverts a test at
    # level reliability_test_level <= 1 - reliability_probability
    # (dp_ops.reports.symptoms.reliability explains the 0.45); the same level bounds the
    # expected share of published values outside the tolerance, per day or week and level
    # (dp_ops.reports.symptoms.selection).
    reliability_tolerance: float = 0.25
    reliability_probability: float = 0.5
    reliability_test_level: float = 0.45
    # A series is daily-unreliable when more than this share of its daily values fail.
    daily_unreliable_share: float = 0.5
    # Regions voting on each region's resolution: the region and its nearest neighbours
    # of the same level by noisy volume B (the rolling majority of docs/design.md,
    # Symptoms dataset).
    granularity_neighbours: int = 20
    scale_to: float = 100.0
    bounding_salt: str = "symptoms-v1"

    def __post_init__(self) -> None:
        super().__post_init__()
        check(isinstance(self.total_epsilon, (int, float)) and math.isfinite(self.total_epsilon)
               and self.total_epsilon > 0, "total_epsilon", self.total_epsilon,
               "must be a finite number > 0")
        # every cell's epsilon is at most the total and its sensitivity at least 1
        check(self.total_epsilon <= MAX_EPSILON_PER_SENSITIVITY, "total_epsilon",
               self.total_epsilon, EPSILON_TOO_LARGE)
        check(0 < self.volume_share < 1, "volume_share", self.volume_share,
               "must be in (0, 1): both A and B need budget")
        check(isinstance(self.max_symptoms_per_day, int) and self.max_symptoms_per_day >= 1,
               "max_symptoms_per_day", self.max_symptoms_per_day, "must be an integer >= 1")
        check(0 < self.reliability_tolerance < 1, "reliability_tolerance",
               self.reliability_tolerance, "must be in (0, 1)")
        check(0 < self.reliability_probability < 1, "reliability_probability",
               self.reliability_probability, "must be in (0, 1)")
        check(0 < self.reliability_test_level <= 1 - self.reliability_probability,
               "reliability_test_level", self.reliability_test_level,
               f"must be in (0, 1 - reliability_probability = "
               f"{1 - self.reliability_probability:g}]: a looser test breaks the promise")
        check(0 < self.daily_unreliable_share < 1, "daily_unreliable_share",
               self.daily_unreliable_share, "must be in (0, 1)")
        check(isinstance(self.granularity_neighbours, int) and self.granularity_neighbours >= 0,
               "granularity_neighbours", self.granularity_neighbours,
               "must be an integer >= 0")
        check(self.scale_to > 0, "scale_to", self.scale_to, "must be > 0")

    # -- derived -------------------------------------------------------------------
    @property
    def level_epsilon(self) -> float:
        return self.total_epsilon / len(self.levels)

    @property
    def volume_epsilon(self) -> float:
        """B's epsilon per level (one cell per user-day and level, sensitivity 1)."""
        return self.level_epsilon * self.volume_share

    @property
    def symptom_epsilon(self) -> float:
        """A's epsilon per level, over all symptom cells a user-day can touch; taken as
        the remainder so that A + B is exactly the level's share."""
        return self.level_epsilon - self.volume_epsilon

    @property
    def metric_budgets(self) -> tuple[MetricBudget, ...]:
        k = self.max_symptoms_per_day
        return (
            MetricBudget(SYMPTOM_METRIC, self.symptom_epsilon / k, 1, k),
            MetricBudget(VOLUME_METRIC, self.volume_epsilon, 1),
        )


def load_symptoms_config() -> SymptomsConfig:
    """Defaults, overridden by the JSON file named in ``DP_SYMPTOMS_CONFIG`` if set."""
    return SymptomsConfig.load("DP_SYMPTOMS_CONFIG")
