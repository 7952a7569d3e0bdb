"""The budget-checked noise operator: the only task that spends privacy budget."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.bases.skipmixin import SkipMixin
from airflow.sdk.exceptions import AirflowFailException

from dp_ops.airflow.operators.steps import skip_downstream
from dp_ops.airflow.runtime import (
    load,
    parse_bool,
    parse_day,
    parse_region,
    refusals_fail_without_retry,
)
from dp_ops.reports.spec import report_spec


class BudgetCheckedNoiseOperator(BaseOperator, SkipMixin):
    """Noise one day of a report through the privacy-budget ledger.

    The step reserves budget in the ledger before drawing any noise and reuses stored noisy
    values for slots already noised, so retries and reruns spend nothing (the Airflow
    ``run_id``, stable across retries, is recorded with each spend). A refusal past the
    per-user-day cap (``dp_ops.errors.BudgetExceeded``) fails the task *without* retry:
    retrying cannot make budget appear, and the refusal needs a human decision. Any other
    error fails normally and the task's retries apply.

    A re-noise spends only against an approval the ledger holds for this run and exactly
    this request, which the run's ``approve_spend`` task records when an approver answers
    Approve (:class:`~dp_ops.airflow.operators.approval.SpendApprovalOperator`). The order
    of the tasks grants nothing: without that record (``approve_spend`` marked successful
    by hand, say) the ledger refuses (``dp_ops.errors.ApprovalMissing``) and the task fails
    without retry, nothing spent.

    :param report: which report (required).
    :param day: the day to noise, ``YYYY-MM-DD`` (templated).
    :param region: only this region's cells (on-call rerun), or ``None`` for all (templated).
    :param renoise: draw fresh noise for already-noised slots, spending budget again;
        templated, so ``"True"``/``"False"`` strings are accepted.
    :param reason: why a re-noise was asked for, recorded in the ledger (templated).
    :param repeat_renoise: allow a second re-noise of the same region and day (refused
        otherwise); recorded in the ledger's reason (templated).
    :param skip_unneeded: once the day is noised, skip the tasks downstream that have
        nothing to do for it (the report's ``skipped_after_noise``: for mobility, all of
        them before the first public date and the baseline wait once it is frozen), so
        Airflow starts no process for them. For the daily DAGs, whose task ids it names.
    """

    template_fields: Sequence[str] = ("day", "region", "renoise", "reason", "repeat_renoise")
    ui_color = "#fbe8e8"

    def __init__(self, *, report: str, day: str, region: str | None = None,
                 renoise: bool | str = False, reason: str = "",
                 repeat_renoise: bool | str = False, skip_unneeded: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.day = day
        self.skip_unneeded = skip_unneeded
        self.region = region
        self.renoise = renoise
        self.reason = reason
        self.repeat_renoise = repeat_renoise
        self.report = report_spec(report).name

    def execute(self, context: Context) -> str:
        from dp_ops.steps.noise_request import NoiseRequest

        with refusals_fail_without_retry(self.log, "noise request"):
            day = parse_day(self.day)
            renoise = parse_bool(self.renoise, field="renoise")
            region = parse_region(self.region)
            if renoise and not str(self.reason).strip():
                raise AirflowFailException(
                    "renoise=True needs a reason (it is recorded in the ledger)")
            repeat = parse_bool(self.repeat_renoise, field="repeat_renoise")
            request = NoiseRequest(day=day, run_id=context["run_id"], region=region,
                                   renoise=renoise, repeat_renoise=repeat,
                                   reason=str(self.reason or ""))
            rt = load(self.report)
            result = rt.noise(request)
        self.log.info("noise: %s", result.summary)
        if self.skip_unneeded:
            skip_downstream(self, context, rt.skipped_after_noise(day),
                            f"nothing to do for {day}")
        return result.summary
