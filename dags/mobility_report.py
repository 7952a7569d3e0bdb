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

The DAG is built from the report's spec by `dp_ops.airflow.dag_factory`; its tasks are
thin calls into the report declared in `dp_ops.reports.mobility.declaration`.

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

from dp_ops.airflow.dag_factory import daily_report_dag
from dp_ops.reports.spec import report_spec

mobility_report = daily_report_dag(report_spec("mobility"), doc_md=__doc__)
