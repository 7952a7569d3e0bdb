"""The release gate: Great Expectations validation of the staged release."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from dp_ops.operators._runtime import parse_region, resolve


def _is_gate_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``dp_ops.gate.GateFailed``. Looked up in ``sys.modules`` rather
    than imported: importing ``dp_ops.gate`` imports Great Expectations (~4 s), which the
    step skips when there is nothing to release yet; if it raised GateFailed, it is loaded."""
    gate = sys.modules.get("dp_ops.gate")
    return gate is not None and isinstance(exc, gate.GateFailed)


class GreatExpectationsGateOperator(BaseOperator):
    """Stage the candidate release and validate it with Great Expectations.

    GX is called directly (through the report's ``steps.gate``) rather than through the GX
    Airflow provider, which cannot be installed beside Airflow 3.3 (SPEC section 9). A failed
    validation (``dp_ops.gate.GateFailed``) fails the task *without* retry: the data will not
    change by retrying, the last good release stays published, and the on-call engineer
    needs the Data Docs path, which is logged. Other errors fail normally (retries apply).

    :param report: which report (``mobility`` or ``symptoms``).
    :param region: for an on-call rerun of the symptoms dataset, the rerun region
        (templated): only it and its ancestors get fresh daily/weekly decisions, every
        other region keeps those of the current release. Mobility regions are computed
        independently, so the mobility gate takes no region.
    """

    template_fields: Sequence[str] = ("region",)
    ui_color = "#eaf7e6"

    def __init__(self, *, report: str = "mobility", region: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report = report
        self.region = region

    def execute(self, context: Context) -> str:
        rt = resolve(self.report)
        region = parse_region(self.region)
        extra = {"region": region} if region is not None else {}
        try:
            result = rt.steps.gate(rt.root, rt.cfg, run_id=context["run_id"], **extra)
        except Exception as exc:
            if not _is_gate_failure(exc):
                raise
            docs = getattr(exc, "data_docs", None) or getattr(exc, "data_docs_path", None)
            self.log.error("release gate failed; the last good release stays published. %s", exc)
            if docs:
                self.log.error("Great Expectations Data Docs: %s", docs)
            raise AirflowFailException(str(exc)) from exc
        for path in result.paths:
            self.log.info("gate wrote %s", path)
        self.log.info("gate: %s", result.summary)
        return result.summary
