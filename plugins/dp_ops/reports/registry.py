"""Find a report by name and bind it to its config, data root and ledger.

The one place that maps a report name to its ``steps`` module. The assignments below are
where mypy checks each module against :class:`~dp_ops.reports.protocol.ReportSteps`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from functools import cached_property
from typing import TYPE_CHECKING, Generic, Literal, TypeVar, overload

from dp_ops import settings
from dp_ops.layout import DataRoot
from dp_ops.reports.mobility import steps as mobility_steps
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.protocol import ReportConfig, ReportName, ReportSteps, Step
from dp_ops.reports.symptoms import steps as symptoms_steps
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.steps.result import StepResult

if TYPE_CHECKING:
    from dp_ops.steps.noising import NoisePlan

MOBILITY: ReportSteps[MobilityConfig] = mobility_steps
SYMPTOMS: ReportSteps[SymptomsConfig] = symptoms_steps

C = TypeVar("C", bound=ReportConfig)


@dataclass(frozen=True)
class BoundReport(Generic[C]):
    """A report's steps with the inputs every step takes: its config, the data root and
    the ledger URL. What the Airflow operators and the CLI call.

    ``ledger`` is the URL, or a function giving it, called at the first use of
    :attr:`ledger_url`: in Airflow it looks up the ``dp_ledger`` connection (an
    Execution API call), which ingest, bounding and the gate never need."""

    steps: ReportSteps[C]
    cfg: C
    root: DataRoot
    ledger: str | Callable[[], str]

    @cached_property
    def ledger_url(self) -> str:
        return self.ledger if isinstance(self.ledger, str) else self.ledger()

    @property
    def name(self) -> str:
        return self.steps.REPORT

    def run_step(self, step: Step, day: date | None, *, run_id: str,
                 shard: int | None = None) -> StepResult:
        """Run one of the generic per-day steps (``publish`` takes no day)."""
        steps, root, cfg = self.steps, self.root, self.cfg
        calls: dict[Step, Callable[[date], StepResult]] = {
            Step.INGEST: lambda d: steps.ingest(root, cfg, d),
            Step.BOUND_CONTRIBUTIONS: lambda d: steps.bound_contributions(root, cfg, d,
                                                                          shard=shard),
            Step.REPORT: lambda d: steps.report(root, cfg, d, ledger_url=self.ledger_url),
        }
        if step is Step.PUBLISH:
            return steps.publish(root, cfg, run_id=run_id, ledger_url=self.ledger_url)
        if day is None:
            raise ValueError(f"step={step.value!r} processes one day: a day is required")
        return calls[step](day)

    def noise(self, day: date, *, run_id: str, region: str | None = None,
              renoise: bool = False, repeat_renoise: bool = False, reason: str = "") -> StepResult:
        return self.steps.noise(self.root, self.cfg, day, run_id=run_id,
                                ledger_url=self.ledger_url, region=region, renoise=renoise,
                                repeat_renoise=repeat_renoise,
                                reason=reason)

    def noise_plan(self) -> NoisePlan:
        return self.steps.noise_plan(self.root, self.cfg)

    def gate(self, *, run_id: str, region: str | None = None) -> StepResult:
        return self.steps.gate(self.root, self.cfg, run_id=run_id, ledger_url=self.ledger_url,
                               region=region)

    def run_days(self, days: list[date], *, run_id: str, region: str | None = None,
                 renoise: bool = False, repeat_renoise: bool = False, reason: str = "",
                 on_day: Callable[[date, list[StepResult]], None] | None = None,
                 ) -> list[StepResult]:
        return self.steps.run_days(self.root, self.cfg, days, run_id=run_id,
                                   ledger_url=self.ledger_url, region=region,
                                   renoise=renoise,
                                   repeat_renoise=repeat_renoise, reason=reason, on_day=on_day)

    def first_noised_date(self) -> date:
        return self.steps.first_noised_date(self.cfg)

    def needs_baseline(self, day: date) -> bool:
        return self.steps.needs_baseline(self.cfg, day)

    def skipped_after_noise(self, day: date) -> frozenset[str]:
        return self.steps.skipped_after_noise(self.root, self.cfg, day)

    @property
    def daily_dag_id(self) -> str:
        return self.steps.DAILY_DAG_ID

    @property
    def cap(self) -> float:
        return self.cfg.cap


AnyReport = BoundReport[MobilityConfig] | BoundReport[SymptomsConfig]


def prepare_noise_samplers() -> int:
    """Build the exact noise sampler of every metric group of both reports' configs (from
    the environment, as the tasks load them), and the symptoms reliability tests, once,
    in this process: the Airflow processes that fork task processes call it at start
    (``airflow_local_settings.py``), so a noise task does not spend ~0.6 s building the
    samplers, nor a symptoms report or gate task 0.3-1 s building the tests. Returns how
    many were built."""
    from dp_ops.privacy.noise import prepare_samplers
    from dp_ops.reports.symptoms.reliability import prepare_ratio_tests

    symptoms = SYMPTOMS.load_config()
    budgets = (*MOBILITY.load_config().metric_budgets, *symptoms.metric_budgets)
    return (prepare_samplers((b.cell_epsilon, b.sensitivity) for b in budgets)
            + prepare_ratio_tests(symptoms))


# a ledger URL, a function returning one (or None for the default), or None
LedgerSource = str | Callable[[], str | None] | None


@overload
def load_report(name: Literal[ReportName.MOBILITY], *,
                ledger_url: LedgerSource = None) -> BoundReport[MobilityConfig]: ...
@overload
def load_report(name: Literal[ReportName.SYMPTOMS], *,
                ledger_url: LedgerSource = None) -> BoundReport[SymptomsConfig]: ...
@overload
def load_report(name: str, *, ledger_url: LedgerSource = None) -> AnyReport: ...


def load_report(name: str, *, ledger_url: LedgerSource = None) -> AnyReport:
    """The report ``name`` bound to its config (from the environment), the data root and
    the ledger URL (``ledger_url`` if given, or what it returns when it is a function,
    called at the first use: the Airflow adapters pass the lookup of the ``dp_ledger``
    connection; else, or when it returns None, ``DP_LEDGER_URL`` or the default). An
    unknown name is a ``ValueError`` naming the known ones."""
    try:
        report = ReportName(name)
    except ValueError:
        raise ValueError(f"report={name!r}: unknown report, expected one of "
                         f"{sorted(r.value for r in ReportName)}") from None
    root = settings.data_root()
    url: str | Callable[[], str]
    if callable(ledger_url):
        lookup = ledger_url

        def url() -> str:
            return lookup() or settings.ledger(root)
    else:
        url = ledger_url or settings.ledger(root)
    if report is ReportName.MOBILITY:
        return BoundReport(MOBILITY, MOBILITY.load_config(), root, url)
    return BoundReport(SYMPTOMS, SYMPTOMS.load_config(), root, url)
