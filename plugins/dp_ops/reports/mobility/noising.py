"""The mobility report's noise plan over the shared budget-checked noise step
(:mod:`dp_ops.steps.noising`): which cells each ledger metric group noises."""

from __future__ import annotations

from datetime import date

import pandas as pd

from dp_ops.contract import PLACE_CATEGORIES
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Spend, SpendRequest
from dp_ops.reports.mobility.config import REPORT, MobilityConfig
from dp_ops.steps import noising

__all__ = ["GROUP_CELLS", "load_noisy_cells", "noise_plan", "plan_requests"]

# The cells each ledger metric group noises, per region and level.
GROUP_CELLS: dict[str, tuple[str, ...]] = {
    "places": tuple(f"places_{c}" for c in PLACE_CATEGORIES),
    "workplaces": ("workplaces",),
    "residential_sum": ("residential_sum_units",),
    "residential_count": ("residential_users",),
    "contributors": ("contributors",),
}


def noise_plan(cfg: MobilityConfig) -> noising.NoisePlan:
    return noising.NoisePlan(
        report=REPORT, budgets=cfg.metric_budgets, group_cells=GROUP_CELLS,
        levels=cfg.levels, cap=cfg.cap, method_version=cfg.method_version,
        first_public_date=cfg.first_public_date, policy_terms=cfg.policy_terms)


def plan_requests(cfg: MobilityConfig, regions: pd.DataFrame, day: date,
                  renoise_region: str | None = None) -> list[SpendRequest]:
    return noising.plan_requests(noise_plan(cfg), regions, day, renoise_region)


def load_noisy_cells(root: DataRoot, day: date, spends: list[Spend]) -> pd.DataFrame:
    return noising.load_noisy_cells(root, REPORT, day, spends)
