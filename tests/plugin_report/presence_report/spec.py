"""The presence report as the factory finds it, and its configuration."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

from dp_ops.api import BudgetedConfig, MetricBudget, ReportSpec, check

SPEC = ReportSpec(name="presence", title="Regional Presence Counts",
                  daily_dag_id="presence_daily", sources=("location_history",),
                  declaration="presence_report.declaration")
METRIC = "present_users"  # the ledger metric group and its one cell per region


@dataclass(frozen=True)
class PresenceConfig(BudgetedConfig):
    """``epsilon`` per user-day and level buys one count per region (sensitivity 1); a
    count is published from ``min_users``. No method updates, so no headroom for them."""

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
