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

All of them are thin calls into `dp_ops.reports.symptoms.steps`.

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

from datetime import UTC, datetime

from airflow.sdk import CronDataIntervalTimetable, chain, dag

from dp_ops.airflow.defaults import DAILY_ARGS, RUN_DAY, bounding_pool, run_deadline
from dp_ops.airflow.operators import (
    BudgetCheckedNoiseOperator,
    GreatExpectationsGateOperator,
    ReportStepOperator,
)
from dp_ops.airflow.tags import Tag, tags
from dp_ops.reports.protocol import Step

REPORT = "symptoms"
# The day a run processes: the start of its one-day data interval.
DAY = RUN_DAY


@dag(
    dag_id="symptoms_dataset",
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=datetime(2020, 1, 1, tzinfo=UTC),
    catchup=False,
    is_paused_upon_creation=True,
    max_active_runs=4,
    default_args=DAILY_ARGS,
    # an alert when a run is not done DP_RUN_DEADLINE_HOURS (6) after being queued
    deadline=run_deadline(REPORT),
    doc_md=__doc__,
    tags=tags(REPORT, Tag.DAILY, Tag.SPENDS_BUDGET, Tag.PUBLISHES),
)
def symptoms_dataset() -> None:
    ingest = ReportStepOperator(task_id="ingest", step=Step.INGEST, day=DAY, report=REPORT)
    # one mapped task instance per user shard (DP_BOUNDING_SHARDS, default 1)
    bound_contributions = ReportStepOperator.partial(
        task_id="bound_contributions", step=Step.BOUND_CONTRIBUTIONS, day=DAY, report=REPORT,
        pool=bounding_pool(),
        ).expand(shard=ingest.output)
    noise = BudgetCheckedNoiseOperator(task_id="noise", day=DAY, report=REPORT)
    report = ReportStepOperator(task_id="report", step=Step.REPORT, day=DAY, report=REPORT)
    gate = GreatExpectationsGateOperator(task_id="gate", report=REPORT)
    publish = ReportStepOperator(task_id="publish", step=Step.PUBLISH, report=REPORT)

    chain(ingest, bound_contributions, noise, report, gate, publish)


symptoms_dataset()
