"""The contract every report keeps: the task functions its DAGs and the CLI run.

A report is a package under :mod:`dp_ops.reports` whose ``steps`` module provides the
functions of :class:`ReportSteps`, typed with its own config class. mypy checks each
``steps`` module against the protocol where :mod:`dp_ops.reports.registry` names it, so a
report that drops or changes a step fails the type check, not a run.

Every step takes the data root and the config, writes its outputs under the data root and
returns a :class:`~dp_ops.steps.result.StepResult` whose summary is safe to log (paths and
counts of cells, never rows, user ids or un-noised aggregates). Every step is idempotent,
and the noise step spends budget at most once per slot.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, TypeVar

from dp_ops.layout import DataRoot
from dp_ops.steps.result import StepResult

if TYPE_CHECKING:
    from dp_ops.steps.noising import NoisePlan


class ReportName(StrEnum):
    """The reports this factory publishes (their names in paths, the ledger and DAGs)."""

    MOBILITY = "mobility"
    SYMPTOMS = "symptoms"


class Step(StrEnum):
    """The per-day steps a generic operator can run; the value is the task id the DAGs
    give it (``noise``, the gate and the baseline have operators of their own)."""

    INGEST = "ingest"
    BOUND_CONTRIBUTIONS = "bound_contributions"
    REPORT = "report"
    PUBLISH = "publish"


class ReportConfig(Protocol):
    """What the generic code reads of any report's config."""

    @property
    def cap(self) -> float:
        """The per-user-day cap on the composed epsilon."""
        ...

    @property
    def first_public_date(self) -> date:
        ...


C = TypeVar("C", bound=ReportConfig)


class ReportSteps(Protocol[C]):
    """The task functions of one report, over its config type ``C``."""

    # The report's name (as in ReportName) and its daily DAG's id.
    REPORT: str
    DAILY_DAG_ID: str

    def load_config(self) -> C:
        """The report's config from the environment (defaults, overridden by its
        ``DP_<REPORT>_CONFIG`` JSON file)."""
        ...

    def first_noised_date(self, cfg: C) -> date:
        """The first date the report noises (a rerun before it has nothing to redo)."""
        ...

    def needs_baseline(self, cfg: C, day: date) -> bool:
        """Whether reporting ``day`` needs the frozen baseline."""
        ...

    def skipped_after_noise(self, root: DataRoot, cfg: C, day: date) -> frozenset[str]:
        """The ids of the daily DAG's tasks after ``noise`` that have nothing to do for
        ``day``; its noise task skips them (they start no process)."""
        ...

    def ingest(self, root: DataRoot, cfg: C, day: date) -> StepResult:
        """Validate the day's raw partition: clean rows to ``work/clean``, bad rows to
        ``quarantine`` with their reason."""
        ...

    def bound_contributions(self, root: DataRoot, cfg: C, day: date, *,
                            shard: int | None = None) -> StepResult:
        """Contribution bounding and true partial aggregates (private, ``work/bounded``)."""
        ...

    def noise(self, root: DataRoot, cfg: C, day: date, *, run_id: str, ledger_url: str,
              region: str | None = None, renoise: bool = False, repeat_renoise: bool = False,
              reason: str = "") -> StepResult:
        """Reserve budget in the ledger (refusing past the cap before any draw), then draw
        and store, or reuse, the noisy value of every cell of the public domain."""
        ...

    def noise_plan(self, root: DataRoot, cfg: C) -> NoisePlan:
        """What the noise step spends per day: metric groups, epsilons, levels, the cap
        (the re-noise approval previews a spend from it)."""
        ...

    def report(self, root: DataRoot, cfg: C, day: date, *, ledger_url: str) -> StepResult:
        """The day's published values and reliability decisions, from noisy values only."""
        ...

    def gate(self, root: DataRoot, cfg: C, *, run_id: str, ledger_url: str,
             region: str | None = None) -> StepResult:
        """Stage the candidate release and validate it with Great Expectations; raises
        :class:`dp_ops.errors.GateFailed` if it does not pass."""
        ...

    def publish(self, root: DataRoot, cfg: C, *, run_id: str, ledger_url: str) -> StepResult:
        """Atomically promote the staged release to ``published/<report>/latest``."""
        ...

    def run_days(self, root: DataRoot, cfg: C, days: list[date], *, run_id: str,
                 ledger_url: str, region: str | None = None, renoise: bool = False,
                 repeat_renoise: bool = False,
                 reason: str = "",
                 on_day: Callable[[date, list[StepResult]], None] | None = None,
                 ) -> list[StepResult]:
        """The whole chain in-process, in date order (``python -m dp_ops run``)."""
        ...
