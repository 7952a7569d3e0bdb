"""A report as a value: what is specific to it, declared once (docs/adr/0004-declared-report.md).

A report package's ``declaration`` module holds one :class:`Report`: its spec, its config
loader, its bounding query and parameters, the cells each metric group noises, the pure
function giving a day's report rows from noisy values, its release parts, and the optional
capabilities (a frozen baseline, method updates). The factory runs the rest the same way
for every report (:class:`dp_ops.reports.registry.BoundReport`): ingest the spec's
sources, bound, combine the shards and noise (:func:`dp_ops.steps.noising.noise_day`),
report, gate and publish (:mod:`dp_ops.steps.release_flow`).

The budgets are the config's ``metric_budgets`` and nowhere else: the noise plan the
factory builds from a declaration takes the sampler's law, the ledger's booking and the
recorded policy terms from that one tuple, so a report cannot state one epsilon and spend
another (``NoisePlan`` refuses group cells that do not match the budgets).

mypy checks every part of a declaration against these types (``Report[MobilityConfig]``),
so a report that drops a part or changes its signature fails the type check, not a run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from dp_ops.engine.base import BoundingSql
from dp_ops.layout import DataRoot
from dp_ops.reports.protocol import MethodUpdateForm, ReportConfig
from dp_ops.reports.spec import ReportSpec
from dp_ops.steps.noising import NoisePlan
from dp_ops.steps.release_flow import ReleaseConfig, ReleaseParts
from dp_ops.steps.result import StepResult

if TYPE_CHECKING:
    from dp_ops.privacy.ledger import ApprovalRequest, SpendRequest



class DeclaredConfig(ReportConfig, ReleaseConfig, Protocol):
    """What the factory reads of a declared report's config: its budgets, levels, cap and
    dates (a :class:`~dp_ops.reports.base_config.BudgetedConfig` with its first public
    date)."""


C = TypeVar("C", bound=DeclaredConfig)
C_contra = TypeVar("C_contra", bound=DeclaredConfig, contravariant=True)


class ReportDay(Protocol[C_contra]):
    """A day's report rows (published values and reliability decisions) from the noisy
    values the ledger recorded, written with ``write_day_file``."""

    def __call__(self, root: DataRoot, cfg: C_contra, day: date, *,
                 ledger_url: str) -> StepResult: ...


class BuildBaseline(Protocol[C_contra]):
    """Freeze the baseline once its window is noised; afterwards a no-op. Its result's
    ``event`` is set once, by the call that froze it."""

    def __call__(self, root: DataRoot, cfg: C_contra, *, ledger_url: str) -> StepResult: ...


class RunMethodUpdate(Protocol[C_contra]):
    """Compute, store and apply a method update's factors (spending through the ledger)."""

    def __call__(self, root: DataRoot, cfg: C_contra, form: MethodUpdateForm, *,
                 run_id: str, ledger_url: str) -> StepResult: ...


@dataclass(frozen=True)
class Baseline(Generic[C]):
    """A report whose later days are reported against a baseline frozen from earlier
    noisy days (the daily DAG waits for it: ``BaselineReadySensor``; its spec declares
    the ``baseline`` asset). ``needed``: whether reporting a day needs it."""

    needed: Callable[[C, date], bool]
    build: BuildBaseline[C]


@dataclass(frozen=True)
class MethodUpdates(Generic[C]):
    """A report whose method can change from an effective date, with factors that keep its
    published series continuous (``MethodUpdateOperator``, approved first).

    ``run``: compute, store and apply them; ``request``: the update as its approver
    approves it and as ``run`` reserves it (their digests agree); ``spends``: a
    description of the update and the spends it would reserve (the preview)."""

    run: RunMethodUpdate[C]
    request: Callable[[C, MethodUpdateForm], ApprovalRequest]
    spends: Callable[[C, MethodUpdateForm], tuple[str, list[SpendRequest]]]


def _first_public_date(cfg: DeclaredConfig) -> date:
    return cfg.first_public_date


def _nothing_skipped(root: DataRoot, cfg: DeclaredConfig, day: date) -> frozenset[str]:
    return frozenset()


def _nothing_to_prepare(cfg: DeclaredConfig) -> int:
    return 0


@dataclass(frozen=True)
class Report(Generic[C]):
    """One report, declared.

    ``spec``: its light spec (name, sources, DAG id, assets), the one the entry point
    registers. ``load_config``: its config from the environment (defaults, overridden by
    its ``DP_<REPORT>_CONFIG`` JSON file). ``bounding`` and ``bounding_params``: the
    query bounding a user-day's contributions over the clean rows of the spec's source,
    and its bind parameters for a day. ``cells``: the cells each metric group of
    ``cfg.metric_budgets`` noises in one region (the public domain, not the data).
    ``report_day``: a day's rows from noisy values. ``release``: the parts of the one
    release flow. ``first_noised_date``: the first date it noises (default its first
    public date). ``skipped_after_noise``: the daily DAG's tasks after ``noise`` with
    nothing to do for a day (default none). ``prepare``: what to build once per process
    besides the noise samplers (returns how many). ``gate_sees_rerun_region``: whether an
    on-call rerun's region reaches the gate and the staged record (False for a report
    whose regions are computed independently: its gate stages the whole release either
    way, as any other run's). ``baseline``, ``method_updates``: the optional
    capabilities.
    """

    spec: ReportSpec
    load_config: Callable[[], C]
    bounding: BoundingSql
    bounding_params: Callable[[C, date], dict[str, object]]
    cells: Callable[[DataRoot, C], Mapping[str, tuple[str, ...]]]
    report_day: ReportDay[C]
    release: ReleaseParts[C]
    first_noised_date: Callable[[C], date] = _first_public_date
    skipped_after_noise: Callable[[DataRoot, C, date], frozenset[str]] = _nothing_skipped
    prepare: Callable[[C], int] = _nothing_to_prepare
    gate_sees_rerun_region: bool = True
    baseline: Baseline[C] | None = None
    method_updates: MethodUpdates[C] | None = None

    def __post_init__(self) -> None:
        name = self.spec.name
        if len(self.spec.sources) != 1:
            raise ValueError(f"report {name!r}: its bounding query reads one source; the "
                             f"spec names {list(self.spec.sources)}")
        declares = "baseline" in self.spec.assets
        if declares != (self.baseline is not None):
            raise ValueError(f"report {name!r}: a report with a baseline declares the "
                             "'baseline' asset in its spec and a Baseline here, or neither")
        if self.release.report != name:
            raise ValueError(f"report {name!r}: its release parts are those of "
                             f"{self.release.report!r}")

    @property
    def name(self) -> str:
        return self.spec.name

    def noise_plan(self, root: DataRoot, cfg: C) -> NoisePlan:
        """What the noise step spends per day: the config's budgets (the sampler's law,
        the ledger's booking and the recorded policy terms alike) over the declared
        cells, at the config's levels, under its cap."""
        return NoisePlan(
            report=self.name, budgets=cfg.metric_budgets, group_cells=self.cells(root, cfg),
            levels=cfg.levels, cap=cfg.cap, method_version=cfg.method_version,
            first_public_date=cfg.first_public_date, policy_terms=cfg.policy_terms,
            terms_change_weekday=self.spec.terms_change_weekday)

    def needs_baseline(self, cfg: C, day: date) -> bool:
        return self.baseline is not None and self.baseline.needed(cfg, day)


# a report of any config type, as the generic code sees it
AnyDeclared = Report[Any]
