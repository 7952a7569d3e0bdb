"""
# Search Trends Symptoms dataset — on-call rerun of one region and day

Only that region and the levels above it get fresh values and fresh daily/weekly
decisions; every other region keeps the decisions of the current release, and every
scaling factor c stays as stored, so the rest of the release is untouched.

`validate_request` fails at once if the region is not in `reference/regions.csv` or the
date has not been noised by `symptoms_dataset` yet.
"""

from __future__ import annotations

from dp_ops.airflow.dag_factory import region_rerun_dag
from dp_ops.reports.spec import report_spec

symptoms_region_rerun = region_rerun_dag(report_spec("symptoms"), doc_md=__doc__)
