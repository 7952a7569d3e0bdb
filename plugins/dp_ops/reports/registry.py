"""Find a report by name and bind it to its config, data root and ledger.

Reports are found through their specs (:mod:`dp_ops.reports.spec`, the ``dp_ops.reports``
entry points); nothing here names one. Each report package checks its ``steps`` module
against :class:`~dp_ops.reports.protocol.ReportSteps` in its ``conformance`` module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dp_ops import settings
from dp_ops.layout import DataRoot
from dp_ops.reports.protocol import ReportConfig, ReportSteps, Step
from dp_ops.reports.spec import ReportSpec, report_spec, report_specs
from dp_ops.settings import ExecutionSettings, execution_settings_bound, load_execution_settings
from dp_ops.steps.result import StepResult

if TYPE_CHECKING:
    from dp_ops.steps.noise_request import NoiseRequest, RunRequest
    from dp_ops.steps.noising import NoisePlan

C = TypeVar("C", bound=ReportConfig)


@dataclass(frozen=True)
class BoundReport(Generic[C]):
    """A report's steps with the inputs every step takes: its config, the data root and
    the ledger URL, and the execution settings, read once here and in force while any of
    its steps runs (:func:`dp_ops.settings.execution_settings`). What the Airflow
    operators and the CLI call.

    ``ledger`` is the URL, or a function giving it, called at the first use of
    :attr:`ledger_url`: in Airflow it looks up the ``dp_ledger`` connection (an
    Execution API call), which ingest, bounding and the gate never need."""

    spec: ReportSpec
    steps: ReportSteps[C]
    cfg: C
    root: DataRoot
    ledger: str | Callable[[], str]
    settings: ExecutionSettings = field(default_factory=load_execution_settings)

    @cached_property
    def ledger_url(self) -> str:
        return self.ledger if isinstance(self.ledger, str) else self.ledger()

    @property
    def name(self) -> str:
        return self.spec.name

    @contextmanager
    def settings_in_force(self) -> Iterator[None]:
        """Run the block with this report's execution settings (for a step called on
        ``steps`` directly, such as a capability's)."""
        with execution_settings_bound(self.settings):
            yield

    def run_step(self, step: Step, day: date | None, *, run_id: str,
                 shard: int | None = None) -> StepResult:
        """Run one of the generic per-day steps (``publish`` takes no day)."""
        steps, root, cfg = self.steps, self.root, self.cfg
        if step is Step.PUBLISH:
            with self.settings_in_force():
                return steps.publish(root, cfg, run_id=run_id, ledger_url=self.ledger_url)
        if day is None:
            raise ValueError(f"step={step.value!r} processes one day: a day is required")
        with self.settings_in_force():
            match step:
                case Step.INGEST:
                    from dp_ops.steps.ingest import ingest_sources

                    return ingest_sources(root, self.spec.sources, day)
                case Step.BOUND_CONTRIBUTIONS:
                    return steps.bound_contributions(root, cfg, day, shard=shard)
                case Step.REPORT:
                    return steps.report(root, cfg, day, ledger_url=self.ledger_url)
        raise ValueError(f"step={step!r}: not a step run_step runs")

    def noise(self, request: NoiseRequest) -> StepResult:
        with self.settings_in_force():
            return self.steps.noise(self.root, self.cfg, request, ledger_url=self.ledger_url)

    def noise_plan(self) -> NoisePlan:
        return self.steps.noise_plan(self.root, self.cfg)

    def gate(self, *, run_id: str, region: str | None = None) -> StepResult:
        with self.settings_in_force():
            return self.steps.gate(self.root, self.cfg, run_id=run_id,
                                   ledger_url=self.ledger_url, region=region)

    def run_days(self, days: list[date], request: RunRequest, *,
                 on_day: Callable[[date, list[StepResult]], None] | None = None,
                 ) -> list[StepResult]:
        from dp_ops.reports.chain import run_days

        with self.settings_in_force():
            return run_days(self.steps, self.spec.sources, self.root, self.cfg, days, request,
                            ledger_url=self.ledger_url, on_day=on_day)

    def first_noised_date(self) -> date:
        return self.steps.first_noised_date(self.cfg)

    def needs_baseline(self, day: date) -> bool:
        return self.steps.needs_baseline(self.cfg, day)

    def skipped_after_noise(self, day: date) -> frozenset[str]:
        return self.steps.skipped_after_noise(self.root, self.cfg, day)

    @property
    def daily_dag_id(self) -> str:
        return self.spec.daily_dag_id

    @property
    def cap(self) -> float:
        return self.cfg.cap


# a report bound to its own config type, as the generic code sees it
AnyReport = BoundReport[Any]


def prepare_noise_samplers() -> int:
    """Build, once in this process, what every installed report's tasks would otherwise
    build each time (the exact noise samplers, reliability tests: each report's
    ``prepare``), from the configs as the tasks load them. The Airflow processes that fork
    task processes call it at start (``airflow_local_settings.py``). Returns how many
    were built."""
    total = 0
    for spec in report_specs().values():
        steps = spec.steps
        total += steps.prepare(steps.load_config())
    return total


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
    steps = spec.steps
    return BoundReport(spec, steps, steps.load_config(), root, url)
