"""The mobility report's noise plan over the shared budget-checked noise step
(:mod:`dp_ops.noising`): which cells each ledger metric group noises."""

from __future__ import annotations

from datetime import date

import pandas as pd

from dp_ops import noising
from dp_ops.config import PLACE_CATEGORIES, MobilityConfig
from dp_ops.ledger import Spend, SpendRequest
from dp_ops.noising import NOISE_SCHEMA, VALUE_KINDS, NoiseNotStored, noise_file, region_chain
from dp_ops.paths import DataRoot
from dp_ops.results import StepResult

REPORT = "mobility"

__all__ = ["GROUP_CELLS", "NOISE_SCHEMA", "REPORT", "VALUE_KINDS", "NoiseNotStored",
           "load_noisy_cells", "noise_day", "noise_file", "noise_plan", "plan_requests",
           "region_chain"]

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
        ledger_epsilons={b.name: b.epsilon for b in cfg.metric_budgets},
        levels=cfg.levels, cap=cfg.cap, method_version=cfg.method_version)


def plan_requests(cfg: MobilityConfig, regions: pd.DataFrame, day: date,
                  renoise_region: str | None = None) -> list[SpendRequest]:
    return noising.plan_requests(noise_plan(cfg), regions, day, renoise_region)


def noise_day(root: DataRoot, cfg: MobilityConfig, day: date, *, run_id: str,
              ledger_url: str, region: str | None = None, renoise: bool = False,
              reason: str = "") -> StepResult:
    return noising.noise_day(root, noise_plan(cfg), day, run_id=run_id, ledger_url=ledger_url,
                             region=region, renoise=renoise, reason=reason)


def load_noisy_cells(root: DataRoot, day: date, spends: list[Spend]) -> pd.DataFrame:
    return noising.load_noisy_cells(root, REPORT, day, spends)
