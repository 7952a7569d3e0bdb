"""The Search Trends symptoms dataset, as the factory finds it (entry point
``dp_ops.reports``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dp_ops.contract import SEARCH_SOURCE
from dp_ops.reports.spec import ReportSpec

if TYPE_CHECKING:
    from dp_ops.reports.protocol import ReportSteps
    from dp_ops.reports.symptoms import steps
    from dp_ops.reports.symptoms.config import SymptomsConfig

    # mypy checks the steps module against the protocol every report keeps
    _CHECKED: ReportSteps[SymptomsConfig] = steps

SPEC = ReportSpec(
    name="symptoms",
    title="Search Trends symptoms dataset",
    daily_dag_id="symptoms_dataset",
    sources=(SEARCH_SOURCE,),
    steps_module="dp_ops.reports.symptoms.steps",
)
