"""
# Community Mobility Report — daily

One run per day (the run's data interval, 00:00–24:00 UTC, is the day it processes) turns
that day's private location history into differentially private mobility metrics and
republishes the release at `$DP_DATA_ROOT/published/mobility/latest/`.

- `ingest`: validate `raw/location_history/date=<day>`; bad rows go to quarantine.
- `bound_contributions`: per-user contribution bounding, true partial aggregates (private).
- `noise`: check and reserve privacy budget in the ledger, then draw discrete Laplace noise
  once per cell; retries and reruns reuse the stored noise and spend nothing. Then it skips
  (shown as skipped, no process started) what has nothing to do for the day: before the
  first public date (2020-02-15) nothing of the day is published, so `baseline`,
  `report`, `gate` and `publish`; once the baseline is frozen, `baseline`.
- `baseline`: days from the first public date need the frozen baseline: it is frozen here
  as soon as the window 2020-01-03..02-06 is fully noised (the run that freezes it emits
  the one `mobility_baseline` asset event), and until then the task waits in reschedule
  mode. (Run for an earlier day, it succeeds at once and skips the rest.)
- `report`: percent change against the baseline and reliability suppression (noisy values
  only).
- `gate`: stage the release and validate it with Great Expectations.
- `publish`: atomically promote the staged release to `latest`; when `latest` moves, a
  `mobility_release` asset event (release id, last date, manifest sha256, epsilon).

All of them are thin calls into `dp_ops.reports.mobility.steps`.

**Failures.** A budget refusal (`BudgetExceeded`) or a failed gate (`GateFailed`) fails the
task at once, without retry: read the task log (the gate logs the path of the GX Data
Docs). The last good release stays published. Other errors retry twice.

**Ordering.** Runs may finish out of order (a backfill runs several at a time). Each `gate`
stages the whole release from the report days present, and `publish` never replaces
`latest` with a release that ends on an earlier day: a run overtaken by a later release
rebuilds its release from the current state and publishes that, so the newest complete
release wins and no run ends "done" with its values unpublished.

**Backfill.** The DAG is created paused and does not catch up by itself. Backfill with
`airflow backfill create --dag-id mobility_report --from-date 2020-01-01 --to-date
2020-03-31 --max-active-runs 4` (forwards, never `--run-backwards`: later days wait for the
baseline), with the scheduler running and the DAG unpaused; `scripts/airflow_demo.py`
does all of it.

**On-call rerun of one region and day:** trigger `mobility_region_rerun`.

No data ever goes through XCom or the logs: tasks pass paths and counts of cells.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import CronDataIntervalTimetable, TriggerRule, chain, dag

from dp_ops.airflow.assets import events_alias
from dp_ops.airflow.defaults import DAILY_ARGS, RUN_DAY, bounding_pool, run_deadline
from dp_ops.airflow.operators import (
    BaselineReadySensor,
    BudgetCheckedNoiseOperator,
    GreatExpectationsGateOperator,
    ReportStepOperator,
)
from dp_ops.airflow.tags import Tag, tags
from dp_ops.reports.protocol import Step

REPORT = "mobility"

# The day a run processes: the start of its one-day data interval.
DAY = RUN_DAY


@dag(
    dag_id="mobility_report",
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=datetime(2020, 1, 1, tzinfo=UTC),
    catchup=False,
    is_paused_upon_creation=True,
    # Backfills set their own limit (`airflow backfill create --max-active-runs`); 4 suits
    # a 2-core machine (docs/airflow.md). The ledger and the publish step are safe under
    # concurrency.
    max_active_runs=4,
    default_args=DAILY_ARGS,
    # an alert when a run is not done DP_RUN_DEADLINE_HOURS (6) after being queued
    deadline=run_deadline(REPORT),
    doc_md=__doc__,
    tags=tags(REPORT, Tag.DAILY, Tag.SPENDS_BUDGET, Tag.PUBLISHES),
)
def mobility_report() -> None:
    ingest = ReportStepOperator(task_id="ingest", step=Step.INGEST, day=DAY, report=REPORT)
    # one mapped task instance per user shard (DP_BOUNDING_SHARDS, default 1)
    bound_contributions = ReportStepOperator.partial(
        task_id="bound_contributions", step=Step.BOUND_CONTRIBUTIONS, day=DAY, report=REPORT,
        pool=bounding_pool(),
        ).expand(shard=ingest.output)
    # skips what has nothing to do for the day: report, gate and publish before the first
    # public date, and the baseline wait for those days and once the baseline is frozen
    noise = BudgetCheckedNoiseOperator(task_id="noise", day=DAY, report=REPORT,
                                       skip_unneeded=True)
    baseline = BaselineReadySensor(
        task_id="baseline",
        report=REPORT,
        day=DAY,
        # through an alias: one `mobility_baseline` event, from the poke that froze it
        outlets=[events_alias(REPORT, "baseline")],
        mode="reschedule",
        poke_interval=30,
        timeout=timedelta(hours=12),
    )
    # runs after a baseline wait that succeeded or was skipped (the baseline was frozen)
    report = ReportStepOperator(task_id="report", step=Step.REPORT, day=DAY, report=REPORT,
                                trigger_rule=TriggerRule.NONE_FAILED)
    # Each run stages and promotes the whole release; a publish overtaken by a release
    # ending on a later day rebuilds from the current state, so runs finishing out of
    # order can neither roll the release back nor skip their own values.
    gate = GreatExpectationsGateOperator(task_id="gate", report=REPORT)
    publish = ReportStepOperator(task_id="publish", step=Step.PUBLISH, report=REPORT)

    chain(ingest, bound_contributions, noise, baseline, report, gate, publish)


mobility_report()
