"""The method-update operator: estimates the scaling factors of a new method version."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from dp_ops.airflow.runtime import load, parse_day, refusals_fail_without_retry
from dp_ops.errors import BadRequest


def parse_categories(value: Any) -> list[str]:
    """A rendered list param. ``{{ params.categories }}`` renders a Python list as its repr
    (``"['parks']"``); a comma-separated string is accepted too."""
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value]
    else:
        text = str(value).strip()
        if text.startswith("["):
            try:
                parsed = ast.literal_eval(text)
            except (ValueError, SyntaxError) as exc:
                raise BadRequest(f"categories={value!r}: not a list of names") from exc
            items = [str(v) for v in parsed]
        else:
            items = text.split(",")
    names = [i.strip() for i in items if i.strip()]
    if not names:
        raise BadRequest(f"categories={value!r}: name at least one published category")
    return names


def parse_factor(value: Any) -> float:
    try:
        factor = float(str(value).strip())
    except ValueError as exc:
        raise BadRequest(f"factor={value!r}: expected a number > 0") from exc
    if not factor > 0:
        raise BadRequest(f"factor={value!r}: expected a number > 0")
    return factor


class MethodUpdateOperator(BaseOperator):
    """Estimate and store the scaling factors of a method update of ``report`` (its
    declared ``method_updates``: :class:`~dp_ops.reports.declared.MethodUpdates`),
    spending ``method_update_fraction`` of the cell epsilon on each comparison-window date
    through the ledger.

    A budget refusal (``BudgetExceeded``) or a bad request (``MethodUpdateError``, or
    ``BadRequest`` from parsing the form) fails the task *without* retry: retrying changes neither.
    A retry after any other error reuses what the ledger and the stored file already hold,
    so it spends nothing more. The spend needs an approval of this run's exact request in
    the ledger, recorded by the run's ``approve_spend`` task when an approver answers
    Approve; without it (the task marked successful by hand) the ledger refuses
    (``ApprovalMissing``) and the task fails without retry, nothing spent.

    :param report: the report (one whose steps have method updates).
    :param method_version: the new method version (templated).
    :param effective_date: first day computed with the new method, ``YYYY-MM-DD`` (templated).
    :param categories: the published categories the update changes (templated).
    :param factor: the demo's stand-in for the new method: the chosen categories' counts
        are ``factor`` times the old ones (templated).
    :param reason: why the method changed, recorded in the ledger (templated).
    """

    template_fields: Sequence[str] = ("method_version", "effective_date", "categories",
                                      "factor", "reason")
    ui_color = "#fbe8e8"

    def __init__(self, *, report: str, method_version: str, effective_date: str,
                 categories: Any, factor: Any, reason: str, **kwargs: Any) -> None:
        from dp_ops.reports.spec import report_spec

        super().__init__(**kwargs)
        self.report = report_spec(report).name
        self.method_version = method_version
        self.effective_date = effective_date
        self.categories = categories
        self.factor = factor
        self.reason = reason

    def execute(self, context: Context) -> str:
        from dp_ops.reports.protocol import MethodUpdateForm

        with refusals_fail_without_retry(self.log, "method update"):
            form = MethodUpdateForm(
                method_version=str(self.method_version).strip(),
                effective_date=parse_day(self.effective_date, field="effective_date"),
                categories=parse_categories(self.categories),
                factor=parse_factor(self.factor), reason=str(self.reason or ""))
            report = load(self.report)
            result = report.method_update(form, run_id=context["run_id"])
        for path in result.paths:
            self.log.info("method_update wrote %s", path)
        self.log.info("method_update: %s", result.summary)
        return result.summary
