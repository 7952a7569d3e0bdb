"""The presence report's configuration: one typed, frozen object, validated when built."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date

from dp_ops.contract import LEVELS
from dp_ops.errors import ConfigError
from dp_ops.privacy.plan import MetricBudget
from presence_report.spec import SPEC

REPORT: str = SPEC.name
METRIC = "present_users"  # the ledger metric group and its one cell per region


@dataclass(frozen=True)
class PresenceConfig:
    """``epsilon`` per user-day and level buys one count per region (sensitivity 1: a
    user-day counts in one region of each level). A count is published when its region
    has at least ``min_area_km2`` and the noisy count is at least ``min_users``."""

    epsilon: float = 0.5
    min_users: int = 100
    min_area_km2: float = 3.0
    first_public_date: date = date(2020, 1, 1)
    method_version: str = "v1"
    bounding_salt: str = "presence-v1"
    cap_renoises: int = 1
    levels: tuple[int, ...] = field(default=LEVELS)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and 0 < self.epsilon <= 10):
            raise ConfigError(f"config field epsilon={self.epsilon!r}: must be in (0, 10]")
        if self.min_users < 0 or self.min_area_km2 < 0:
            raise ConfigError("config fields min_users, min_area_km2: must be >= 0")

    @property
    def metric_budgets(self) -> tuple[MetricBudget, ...]:
        return (MetricBudget(METRIC, self.epsilon, 1),)

    @property
    def run_epsilon(self) -> float:
        """One normal daily run per user-day: every level once."""
        return self.epsilon * len(self.levels)

    @property
    def cap(self) -> float:
        return self.run_epsilon * (1 + self.cap_renoises)

    @property
    def policy_terms(self) -> dict[str, float]:
        return {f"epsilon.{METRIC}": self.epsilon}
