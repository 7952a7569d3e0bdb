"""One typed, frozen configuration object per report, validated when built.

Errors name the field and the bad value. Epsilons are per user-day (SPEC section 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from datetime import date
from typing import Any

# Source categories of the location history and the published categories built from them.
PLACE_CATEGORIES: tuple[str, ...] = (
    "retail",
    "recreation",
    "eateries",
    "groceries",
    "pharmacies",
    "transit",
    "parks",
)
ALL_STAY_CATEGORIES: tuple[str, ...] = PLACE_CATEGORIES + ("residential", "workplace")

PUBLISHED_CATEGORIES: dict[str, tuple[str, ...]] = {
    "retail_and_recreation": ("retail", "recreation", "eateries"),
    "grocery_and_pharmacy": ("groceries", "pharmacies"),
    "parks": ("parks",),
    "transit_stations": ("transit",),
    "workplaces": ("workplaces",),
    "residential": ("residential",),
}

LEVELS: tuple[int, ...] = (0, 1, 2)
LEVEL_NAMES = {0: "country", 1: "sub_region_1", 2: "sub_region_2"}


class ConfigError(ValueError):
    """A configuration field holds a bad value; the message names field and value."""


def _check(cond: bool, name: str, value: Any, why: str) -> None:
    if not cond:
        raise ConfigError(f"config field {name}={value!r}: {why}")


def _mapping_kwargs(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for config ``cls`` from a plain mapping: unknown keys are errors,
    ISO strings become dates for the date fields, lists become tuples for ``levels``."""
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"config field {key}={value!r}: unknown field")
        if isinstance(known[key].default, date) and isinstance(value, str):
            try:
                value = date.fromisoformat(value)
            except ValueError as exc:
                raise ConfigError(f"config field {key}={value!r}: not a date") from exc
        if key == "levels":
            value = tuple(value)
        kwargs[key] = value
    return kwargs


@dataclass(frozen=True)
class MetricBudget:
    """One ledger metric group: its per-user-day epsilon and per-cell sensitivity.

    ``cell_epsilon`` is the epsilon of each noisy cell of the group and ``sensitivity`` the
    most one user-day can change one cell (in the cell's integer unit). ``contributions``
    is how many cells of the group one user-day can touch, so the group costs
    ``cell_epsilon * contributions`` per user-day and level (basic composition).
    """

    name: str
    cell_epsilon: float
    sensitivity: int
    contributions: int = 1

    @property
    def epsilon(self) -> float:
        return self.cell_epsilon * self.contributions


