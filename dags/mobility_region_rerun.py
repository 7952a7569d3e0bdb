"""
# Community Mobility Report — on-call rerun of one region and day

Trigger this DAG from the UI (**Trigger** opens a form) after, for example, a region's raw
data for one day was corrected. It re-ingests and re-bounds that day, then noises, reports,
gates and publishes it again:

- `renoise` off (default): the stored noisy values are reused; nothing is spent.
- `renoise` on: the run first waits in `approve_spend` for another person's approval
  (Browse > Required Actions; the approvers are `DP_SPEND_APPROVERS`, never the user who
  triggered the run), which shows what it will spend and the headroom under the cap;
  Reject skips the rest and spends nothing. Approved, the approval is recorded in the
  ledger, and that region's cells are noised again **through the privacy ledger**, which
  spends budget again and records `reason`; it is refused (task fails, no retry) if the
  region's user-days would go past the cap, or if the ledger holds no approval of this
  run's request (`approve_spend` marked successful by hand approves nothing). A run whose
  requester is not an Airflow user (`airflow dags trigger` records the OS user) is refused.

`validate_request` fails at once if the region is not in `reference/regions.csv`, the date
has not been noised by `mobility_report` yet, or the baseline it needs is missing.

The date travels as a param: a manual run has no logical date, and Airflow refuses a
second run for the same logical date anyway. One rerun at a time.
"""

from __future__ import annotations

from airflow.sdk import chain, dag

from dp_ops.airflow.defaults import (
    ON_CALL_ARGS,
    RERUN_DAY,
    RERUN_REASON,
    RERUN_REGION,
    RERUN_RENOISE,
    RERUN_REPEAT_RENOISE,
    bounding_pool,
    rerun_params,
)
from dp_ops.airflow.operators import (
    BudgetCheckedNoiseOperator,
    GreatExpectationsGateOperator,
    ReportStepOperator,
    SpendApprovalOperator,
    ValidateRerunRequestOperator,
)
from dp_ops.airflow.tags import Tag, tags
from dp_ops.reports.protocol import Step

REPORT = "mobility"

DAY, REGION, RENOISE, REASON = RERUN_DAY, RERUN_REGION, RERUN_RENOISE, RERUN_REASON


@dag(
    dag_id="mobility_region_rerun",
    schedule=None,
    catchup=False,
    is_paused_upon_creation=True,
    max_active_runs=1,
    default_args=ON_CALL_ARGS,
    params=rerun_params("mobility_report"),
    doc_md=__doc__,
    tags=tags(REPORT, Tag.ON_CALL, Tag.SPENDS_BUDGET, Tag.PUBLISHES),
)
def mobility_region_rerun() -> None:
    validate_request = ValidateRerunRequestOperator(
        task_id="validate_request", day=DAY, region=REGION, renoise=RENOISE, reason=REASON,
        retries=0, report=REPORT)
    # with renoise on, waits for another person's approval (DP_SPEND_APPROVERS), showing
    # the spend and the headroom; Reject skips everything below, so nothing is spent
    approve_spend = SpendApprovalOperator(
        task_id="approve_spend", report=REPORT, spend="renoise", day=DAY, region=REGION,
        renoise=RENOISE, repeat_renoise=RERUN_REPEAT_RENOISE, reason=REASON)
    ingest = ReportStepOperator(task_id="ingest", step=Step.INGEST, day=DAY, report=REPORT)
    # one mapped task instance per user shard (DP_BOUNDING_SHARDS, default 1)
    bound_contributions = ReportStepOperator.partial(
        task_id="bound_contributions", step=Step.BOUND_CONTRIBUTIONS, day=DAY, report=REPORT,
        pool=bounding_pool(),
        ).expand(shard=ingest.output)
    noise = BudgetCheckedNoiseOperator(task_id="noise", day=DAY, region=REGION,
                                       renoise=RENOISE, reason=REASON,
                                       repeat_renoise=RERUN_REPEAT_RENOISE, report=REPORT)
    report = ReportStepOperator(task_id="report", step=Step.REPORT, day=DAY, report=REPORT)
    gate = GreatExpectationsGateOperator(task_id="gate", report=REPORT)
    publish = ReportStepOperator(task_id="publish", step=Step.PUBLISH, report=REPORT)

    chain(validate_request, approve_spend, ingest, bound_contributions, noise, report, gate,
          publish)


mobility_region_rerun()
