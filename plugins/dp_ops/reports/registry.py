"""Find a report by name and bind it to its config, data root and ledger.

Reports are found through their specs (:mod:`dp_ops.reports.spec`, the ``dp_ops.reports``
entry points); nothing here names one. Each spec names the module declaring its
:class:`~dp_ops.reports.declared.Report`; :class:`BoundReport` runs that report's steps,
each in one call from the operator or the CLI to the work.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dp_ops import settings
from dp_ops.errors import BadRequest
from dp_ops.layout import DataRoot
from dp_ops.reports.declared import DeclaredConfig, Report
from dp_ops.reports.protocol import MethodUpdateForm
from dp_ops.reports.spec import ReportSpec, report_spec, report_specs
from dp_ops.settings import ExecutionSettings, execution_settings_bound, load_execution_settings
from dp_ops.steps.result import StepResult

if TYPE_CHECKING:
    from dp_ops.privacy.ledger import ApprovalRequest, SpendRequest
    from dp_ops.reports.declared import MethodUpdates
    from dp_ops.steps.noise_request import NoiseRequest, RunRequest
    from dp_ops.steps.noising import NoisePlan

C = TypeVar("C", bound=DeclaredConfig)


def declared_report(spec: ReportSpec) -> Report[Any]:
    """The :class:`Report` that ``spec``'s declaration module exports as ``REPORT``
    (imported on first use); an error naming the module unless it is a ``Report`` of
    this very spec."""
    module = importlib.import_module(spec.declaration)
    report = getattr(module, "REPORT", None)
    if not isinstance(report, Report):
        raise TypeError(f"report {spec.name!r}: {spec.declaration}.REPORT is a "
                        f"{type(report).__name__}, not a Report")
    if report.spec != spec:
        raise ValueError(f"report {spec.name!r}: {spec.declaration}.REPORT declares the "
                         f"spec of {report.spec.name!r}")
    return report


@dataclass(frozen=True)
class BoundReport(Generic[C]):
    """A declared report with the inputs every step takes: its config, the data root and
    the ledger URL, and the execution settings, read once here and in force while any of
    its steps runs (:func:`dp_ops.settings.execution_settings`). What the Airflow
    operators and the CLI call; each method calls the step's work directly.

    ``ledger`` is the URL, or a function giving it, called at the first use of
    :attr:`ledger_url`: in Airflow it looks up the ``dp_ledger`` connection (an
    Execution API call), which ingest, bounding and the gate never need."""

    report: Report[C]
    cfg: C
    root: DataRoot
    ledger: str | Callable[[], str]
    settings: ExecutionSettings = field(default_factory=load_execution_settings)

    @cached_property
    def ledger_url(self) -> str:
        return self.ledger if isinstance(self.ledger, str) else self.ledger()

    @property
    def spec(self) -> ReportSpec:
        return self.report.spec

    @property
    def name(self) -> str:
        return self.report.spec.name

    @contextmanager
    def settings_in_force(self) -> Iterator[None]:
        """Run the block with this report's execution settings."""
        with execution_settings_bound(self.settings):
            yield

    def ingest(self, day: date) -> StepResult:
        """Validate the day of each source the spec names: clean rows to ``work/clean``,
        bad rows to ``quarantine`` with their reason."""
        from dp_ops.steps.ingest import ingest_sources

        with self.settings_in_force():
            return ingest_sources(self.root, self.spec.sources, day)

    def bound(self, day: date, *, shard: int | None = None) -> StepResult:
        """Contribution bounding and true partial aggregates of ``day`` (or of one user
        ``shard`` of it; private, ``work/bounded``)."""
        from dp_ops.steps.bound import bound_clean_day

        report = self.report
        with self.settings_in_force():
            return bound_clean_day(self.root, report.name, report.spec.sources[0], day,
                                   report.bounding, report.bounding_params(self.cfg, day),
                                   shard=shard)

    def report_day(self, day: date) -> StepResult:
        """The day's published values and reliability decisions, from noisy values only."""
        with self.settings_in_force():
            return self.report.report_day(self.root, self.cfg, day, ledger_url=self.ledger_url)

    def publish(self, *, run_id: str) -> StepResult:
        """Publish what this run's gate staged, under the report's publish lock."""
        from dp_ops.steps import release_flow

        with self.settings_in_force():
            return release_flow.publish_staged(self.report.release, self.root, self.cfg,
                                               run_id=run_id, ledger_url=self.ledger_url)

    def noise(self, request: NoiseRequest) -> StepResult:
        """Reserve budget in the ledger (refusing past the cap before any draw), then draw
        and store, or reuse, the noisy value of every cell of the public domain."""
        from dp_ops.steps.noising import noise_day

        with self.settings_in_force():
            return noise_day(self.root, self.noise_plan(), request, ledger_url=self.ledger_url)

    def noise_plan(self) -> NoisePlan:
        return self.report.noise_plan(self.root, self.cfg)

    def build_baseline(self) -> StepResult:
        """Freeze the baseline once its window is noised; ``BadRequest`` for a report
        without one."""
        if self.report.baseline is None:
            raise BadRequest(f"report={self.name!r} has no baseline")
        with self.settings_in_force():
            return self.report.baseline.build(self.root, self.cfg, ledger_url=self.ledger_url)

    def gate(self, *, run_id: str, region: str | None = None) -> StepResult:
        """Stage the candidate release and validate it with Great Expectations; raises
        :class:`dp_ops.errors.GateFailed` if it does not pass."""
        from dp_ops.steps import release_flow

        if not self.report.gate_sees_rerun_region:
            region = None
        with self.settings_in_force():
            return release_flow.stage_and_validate(self.report.release, self.root, self.cfg,
                                                   run_id=run_id, ledger_url=self.ledger_url,
                                                   region=region)

    def method_updates(self) -> MethodUpdates[C]:
        """The report's method-update capability; ``BadRequest`` if it has none."""
        if self.report.method_updates is None:
            raise BadRequest(f"report={self.name!r} has no method updates")
        return self.report.method_updates

    def method_update(self, form: MethodUpdateForm, *, run_id: str) -> StepResult:
        with self.settings_in_force():
            return self.method_updates().run(self.root, self.cfg, form, run_id=run_id,
                                             ledger_url=self.ledger_url)

    def method_update_request(self, form: MethodUpdateForm) -> ApprovalRequest:
        return self.method_updates().request(self.cfg, form)

    def method_update_spends(self, form: MethodUpdateForm) -> tuple[str, list[SpendRequest]]:
        return self.method_updates().spends(self.cfg, form)

    def run_days(self, days: list[date], request: RunRequest, *,
                 on_day: Callable[[date, list[StepResult]], None] | None = None,
                 ) -> list[StepResult]:
        """The whole chain in-process, in date order (``python -m dp_ops run``): per day
        ingest, bound, noise, the baseline when the report has one, and report; then one
        gate and one publish for all the days. ``on_day`` is called with each finished
        day's results (for progress)."""
        results: list[StepResult] = []
        for day in sorted(days):
            day_results = [self.ingest(day), self.bound(day), self.noise(request.for_day(day))]
            if self.report.baseline is not None:
                day_results.append(self.build_baseline())
            day_results.append(self.report_day(day))
            results.extend(day_results)
            if on_day is not None:
                on_day(day, day_results)
        results.append(self.gate(run_id=request.run_id, region=request.region))
        results.append(self.publish(run_id=request.run_id))
        return results

    def first_noised_date(self) -> date:
        return self.report.first_noised_date(self.cfg)

    def needs_baseline(self, day: date) -> bool:
        return self.report.needs_baseline(self.cfg, day)

    def skipped_after_noise(self, day: date) -> frozenset[str]:
        return self.report.skipped_after_noise(self.root, self.cfg, day)

    @property
    def daily_dag_id(self) -> str:
        return self.spec.daily_dag_id

    @property
    def cap(self) -> float:
        return self.cfg.cap


