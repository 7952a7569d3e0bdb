"""The presence report, as the factory finds it (entry point ``dp_ops.reports``)."""

from __future__ import annotations

from dp_ops.reports.spec import ReportSpec

SPEC = ReportSpec(
    name="presence",
    title="Regional Presence Counts",
    daily_dag_id="presence_daily",
    sources=("location_history",),
    declaration="presence_report.declaration",
)