@dataclass(frozen=True)
class MobilityConfig:
    """Parameters of the Community Mobility Report (SPEC section 4)."""

    place_epsilon: float = 0.44
    max_place_pairs: int = 4
    workplace_epsilon: float = 0.44
    workplace_min_hours: float = 1.0
    residential_sum_epsilon: float = 0.22
    residential_count_epsilon: float = 0.22
    contributors_epsilon: float = 0.22
    # Residential hours go on a grid of minutes so the sum is an integer (SPEC section 2).
    residential_grid_per_hour: int = 60
    min_area_km2: float = 3.0
    min_contributors: int = 100
    baseline_start: date = date(2020, 1, 3)
    baseline_end: date = date(2020, 2, 6)
    first_metric_date: date = date(2020, 1, 1)
    first_public_date: date = date(2020, 2, 15)
    interval_confidence: float = 0.975
    max_error_points: float = 10.0
    method_version: str = "v1"
    method_update_fraction: float = 0.10
    # Headroom in the per-user-day cap: one method update (at method_update_fraction of
    # the normal cost) and one region re-noise (at most the normal cost again).
    cap_renoises: int = 1
    cap_method_updates: int = 1
    cap_override: float | None = None
    bounding_salt: str = "mobility-v1"
    levels: tuple[int, ...] = field(default=LEVELS)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name.endswith("_epsilon"):
                v = getattr(self, f.name)
                _check(isinstance(v, (int, float)) and math.isfinite(v) and v > 0,
                       f.name, v, "must be a finite number > 0")
        _check(isinstance(self.max_place_pairs, int) and self.max_place_pairs >= 1,
               "max_place_pairs", self.max_place_pairs, "must be an integer >= 1")
        _check(0 <= self.workplace_min_hours < 24, "workplace_min_hours",
               self.workplace_min_hours, "must be in [0, 24)")
        _check(self.residential_grid_per_hour >= 1, "residential_grid_per_hour",
               self.residential_grid_per_hour, "must be >= 1")
        _check(self.min_area_km2 >= 0, "min_area_km2", self.min_area_km2, "must be >= 0")
        _check(self.min_contributors >= 0, "min_contributors", self.min_contributors,
               "must be >= 0")
        _check(self.baseline_start <= self.baseline_end, "baseline_end", self.baseline_end,
               f"must not be before baseline_start={self.baseline_start}")
        _check((self.baseline_end - self.baseline_start).days + 1 == 35, "baseline_end",
               self.baseline_end, "the baseline window must be 5 whole weeks (35 days)")
        _check(self.first_metric_date <= self.baseline_start, "first_metric_date",
               self.first_metric_date, "must not be after baseline_start")
        _check(self.first_public_date > self.baseline_end, "first_public_date",
               self.first_public_date, "must be after the baseline window")
        _check(0.5 < self.interval_confidence < 1, "interval_confidence",
               self.interval_confidence, "must be in (0.5, 1)")
        _check(self.max_error_points > 0, "max_error_points", self.max_error_points,
               "must be > 0")
        _check(0 < self.method_update_fraction <= 1, "method_update_fraction",
               self.method_update_fraction, "must be in (0, 1]")
        _check(self.cap_renoises >= 0 and self.cap_method_updates >= 0, "cap_renoises",
               (self.cap_renoises, self.cap_method_updates), "headroom counts must be >= 0")
        _check(tuple(sorted(set(self.levels))) == tuple(self.levels)
               and set(self.levels) <= set(LEVELS), "levels", self.levels,
               "must be a sorted subset of (0, 1, 2)")
        if self.cap_override is not None:
            _check(self.cap_override > 0, "cap_override", self.cap_override, "must be > 0")

    # -- derived -------------------------------------------------------------------
    @property
    def metric_budgets(self) -> tuple[MetricBudget, ...]:
        """The ledger metric groups noised per level and date."""
        res_sensitivity = 12 * self.residential_grid_per_hour
        return (
            MetricBudget("places", self.place_epsilon, 1, self.max_place_pairs),
            MetricBudget("workplaces", self.workplace_epsilon, 1),
            MetricBudget("residential_sum", self.residential_sum_epsilon, res_sensitivity),
            MetricBudget("residential_count", self.residential_count_epsilon, 1),
            MetricBudget("contributors", self.contributors_epsilon, 1),
        )

    def budget(self, name: str) -> MetricBudget:
        for b in self.metric_budgets:
            if b.name == name:
                return b
        raise ConfigError(f"unknown metric group {name!r}")

    @property
    def epsilon_per_level(self) -> float:
        return math.fsum(b.epsilon for b in self.metric_budgets)

    @property
    def run_epsilon(self) -> float:
        """Composed epsilon of one normal daily run per user-day (all levels, metrics)."""
        return self.epsilon_per_level * len(self.levels)

    @property
    def cap(self) -> float:
        """Per-user-day cap: a normal run plus headroom (SPEC section 6)."""
        if self.cap_override is not None:
            return self.cap_override
        return self.run_epsilon * (
            1 + self.cap_renoises + self.cap_method_updates * self.method_update_fraction
        )

    @property
    def baseline_dates(self) -> list[date]:
        from datetime import timedelta

        n = (self.baseline_end - self.baseline_start).days + 1
        return [self.baseline_start + timedelta(days=i) for i in range(n)]

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> MobilityConfig:
        """Build from a plain mapping (e.g. a YAML/JSON file); unknown keys are errors."""
        return cls(**_mapping_kwargs(cls, values))


# -- Search Trends Symptoms dataset ---------------------------------------------------------

SYMPTOM_METRIC = "symptom_searches"   # A: users searching a symptom (ledger metric group)
VOLUME_METRIC = "search_users"        # B: users with any search (ledger metric group)
VOLUME_CELL = "users_with_any_search"  # the noised cell name of B
SYMPTOM_CELL_PREFIX = "symptom:"      # A cells are named "symptom:<Name>", as the columns


