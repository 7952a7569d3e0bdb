"""The mobility report's configuration: one typed, frozen object, validated when built.

Errors name the field and the bad value. Epsilons are per user-day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from datetime import date

from dp_ops.api import BudgetedConfig, MetricBudget, check
from dp_ops.privacy.plan import EPSILON_TOO_LARGE, MAX_EPSILON_PER_SENSITIVITY
from dp_ops.reports.mobility.spec import SPEC
from dp_ops.sources.location_history import PLACE_CATEGORIES

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

# The cells each ledger metric group noises, per region and level (the public domain).
GROUP_CELLS: dict[str, tuple[str, ...]] = {
    "places": tuple(f"places_{c}" for c in PLACE_CATEGORIES),
    "workplaces": ("workplaces",),
    "residential_sum": ("residential_sum_units",),
    "residential_count": ("residential_users",),
    "contributors": ("contributors",),
}


@dataclass(frozen=True)
class MobilityConfig(BudgetedConfig):
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
    min_contributors: int = 100
    baseline_start: date = date(2020, 1, 3)
    baseline_end: date = date(2020, 2, 6)
    first_metric_date: date = date(2020, 1, 1)
    first_public_date: date = date(2020, 2, 15)
    # Reliability rule: a published change is more than max_error_points from the true
    # change with probability under max_error_probability (docs/design.md).
    max_error_points: float = 10.0
    max_error_probability: float = 0.05
    # The demo method (ScaledCounts) scales counts by a factor in this range (inclusive);
    # the form's value is refused outside it before anything is spent.
    method_update_factor_range: tuple[float, float] = (0.2, 5.0)
    bounding_salt: str = "mobility-v1"

    def __post_init__(self) -> None:
        super().__post_init__()
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
        low, high = self.method_update_factor_range
        check(math.isfinite(low) and math.isfinite(high) and 0 < low <= 1 <= high,
               "method_update_factor_range", self.method_update_factor_range,
               "must be (low, high) with 0 < low <= 1 <= high, both finite")

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

    @property
    def epsilon_per_level(self) -> float:
        return math.fsum(b.epsilon for b in self.metric_budgets)

    @property
    def baseline_dates(self) -> list[date]:
        from datetime import timedelta

        n = (self.baseline_end - self.baseline_start).days + 1
        return [self.baseline_start + timedelta(days=i) for i in range(n)]


def load_mobility_config() -> MobilityConfig:
    """Defaults, overridden by the JSON file named in ``DP_MOBILITY_CONFIG`` if set."""
    return MobilityConfig.load("DP_MOBILITY_CONFIG")