# a report bound to its own config type, as the generic code sees it
AnyReport = BoundReport[Any]


def prepare(report: Report[Any], cfg: Any) -> int:
    """Build, in this process, what ``report``'s tasks need in memory and would otherwise
    build each time: the exact noise sampler of every metric group, and whatever the
    report prepares besides (reliability tests). Returns how many things were built."""
    from dp_ops.privacy.noise import prepare_samplers

    return (prepare_samplers((b.cell_epsilon, b.sensitivity) for b in cfg.metric_budgets)
            + report.prepare(cfg))


def prepare_noise_samplers() -> int:
    """Build, once in this process, what every installed report's tasks would otherwise
    build each time (:func:`prepare`), from the configs as the tasks load them. The
    Airflow processes that fork task processes call it at start
    (``airflow_local_settings.py``). Returns how many were built."""
    total = 0
    for spec in report_specs().values():
        report = declared_report(spec)
        total += prepare(report, report.load_config())
    return total


def bind(report: Report[C], cfg: C, root: DataRoot, ledger_url: str | Callable[[], str],
         settings: ExecutionSettings | None = None) -> BoundReport[C]:
    """``report`` bound to an explicit config, data root and ledger (tests, benchmarks)."""
    return BoundReport(report, cfg, root, ledger_url,
                       settings if settings is not None else load_execution_settings())


# a ledger URL, a function returning one (or None for the default), or None
LedgerSource = str | Callable[[], str | None] | None


def load_report(name: str, *, ledger_url: LedgerSource = None) -> AnyReport:
    """The report ``name`` bound to its config (from the environment), the data root and
    the ledger URL (``ledger_url`` if given, or what it returns when it is a function,
    called at the first use: the Airflow adapters pass the lookup of the ``dp_ledger``
    connection; else, or when it returns None, ``DP_LEDGER_URL`` or the default). An
    unknown name is a ``ValueError`` naming the known ones."""
    spec = report_spec(name)
    root = settings.data_root()
    url: str | Callable[[], str]
    if callable(ledger_url):
        lookup = ledger_url

        def url() -> str:
            return lookup() or settings.ledger(root)
    else:
        url = ledger_url or settings.ledger(root)
    report = declared_report(spec)
    return BoundReport(report, report.load_config(), root, url)
