"""The release gate: Great Expectations validation of the staged release."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from dp_ops.airflow.links import DataDocsLink
from dp_ops.airflow.runtime import load, parse_region, refusals_fail_without_retry
from dp_ops.reports.spec import report_spec


class GreatExpectationsGateOperator(BaseOperator):
    """Stage the candidate release and validate it with Great Expectations.

    GX is called directly (through the report's ``gate`` step) rather than through the GX
    Airflow provider, which cannot be installed beside Airflow 3.3 (docs/design.md). A
    failed validation (:class:`dp_ops.errors.GateFailed`, whose message names the GX Data
    Docs) fails the task *without* retry: the data will not change by retrying, the last
    good release stays published, and the on-call engineer needs the Data Docs path, which
    is logged. Other errors fail normally (retries apply).

    :param report: which report (required).
    :param region: for an on-call rerun of the symptoms dataset, the rerun region
        (templated): only it and its ancestors get fresh daily/weekly decisions, every
        other region keeps those of the current release. Mobility regions are computed
        independently, so the mobility gate ignores it.
    """

    template_fields: Sequence[str] = ("region",)
    ui_color = "#eaf7e6"
    # a link to the Great Expectations Data Docs (served by the "Privacy budget" plugin)
    operator_extra_links = (DataDocsLink(),)

    def __init__(self, *, report: str, region: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report = report_spec(report).name
        self.region = region

    def execute(self, context: Context) -> str:
        with refusals_fail_without_retry(self.log, "gate request"):
            result = load(self.report).gate(run_id=context["run_id"],
                                            region=parse_region(self.region))
        for path in result.paths:
            self.log.info("gate wrote %s", path)
        self.log.info("gate: %s", result.summary)
        return result.summary
