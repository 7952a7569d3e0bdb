"""The contract every report keeps: the task functions its DAGs and the CLI run.

A report is a package whose ``steps`` module provides the functions of :class:`ReportSteps`,
typed with its own config class, and whose ``spec`` module exports its
:class:`~dp_ops.reports.spec.ReportSpec`. Its ``conformance`` module (no other module imports it)
checks the ``steps`` module against the protocol for mypy, so a report that drops or
changes a step fails the type check, not a run.

Every step takes the data root and the config, writes its outputs under the data root and
returns a :class:`~dp_ops.steps.result.StepResult` whose summary is safe to log (paths and
counts of cells, never rows, user ids or un-noised aggregates). Every step is idempotent,
and the noise step spends budget at most once per slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from dp_ops.layout import DataRoot
from dp_ops.steps.result import StepResult

if TYPE_CHECKING:
    from dp_ops.privacy.ledger import ApprovalRequest, SpendRequest
    from dp_ops.steps.noise_request import NoiseRequest
    from dp_ops.steps.noising import NoisePlan


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

    @property
    def run_epsilon(self) -> float:
        """The composed epsilon per user-day of one normal run."""
        ...


C = TypeVar("C", bound=ReportConfig)


class ReportSteps(Protocol[C]):
    """The task functions of one report, over its config type ``C``."""

    def load_config(self) -> C:
        """The report's config from the environment (defaults, overridden by its
        ``DP_<REPORT>_CONFIG`` JSON file)."""
        ...

    def prepare(self, cfg: C) -> int:
        """Build, in this process, what the report's tasks need in memory and would
        otherwise build each time (noise samplers, reliability tests); the processes that
        fork Airflow tasks call it once at start. Returns how many things were built."""
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

    def bound_contributions(self, root: DataRoot, cfg: C, day: date, *,
                            shard: int | None = None) -> StepResult:
        """Contribution bounding and true partial aggregates (private, ``work/bounded``)."""
        ...

    def noise(self, root: DataRoot, cfg: C, request: NoiseRequest, *,
              ledger_url: str) -> StepResult:
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


# -- optional capabilities: a report's steps module provides them or not ---------------

C_contra = TypeVar("C_contra", bound=ReportConfig, contravariant=True)

@runtime_checkable
class BaselineSteps(Protocol[C_contra]):
    """A report whose later days are reported against a baseline frozen from earlier
    noisy days (the daily DAG waits for it: ``BaselineReadySensor``)."""

    def build_baseline(self, root: DataRoot, cfg: C_contra, *, ledger_url: str) -> StepResult:
        """Freeze the baseline once its window is noised; afterwards a no-op. Its result's
        ``event`` is set once, by the call that froze it."""
        ...


@dataclass(frozen=True)
class MethodUpdateForm:
    """What an operator asks for in a method update (the trigger form's fields)."""

    method_version: str
    effective_date: date
    categories: list[str]
    factor: float
    reason: str = ""


@runtime_checkable
class MethodUpdateSteps(Protocol[C_contra]):
    """A report whose method can change from an effective date, with factors that keep
    its published series continuous (``MethodUpdateOperator``, approved first)."""

    def method_update(self, root: DataRoot, cfg: C_contra, form: MethodUpdateForm, *,
                      run_id: str, ledger_url: str) -> StepResult:
        """Compute, store and apply the update's factors (spending through the ledger)."""
        ...

    def method_update_request(self, cfg: C_contra, form: MethodUpdateForm) -> ApprovalRequest:
        """The update as its approver approves it and as :meth:`method_update` reserves
        it (their digests agree)."""
        ...

    def method_update_spends(self, cfg: C_contra, form: MethodUpdateForm,
                             ) -> tuple[str, list[SpendRequest]]:
        """A description of the update and the spends it would reserve (the preview)."""
        ...
