"""The Community Mobility Report, as the factory finds it (entry point ``dp_ops.reports``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dp_ops.contract import LOCATION_SOURCE
from dp_ops.reports.spec import ReportSpec

if TYPE_CHECKING:
    from dp_ops.reports.mobility import steps
    from dp_ops.reports.mobility.config import MobilityConfig
    from dp_ops.reports.protocol import BaselineSteps, MethodUpdateSteps, ReportSteps

    # mypy checks the steps module against the protocol every report keeps, and the
    # optional capabilities this one has
    _CHECKED: ReportSteps[MobilityConfig] = steps
    _BASELINE: BaselineSteps[MobilityConfig] = steps
    _METHOD_UPDATES: MethodUpdateSteps[MobilityConfig] = steps

SPEC = ReportSpec(
    name="mobility",
    title="Community Mobility Report",
    daily_dag_id="mobility_report",
    sources=(LOCATION_SOURCE,),
    steps_module="dp_ops.reports.mobility.steps",
    # the frozen baseline: one event, when it is frozen
    assets=("baseline",),
)
