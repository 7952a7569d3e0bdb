"""The Community Mobility Report, as the factory finds it (entry point ``dp_ops.reports``)."""

from __future__ import annotations

from dp_ops.api import ReportSpec

SPEC = ReportSpec(
    name="mobility",
    title="Community Mobility Report",
    daily_dag_id="mobility_report",
    sources=("location_history",),
    declaration="dp_ops.reports.mobility.declaration",
    # the frozen baseline: one event, when it is frozen
    assets=("baseline",),
)
