"""
# Regional Presence Counts — daily

How many users were present (had any stay) in each region on each day, with discrete
Laplace noise drawn once per cell through the privacy ledger; a count is published when
its region has at least 3 km² and the noisy count is at least 100. The report is a
plug-in defined in `tests/plugin_report/`; this DAG is built from its spec by the same
factory as the built-in reports' DAGs.
"""

from __future__ import annotations

from dp_ops.airflow.dag_factory import daily_report_dag
from dp_ops.reports.spec import report_spec

presence_daily = daily_report_dag(report_spec("presence"), doc_md=__doc__)