@dataclass(frozen=True)
class SymptomsConfig:
    """Parameters of the Search Trends Symptoms dataset (SPEC section 5).

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
    min_area_km2: float = 3.0
    first_public_date: date = date(2020, 1, 1)
    # Reliability rule: the true ratio lies within +/- tolerance of A/B with at least
    # this probability (SPEC section 5).
    reliability_tolerance: float = 0.25
    reliability_probability: float = 0.5
    # A series is daily-unreliable when more than this share of its daily values fail.
    daily_unreliable_share: float = 0.5
    # Regions voting on each region's resolution: the region and its nearest neighbours
    # by noisy volume B (the rolling majority of SPEC section 5).
    granularity_neighbours: int = 20
    scale_to: float = 100.0
    method_version: str = "v1"
    method_update_fraction: float = 0.10
    cap_renoises: int = 1
    cap_method_updates: int = 1
    cap_override: float | None = None
    bounding_salt: str = "symptoms-v1"
    levels: tuple[int, ...] = field(default=LEVELS)

    def __post_init__(self) -> None:
        _check(isinstance(self.total_epsilon, (int, float)) and math.isfinite(self.total_epsilon)
               and self.total_epsilon > 0, "total_epsilon", self.total_epsilon,
               "must be a finite number > 0")
        _check(0 < self.volume_share < 1, "volume_share", self.volume_share,
               "must be in (0, 1): both A and B need budget")
        _check(isinstance(self.max_symptoms_per_day, int) and self.max_symptoms_per_day >= 1,
               "max_symptoms_per_day", self.max_symptoms_per_day, "must be an integer >= 1")
        _check(self.min_area_km2 >= 0, "min_area_km2", self.min_area_km2, "must be >= 0")
        _check(0 < self.reliability_tolerance < 1, "reliability_tolerance",
               self.reliability_tolerance, "must be in (0, 1)")
        _check(0 < self.reliability_probability < 1, "reliability_probability",
               self.reliability_probability, "must be in (0, 1)")
        _check(0 < self.daily_unreliable_share < 1, "daily_unreliable_share",
               self.daily_unreliable_share, "must be in (0, 1)")
        _check(isinstance(self.granularity_neighbours, int) and self.granularity_neighbours >= 0,
               "granularity_neighbours", self.granularity_neighbours,
               "must be an integer >= 0")
        _check(self.scale_to > 0, "scale_to", self.scale_to, "must be > 0")
        _check(0 < self.method_update_fraction <= 1, "method_update_fraction",
               self.method_update_fraction, "must be in (0, 1]")
        _check(self.cap_renoises >= 0 and self.cap_method_updates >= 0, "cap_renoises",
               (self.cap_renoises, self.cap_method_updates), "headroom counts must be >= 0")
        _check(tuple(sorted(set(self.levels))) == tuple(self.levels) and len(self.levels) > 0
               and set(self.levels) <= set(LEVELS), "levels", self.levels,
               "must be a non-empty sorted subset of (0, 1, 2)")
        if self.cap_override is not None:
            _check(self.cap_override > 0, "cap_override", self.cap_override, "must be > 0")

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

    def budget(self, name: str) -> MetricBudget:
        for b in self.metric_budgets:
            if b.name == name:
                return b
        raise ConfigError(f"unknown metric group {name!r}")

    @property
    def ledger_epsilons(self) -> dict[str, float]:
        """What each ledger slot of one level costs per user-day: A's whole vector and B.
        (Not ``MetricBudget.epsilon``, whose ``cell * k`` may differ in the last bit.)"""
        return {SYMPTOM_METRIC: self.symptom_epsilon, VOLUME_METRIC: self.volume_epsilon}

    @property
    def run_epsilon(self) -> float:
        """Composed epsilon of one normal daily run per user-day: the configured total."""
        return math.fsum(self.ledger_epsilons.values()) * len(self.levels)

    @property
    def cap(self) -> float:
        if self.cap_override is not None:
            return self.cap_override
        return self.run_epsilon * (
            1 + self.cap_renoises + self.cap_method_updates * self.method_update_fraction
        )

    @property
    def component_confidence(self) -> float:
        """Each of A's and B's intervals holds with this probability; the noises are
        independent, so both hold with ``reliability_probability``."""
        return math.sqrt(self.reliability_probability)

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> SymptomsConfig:
        """Build from a plain mapping (e.g. a JSON file); unknown keys are errors."""
        return cls(**_mapping_kwargs(cls, values))
