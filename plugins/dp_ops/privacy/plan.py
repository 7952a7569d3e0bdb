"""What a report noises, as the ledger sees it: metric groups with their per-cell epsilon,
sensitivity and cells per user-day (:class:`MetricBudget`), and the policy terms the
ledger records of them (:func:`group_terms`). No files, no engine, no Airflow.

A budget is the one value both sides read: the noise step builds its sampler from the
budget of the spend it books, and the ledger compares that budget with the recorded
policy before it books it (docs/design.md, Privacy budget ledger)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass

# Beyond this epsilon per unit of sensitivity a = exp(-epsilon / sensitivity) is below the
# smallest normal double: the noise would be zero at any precision carried (no privacy at
# all), and the exact sampler's expansions grow with it. Configs and the noise refuse it.
MAX_EPSILON_PER_SENSITIVITY = 700.0
EPSILON_TOO_LARGE = (f"must be at most {MAX_EPSILON_PER_SENSITIVITY:g} (beyond it the noise "
                     "is zero: no privacy)")

# The policy terms recorded per metric group: the group's epsilon per user-day and level,
# the per-cell sensitivity and the cells one user-day can touch.
EPSILON_TERM, SENSITIVITY_TERM, CELLS_TERM = "epsilon.", "sensitivity.", "cells."
GROUP_TERM_PREFIXES = (EPSILON_TERM, SENSITIVITY_TERM, CELLS_TERM)
# the fraction of a group's daily epsilon a method update spends
METHOD_UPDATE_FRACTION_TERM = "method_update_fraction"


@dataclass(frozen=True)
class MetricBudget:
    """One ledger metric group: its per-user-day epsilon and per-cell sensitivity.

    ``cell_epsilon`` is the epsilon of each noisy cell of the group and ``sensitivity`` the
    most one user-day can change one cell (in the cell's integer unit). ``contributions``
    is how many cells of the group one user-day can touch, so the group costs
    ``cell_epsilon * contributions`` per user-day and level (basic composition): that is
    what the ledger books, derived here and nowhere else.
    """

    name: str
    cell_epsilon: float
    sensitivity: int
    contributions: int = 1

    def __post_init__(self) -> None:
        what = f"metric group {self.name!r}"
        if not (isinstance(self.cell_epsilon, numbers.Real) and math.isfinite(self.cell_epsilon)
                and self.cell_epsilon > 0):
            raise ValueError(f"{what}: cell_epsilon={self.cell_epsilon!r} must be a finite "
                             "number > 0")
        for field_name in ("sensitivity", "contributions"):
            value = getattr(self, field_name)
            if not _whole_at_least_one(value):
                raise ValueError(f"{what}: {field_name}={value!r} must be a whole number >= 1")

    @property
    def epsilon(self) -> float:
        return self.cell_epsilon * self.contributions

    def terms(self) -> dict[str, float]:
        """What the ledger's policy records of this group."""
        return {EPSILON_TERM + self.name: self.epsilon,
                SENSITIVITY_TERM + self.name: float(self.sensitivity),
                CELLS_TERM + self.name: float(self.contributions)}


def _whole_at_least_one(value: object) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value) and float(value).is_integer() and float(value) >= 1)


def group_terms(budgets: Iterable[MetricBudget]) -> dict[str, float]:
    """The policy terms of every group of ``budgets`` (:meth:`MetricBudget.terms`)."""
    terms: dict[str, float] = {}
    for budget in budgets:
        terms.update(budget.terms())
    return terms
