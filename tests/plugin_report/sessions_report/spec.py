"""The sessions report as the factory finds it, and its configuration."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

from dp_ops.api import BudgetedConfig, MetricBudget, ReportSpec, check

SPEC = ReportSpec(name="sessions", title="App Session Minutes",
                  daily_dag_id="sessions_daily", sources=("app_sessions",),
                  declaration="sessions_report.declaration")
METRIC = "session_minutes"  # the ledger metric group and its one cell per region


@dataclass(frozen=True)
class SessionsConfig(BudgetedConfig):
    """A user-day adds at most ``max_minutes`` to one region per level (the sensitivity);
    ``epsilon`` per level buys that sum; a sum is published from ``min_minutes``."""

    epsilon: float = 1.0
    max_minutes: int = 120
    min_minutes: int = 2000
    first_public_date: date = date(2020, 1, 1)
    bounding_salt: str = "sessions-v1"
    cap_method_updates: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check(math.isfinite(self.epsilon) and 0 < self.epsilon <= 10, "epsilon", self.epsilon,
              "must be in (0, 10]")
        check(self.max_minutes >= 1, "max_minutes", self.max_minutes, "must be >= 1")

    @property
    def metric_budgets(self) -> tuple[MetricBudget, ...]:
        return (MetricBudget(METRIC, self.epsilon, self.max_minutes),)
