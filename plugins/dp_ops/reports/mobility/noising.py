"""The mobility report's noise plan over the shared budget-checked noise step
(:mod:`dp_ops.steps.noising`): which cells each ledger metric group noises."""

from __future__ import annotations

from dp_ops.reports.mobility.config import REPORT, MobilityConfig
from dp_ops.sources.location_history import PLACE_CATEGORIES
from dp_ops.steps import noising

__all__ = ["GROUP_CELLS", "noise_plan"]

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
