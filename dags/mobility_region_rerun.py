"""
# Community Mobility Report — on-call rerun of one region and day

`validate_request` fails at once if the region is not in `reference/regions.csv`, the date
has not been noised by `mobility_report` yet, or the baseline it needs is missing.
"""

from __future__ import annotations

from dp_ops.airflow.dag_factory import region_rerun_dag
from dp_ops.reports.spec import report_spec

mobility_region_rerun = region_rerun_dag(report_spec("mobility"), doc_md=__doc__)
