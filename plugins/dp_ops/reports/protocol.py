"""What the generic code knows of every report: the per-day steps an operator runs, what
it reads of a report's config, and the form of a method update.

A report itself is a :class:`~dp_ops.reports.declared.Report` value (its package's
``declaration`` module); the factory runs its steps
(:class:`~dp_ops.reports.registry.BoundReport`). Every step writes its outputs under the
data root and returns a :class:`~dp_ops.steps.result.StepResult` whose summary is safe to
log (paths and counts of cells, never rows, user ids or un-noised aggregates). Every step
is idempotent, and the noise step spends budget at most once per slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dp_ops.privacy.plan import MetricBudget


class Step(StrEnum):
    """The per-day steps a generic operator can run; the value is the task id the DAGs
    give it (``noise``, the gate and the baseline have operators of their own)."""

    INGEST = "ingest"
    BOUND_CONTRIBUTIONS = "bound_contributions"
    REPORT = "report"
    PUBLISH = "publish"


class ReportConfig(Protocol):
    """What the generic code reads of any report's config (a
    :class:`~dp_ops.reports.base_config.BudgetedConfig` with its first public date)."""

    @property
    def cap(self) -> float:
        """The per-user-day cap on the composed epsilon."""
        ...

    @property
    def first_public_date(self) -> date:
        ...

    @property
    def run_epsilon(self) -> float:
        """The composed epsilon per user-day of one normal run."""
        ...

    @property
    def metric_budgets(self) -> tuple[MetricBudget, ...]:
        """The one statement of the budgets: each ledger metric group's cell epsilon,
        sensitivity and cells per user-day."""
        ...

    @property
    def levels(self) -> tuple[int, ...]: ...

    @property
    def method_version(self) -> str: ...

    @property
    def policy_terms(self) -> Mapping[str, float]: ...


@dataclass(frozen=True)
class MethodUpdateForm:
    """What an operator asks for in a method update (the trigger form's fields)."""

    method_version: str
    effective_date: date
    categories: list[str]
    factor: float
    reason: str = ""
