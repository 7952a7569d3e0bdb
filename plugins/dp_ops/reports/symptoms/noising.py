"""The symptoms dataset's noise plan over the shared budget-checked noise step
(:mod:`dp_ops.steps.noising`).

Per date and level two ledger slots: ``symptom_searches`` (A: one cell per region and
symptom of the public list, each noised with epsilon_A / k, sensitivity 1; a user-day
touches at most k of them) and ``search_users`` (B: one cell per region). Every cell of the
public domain (region table x symptom list) is noised, zeros included.
"""

from __future__ import annotations

import math
from datetime import date, timedelta

import pandas as pd

from dp_ops.errors import BadRequest
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger, Spend
from dp_ops.reports.symptoms.config import (
    REPORT,
    SYMPTOM_CELL_PREFIX,
    SYMPTOM_METRIC,
    VOLUME_CELL,
    VOLUME_METRIC,
    SymptomsConfig,
)
from dp_ops.steps import noising
from dp_ops.steps.bound import finish_bounding
from dp_ops.steps.ingest import read_symptoms
from dp_ops.steps.ledger_binding import closing_ledger, open_ledger
from dp_ops.steps.noise_request import NoiseRequest
from dp_ops.steps.result import StepResult


def noise_plan(cfg: SymptomsConfig, symptoms: list[str]) -> noising.NoisePlan:
    return noising.NoisePlan(
        report=REPORT, budgets=cfg.metric_budgets,
        group_cells={SYMPTOM_METRIC: tuple(SYMPTOM_CELL_PREFIX + s for s in symptoms),
                     VOLUME_METRIC: (VOLUME_CELL,)},
        levels=cfg.levels, cap=cfg.cap,
        method_version=cfg.method_version, first_public_date=cfg.first_public_date,
        policy_terms=cfg.policy_terms)


def noise_day(root: DataRoot, cfg: SymptomsConfig, request: NoiseRequest, *,
              ledger_url: str) -> StepResult:
    plan = noise_plan(cfg, read_symptoms(root.symptoms_txt))
    with closing_ledger(open_ledger(root, ledger_url)) as ledger:
        week_law_refusal(ledger, plan, request)
    finish_bounding(root, REPORT, request.day)
    return noising.noise_day(root, plan, request, ledger_url=ledger_url)


def week_law_refusal(ledger: Ledger, plan: noising.NoisePlan, request: NoiseRequest) -> None:
    """Refuse (:class:`BadRequest`, before anything is spent) a draw for ``request.day``
    under other budgets than the other days of its Monday..Sunday week were drawn with:
    its weekly values sum seven draws of one law (docs/design.md, Symptoms dataset, noise
    terms change on a Monday). Only a new draw is checked (a re-noise, or a day not noised
    yet: a backfill under terms changed since); a rerun reuses what is stored."""
    day = request.day
    if not request.renoise and ledger.spends(REPORT, day):
        return
    booked = {b.name: b.epsilon for b in plan.budgets}
    monday = day - timedelta(days=day.weekday())
    for other in (monday + timedelta(days=i) for i in range(7)):
        for s in ledger.spends(REPORT, other):
            want = booked.get(s.slot.metric)
            if (s.kind in ("noise", "renoise") and want is not None
                    and not math.isclose(s.epsilon, want, rel_tol=1e-12)):
                raise BadRequest(
                    f"date={day}: its week ({monday} to {monday + timedelta(days=6)}) was "
                    f"noised with {s.slot.metric} epsilon {s.epsilon!r} on {other}; this "
                    f"draw would use {want!r} (the terms in force), and a week drawn under "
                    "two laws has no weekly values. Nothing was spent. The epsilon of "
                    "that week's days cannot be changed any more: leave them as they are "
                    "(OPERATIONS.md, Changing the cap or an epsilon)")


def load_noisy_cells(root: DataRoot, day: date, spends: list[Spend]) -> pd.DataFrame:
    return noising.load_noisy_cells(root, REPORT, day, spends)
