"""The operators' contract: a required report and a typed step, checked when the DAG is
parsed, not when the task runs."""

from __future__ import annotations

import pytest

from dp_ops.airflow.operators import (
    BudgetCheckedNoiseOperator,
    GreatExpectationsGateOperator,
    ReportStepOperator,
    ValidateRerunRequestOperator,
)
from dp_ops.reports.protocol import Step


def test_a_step_operator_stores_the_report_and_step_it_was_given() -> None:
    op = ReportStepOperator(task_id="bound_contributions", report="symptoms",
                            step=Step.BOUND_CONTRIBUTIONS, day="2020-03-02")
    assert (op.report, op.step, op.day) == ("symptoms", "bound_contributions", "2020-03-02")


@pytest.mark.parametrize("make", [
    lambda: ReportStepOperator(task_id="t", step=Step.INGEST, day="2020-03-02"),
    lambda: BudgetCheckedNoiseOperator(task_id="t", day="2020-03-02"),
    lambda: GreatExpectationsGateOperator(task_id="t"),
    lambda: ValidateRerunRequestOperator(task_id="t", day="d", region="r"),
])
def test_the_report_is_required(make: object) -> None:
    with pytest.raises(TypeError, match="report"):
        make()  # type: ignore[operator]


def test_an_unknown_report_or_step_fails_at_parse_time() -> None:
    with pytest.raises(ValueError, match="'bound'"):
        ReportStepOperator(task_id="t", report="mobility", step="bound", day="2020-03-02")
    with pytest.raises(ValueError, match="'mobilty'"):
        GreatExpectationsGateOperator(task_id="t", report="mobilty")


def test_publish_takes_no_day_and_every_other_step_needs_one() -> None:
    ReportStepOperator(task_id="publish", report="mobility", step=Step.PUBLISH)
    with pytest.raises(ValueError, match="step='report' processes one day"):
        ReportStepOperator(task_id="report", report="mobility", step=Step.REPORT)
