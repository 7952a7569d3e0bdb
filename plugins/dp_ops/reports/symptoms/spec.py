"""The Search Trends symptoms dataset, as the factory finds it (entry point
``dp_ops.reports``)."""

from __future__ import annotations

from dp_ops.api import ReportSpec

SPEC = ReportSpec(
    name="symptoms",
    title="Search Trends symptoms dataset",
    daily_dag_id="symptoms_dataset",
    sources=("search_activity",),
    declaration="dp_ops.reports.symptoms.declaration",
    # the weekly values sum Monday..Sunday: an epsilon change takes effect on a Monday only
    # (a week under two laws has no weekly rule; dp_ops.reports.symptoms.matrix.weekly)
    terms_change_weekday=0,
)
