"""The presence report's configuration: one typed, frozen object, validated when built."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

from dp_ops.privacy.plan import MetricBudget
from dp_ops.reports.base_config import BudgetedConfig, check
from presence_report.spec import SPEC

REPORT: str = SPEC.name
METRIC = "present_users"  # the ledger metric group and its one cell per region


@dataclass(frozen=True)
class PresenceConfig(BudgetedConfig):
    """``epsilon`` per user-day and level buys one count per region (sensitivity 1: a
    user-day counts in one region of each level). A count is published when its region
    has at least ``min_area_km2`` and the noisy count is at least ``min_users``. The
    levels, the method version and the cap with its headroom come from
    ``BudgetedConfig``; this report has no method updates, so no headroom for them."""

    epsilon: float = 0.5
    min_users: int = 100
    first_public_date: date = date(2020, 1, 1)
    bounding_salt: str = "presence-v1"
    cap_method_updates: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check(math.isfinite(self.epsilon) and 0 < self.epsilon <= 10, "epsilon", self.epsilon,
              "must be in (0, 10]")
        check(self.min_users >= 0, "min_users", self.min_users, "must be >= 0")

    @property
    def metric_budgets(self) -> tuple[MetricBudget, ...]:
        return (MetricBudget(METRIC, self.epsilon, 1),)
