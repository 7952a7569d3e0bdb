"""A declared report's steps called as the in-process tests call them: with the data root,
the config and the ledger URL each time (the factory binds them once:
:class:`dp_ops.reports.registry.BoundReport`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

from dp_ops.layout import DataRoot
from dp_ops.reports.declared import Report
from dp_ops.reports.protocol import MethodUpdateForm
from dp_ops.reports.registry import AnyReport, bind
from dp_ops.steps.noise_request import NoiseRequest, RunRequest
from dp_ops.steps.noising import NoisePlan
from dp_ops.steps.result import StepResult


def _no_ledger() -> str:
    raise AssertionError("this step was bound without a ledger URL")


class ReportSteps:
    """``report``'s steps over an explicit data root, config and ledger URL."""

    def __init__(self, report: Report[Any]) -> None:
        self.declared = report

    def bound(self, root: DataRoot, cfg: Any, ledger_url: str | None = None) -> AnyReport:
        return bind(self.declared, cfg, root, ledger_url or _no_ledger)

    def load_config(self) -> Any:
        return self.declared.load_config()

    def ingest(self, root: DataRoot, cfg: Any, day: date) -> StepResult:
        return self.bound(root, cfg).ingest(day)

    def bound_contributions(self, root: DataRoot, cfg: Any, day: date, *,
                            shard: int | None = None) -> StepResult:
        return self.bound(root, cfg).bound(day, shard=shard)

    def noise(self, root: DataRoot, cfg: Any, request: NoiseRequest, *,
              ledger_url: str) -> StepResult:
        return self.bound(root, cfg, ledger_url).noise(request)

    def noise_plan(self, root: DataRoot, cfg: Any) -> NoisePlan:
        return self.declared.noise_plan(root, cfg)

    def build_baseline(self, root: DataRoot, cfg: Any, *, ledger_url: str) -> StepResult:
        return self.bound(root, cfg, ledger_url).build_baseline()

    def report(self, root: DataRoot, cfg: Any, day: date, *, ledger_url: str) -> StepResult:
        return self.bound(root, cfg, ledger_url).report_day(day)

    def gate(self, root: DataRoot, cfg: Any, *, run_id: str, ledger_url: str,
             region: str | None = None) -> StepResult:
        return self.bound(root, cfg, ledger_url).gate(run_id=run_id, region=region)

    def publish(self, root: DataRoot, cfg: Any, *, run_id: str, ledger_url: str) -> StepResult:
        return self.bound(root, cfg, ledger_url).publish(run_id=run_id)

    def method_update(self, root: DataRoot, cfg: Any, form: MethodUpdateForm, *, run_id: str,
                      ledger_url: str) -> StepResult:
        return self.bound(root, cfg, ledger_url).method_update(form, run_id=run_id)


def run_days(steps: ReportSteps, root: DataRoot, cfg: Any, days: list[date],
             request: RunRequest, *, ledger_url: str,
             on_day: Callable[[date, list[StepResult]], None] | None = None,
             ) -> list[StepResult]:
    """The report's whole chain over ``days`` in-process (``python -m dp_ops run``)."""
    return steps.bound(root, cfg, ledger_url).run_days(days, request, on_day=on_day)


def _declared(module: str) -> Report[Any]:
    import importlib

    report: Report[Any] = importlib.import_module(module).REPORT
    return report


MOBILITY_STEPS = ReportSteps(_declared("dp_ops.reports.mobility.declaration"))
SYMPTOMS_STEPS = ReportSteps(_declared("dp_ops.reports.symptoms.declaration"))
