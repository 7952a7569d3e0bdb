"""
# App Session Minutes — daily

The minutes users spent in app sessions per region and day, from a source of the report's
own (`raw/app_sessions`), capped per user-day and noised once per cell through the
privacy ledger; a sum is published when its region has at least 3 km² and the noisy sum
reaches the threshold. The report is a plug-in defined in `tests/plugin_report/`; this DAG
is built from its spec by the same factory as the built-in reports' DAGs.
"""

from __future__ import annotations

from dp_ops.airflow.dag_factory import daily_report_dag
from dp_ops.reports.spec import report_spec

sessions_daily = daily_report_dag(report_spec("sessions"), doc_md=__doc__)
