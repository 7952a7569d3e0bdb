"""The presence report, as the factory finds it (entry point ``dp_ops.reports``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dp_ops.contract import LOCATION_SOURCE
from dp_ops.reports.spec import ReportSpec

if TYPE_CHECKING:
    from dp_ops.reports.protocol import ReportSteps
    from dp_ops.steps.release_flow import ReleaseParts
    from presence_report import steps
    from presence_report.config import PresenceConfig
    from presence_report.release import PresenceRelease

    # mypy checks the steps module and the release parts against the factory's protocols
    _STEPS: ReportSteps[PresenceConfig] = steps
    _PARTS: ReleaseParts[PresenceConfig] = PresenceRelease()

SPEC = ReportSpec(
    name="presence",
    title="Regional Presence Counts",
    daily_dag_id="presence_daily",
    sources=(LOCATION_SOURCE,),
    steps_module="presence_report.steps",
)
