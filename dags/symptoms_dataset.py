"""
# Search Trends Symptoms dataset — daily

One run per day (its data interval, 00:00–24:00 UTC, is the day it processes) turns that
day's private search activity into differentially private symptom search volumes and
republishes the daily and weekly files at `$DP_DATA_ROOT/published/symptoms/latest/`.

- `ingest`: validate `raw/search_activity/date=<day>`; rows with an unknown symptom or
  region, a null id or a wrong date go to quarantine.
- `bound_contributions`: per user-day and level one region, once in B (users with any
  search), at most once per symptom and in at most k symptoms (A). Private.
- `noise`: check and reserve privacy budget in the ledger (1.68 per user-day over A, B
  and the three levels), then draw discrete Laplace noise once for every (region,
  symptom) cell, zeros included; retries and reruns reuse the stored noise.
- `report`: pair noisy A and B and apply the reliability rule (true ratio within ±25% of
  A/B with probability ≥ 50%).
- `gate`: decide each series daily or weekly (rolling majority of the 20 regions nearest
  in noisy volume), build Monday..Sunday weekly sums, scale by the stored factor c, and
  validate the release with Great Expectations.
- `publish`: store the scaling factors fixed for the first time, then atomically promote
  the staged release to `latest`.

The DAG is built from the report's spec by `dp_ops.airflow.dag_factory`; its tasks are
thin calls into the report declared in `dp_ops.reports.symptoms.declaration`.

**Failures.** A budget refusal or a failed gate fails the task at once, without retry:
read the task log (the gate logs the path of the GX Data Docs). The last good release
stays published. Other errors retry twice.

**Ordering.** Runs may finish out of order; each `gate` stages the whole release from the
days present, and `publish` never replaces `latest` with a release ending on an earlier
day: an overtaken run rebuilds from the current state and publishes that.

**Backfill.** Created paused; backfill with `airflow backfill create --dag-id
symptoms_dataset --from-date 2020-01-01 --to-date 2020-03-31 --max-active-runs 4` with the
scheduler running and the DAG unpaused (`scripts/airflow_demo.py` does it).

**On-call rerun of one region and day:** trigger `symptoms_region_rerun`.

No data goes through XCom or the logs: tasks pass paths and counts of cells.
"""

from __future__ import annotations

from dp_ops.airflow.dag_factory import daily_report_dag
from dp_ops.reports.spec import report_spec

symptoms_dataset = daily_report_dag(report_spec("symptoms"), doc_md=__doc__)
