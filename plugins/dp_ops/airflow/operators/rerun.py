"""Validation of an on-call rerun request (the ``*_region_rerun`` DAGs' first task)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from dp_ops.airflow.runtime import (
    load,
    parse_bool,
    parse_day,
    parse_region,
    refusals_fail_without_retry,
)
from dp_ops.reports.spec import report_spec


class ValidateRerunRequestOperator(BaseOperator):
    """Fail fast, without retry, on a rerun request that cannot be served.

    :param report: which report (required).
    :param day: the requested date, ``YYYY-MM-DD`` (templated, from the trigger form).
    :param region: the requested region_id (templated).
    :param renoise: whether fresh noise is asked for (templated; ``"True"``/``"False"`` ok).
    :param reason: why the rerun is needed (templated).
    """

    template_fields: Sequence[str] = ("day", "region", "renoise", "reason")

    def __init__(self, *, report: str, day: str, region: str,
                 renoise: bool | str = False, reason: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.day = day
        self.region = region
        self.renoise = renoise
        self.reason = reason
        self.report = report_spec(report).name

    def execute(self, context: Context) -> str:
        # A bad request does not get better by retrying: it fails without retry.
        with refusals_fail_without_retry(self.log, "rerun request"):
            from dp_ops.reports.rerun import check_rerun_request

            summary = check_rerun_request(
                load(self.report), parse_day(self.day, field="date"),
                parse_region(self.region), parse_bool(self.renoise, field="renoise"),
                str(self.reason or ""))
        self.log.info("%s", summary)
        return summary
