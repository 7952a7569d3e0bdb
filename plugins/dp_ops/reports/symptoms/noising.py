"""The symptoms dataset's noise plan over the shared budget-checked noise step
(:mod:`dp_ops.steps.noising`).

Per date and level two ledger slots: ``symptom_searches`` (A: one cell per region and
symptom of the public list, each noised with epsilon_A / k, sensitivity 1; a user-day
touches at most k of them) and ``search_users`` (B: one cell per region). Every cell of the
public domain (region table x symptom list) is noised, zeros included. Weeks start on the
spec's ``terms_change_weekday`` (Monday): the noise step refuses a week drawn under two
laws (:func:`dp_ops.steps.noising.week_law_refusal`).
"""

from __future__ import annotations

from dp_ops.reports.symptoms.config import (
    REPORT,
    SYMPTOM_CELL_PREFIX,
    SYMPTOM_METRIC,
    VOLUME_CELL,
    VOLUME_METRIC,
    SymptomsConfig,
)
from dp_ops.reports.symptoms.spec import SPEC
from dp_ops.steps import noising


def noise_plan(cfg: SymptomsConfig, symptoms: list[str]) -> noising.NoisePlan:
    return noising.NoisePlan(
        report=REPORT, budgets=cfg.metric_budgets,
        group_cells={SYMPTOM_METRIC: tuple(SYMPTOM_CELL_PREFIX + s for s in symptoms),
                     VOLUME_METRIC: (VOLUME_CELL,)},
        levels=cfg.levels, cap=cfg.cap,
        method_version=cfg.method_version, first_public_date=cfg.first_public_date,
        policy_terms=cfg.policy_terms, terms_change_weekday=SPEC.terms_change_weekday)
