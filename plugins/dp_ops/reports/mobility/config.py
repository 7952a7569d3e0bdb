"""The mobility report's configuration: one typed, frozen object, validated when built.

Errors name the field and the bad value. Epsilons are per user-day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from datetime import date
from typing import Any

from dp_ops.contract import LEVELS
from dp_ops.errors import ConfigError
from dp_ops.privacy.plan import EPSILON_TOO_LARGE, MAX_EPSILON_PER_SENSITIVITY, MetricBudget
from dp_ops.reports._config import check, mapping_kwargs
from dp_ops.reports.mobility.spec import SPEC
from dp_ops.settings import json_object

# The report's name in paths, the ledger and the DAGs.
REPORT: str = SPEC.name

# The published categories and the source categories each one sums.
PUBLISHED_CATEGORIES: dict[str, tuple[str, ...]] = {
    "retail_and_recreation": ("retail", "recreation", "eateries"),
    "grocery_and_pharmacy": ("groceries", "pharmacies"),
    "parks": ("parks",),
    "transit_stations": ("transit",),
    "workplaces": ("workplaces",),
    "residential": ("residential",),
}


@dataclass(frozen=True)
class MobilityConfig:
    """Parameters of the Community Mobility Report (docs/design.md, Mobility report)."""

    place_epsilon: float = 0.44
    max_place_pairs: int = 4
    workplace_epsilon: float = 0.44
    workplace_min_hours: float = 1.0
    residential_sum_epsilon: float = 0.22
    residential_count_epsilon: float = 0.22
    contributors_epsilon: float = 0.22
    # Residential hours go on a grid of minutes so the sum is an integer (docs/design.md,
    # Privacy model).
    residential_grid_per_hour: int = 60
    min_area_km2: float = 3.0
    min_contributors: int = 100
    baseline_start: date = date(2020, 1, 3)
    baseline_end: date = date(2020, 2, 6)
    first_metric_date: date = date(2020, 1, 1)
    first_public_date: date = date(2020, 2, 15)
    # Reliability rule: a published change is more than max_error_points from the true
    # change with probability under max_error_probability (docs/design.md).
    max_error_points: float = 10.0
    max_error_probability: float = 0.05
    method_version: str = "v1"
    method_update_fraction: float = 0.10
    # The demo method (ScaledCounts) scales counts by a factor in this range (inclusive);
    # the form's value is refused outside it before anything is spent.
    method_update_factor_range: tuple[float, float] = (0.2, 5.0)
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
                check(isinstance(v, (int, float)) and math.isfinite(v) and v > 0,
                       f.name, v, "must be a finite number > 0")
                check(v <= MAX_EPSILON_PER_SENSITIVITY, f.name, v, EPSILON_TOO_LARGE)
        check(isinstance(self.max_place_pairs, int) and self.max_place_pairs >= 1,
               "max_place_pairs", self.max_place_pairs, "must be an integer >= 1")
        check(0 <= self.workplace_min_hours < 24, "workplace_min_hours",
               self.workplace_min_hours, "must be in [0, 24)")
        check(self.residential_grid_per_hour >= 1, "residential_grid_per_hour",
               self.residential_grid_per_hour, "must be >= 1")
        check(self.min_area_km2 >= 0, "min_area_km2", self.min_area_km2, "must be >= 0")
        check(self.min_contributors >= 0, "min_contributors", self.min_contributors,
               "must be >= 0")
        check(self.baseline_start <= self.baseline_end, "baseline_end", self.baseline_end,
               f"must not be before baseline_start={self.baseline_start}")
        check((self.baseline_end - self.baseline_start).days + 1 == 35, "baseline_end",
               self.baseline_end, "the baseline window must be 5 whole weeks (35 days)")
        check(self.first_metric_date <= self.baseline_start, "first_metric_date",
               self.first_metric_date, "must not be after baseline_start")
        check(self.first_public_date > self.baseline_end, "first_public_date",
               self.first_public_date, "must be after the baseline window")
        check(0 < self.max_error_probability < 0.5, "max_error_probability",
               self.max_error_probability, "must be in (0, 0.5)")
        check(self.max_error_points > 0, "max_error_points", self.max_error_points,
               "must be > 0")
        check(0 < self.method_update_fraction <= 1, "method_update_fraction",
               self.method_update_fraction, "must be in (0, 1]")
        low, high = self.method_update_factor_range
        check(math.isfinite(low) and math.isfinite(high) and 0 < low <= 1 <= high,
               "method_update_factor_range", self.method_update_factor_range,
               "must be (low, high) with 0 < low <= 1 <= high, both finite")
        check(self.cap_renoises >= 0 and self.cap_method_updates >= 0, "cap_renoises",
               (self.cap_renoises, self.cap_method_updates), "headroom counts must be >= 0")
        check(tuple(sorted(set(self.levels))) == tuple(self.levels)
               and set(self.levels) <= set(LEVELS), "levels", self.levels,
               "must be a sorted subset of (0, 1, 2)")
        if self.cap_override is not None:
            check(self.cap_override > 0, "cap_override", self.cap_override, "must be > 0")

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
        """Per-user-day cap: a normal run plus headroom (docs/design.md, Privacy budget
        ledger)."""
        if self.cap_override is not None:
            return self.cap_override
        return self.run_epsilon * (
            1 + self.cap_renoises + self.cap_method_updates * self.method_update_fraction
        )

    @property
    def policy_terms(self) -> dict[str, float]:
        """What the ledger records of this configuration besides the cap, at the first
        spend; a process whose terms differ is refused (docs/design.md, Privacy budget
        ledger). Changing them is `python -m dp_ops ledger set-epsilon`."""
        terms = {f"epsilon.{b.name}": b.epsilon for b in self.metric_budgets}
        terms["method_update_fraction"] = self.method_update_fraction
        return terms

    @property
    def baseline_dates(self) -> list[date]:
        from datetime import timedelta

        n = (self.baseline_end - self.baseline_start).days + 1
        return [self.baseline_start + timedelta(days=i) for i in range(n)]

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> MobilityConfig:
        """Build from a plain mapping (e.g. a YAML/JSON file); unknown keys are errors."""
        return cls(**mapping_kwargs(cls, values))


def load_mobility_config() -> MobilityConfig:
    """Defaults, overridden by the JSON file named in ``DP_MOBILITY_CONFIG`` if set."""
    values = json_object("DP_MOBILITY_CONFIG")
    return MobilityConfig() if values is None else MobilityConfig.from_mapping(values)
