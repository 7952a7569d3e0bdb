"""
# Community Mobility Report — method update

Trigger this DAG from the UI (**Trigger** opens a form) when the metric computation changes
from an effective date (a new method version). Without it, published percent changes would
jump at that date against the frozen baseline (mobility paper, section 5).

- `approve_spend`: the run waits for another person's approval (Browse > Required
  Actions; the approvers are `DP_SPEND_APPROVERS`, never the user who triggered the run),
  which shows the spend on every date of the comparison window and the headroom under the
  cap. Reject skips the rest: nothing is spent. Approve records the approval in the
  ledger; `method_update` spends only against that record (the task marked successful by
  hand approves nothing), and a run whose requester is not an Airflow user is refused.
- `method_update`: for each (level, region, category, weekday) over the 4 weeks before
  `effective_date`, sums the stored noisy metrics (s_g) and the same metrics recomputed
  with the new method from the bounded data (s_n), noised with 10% of the cell epsilon
  **through the privacy ledger** (kind `method_update`, recorded with `method_version`
  and `reason`, on every date of those 4 weeks). It stores s_g, s_n and the factor
  s_n / s_g under `baseline/mobility/method_updates/<method_version>.parquet`; reports
  from `effective_date` on scale the baseline of `categories` by it (the baseline itself
  is never recomputed). Days already reported from `effective_date` are re-reported.
- `gate`, `publish`: republish the release with those days.

`factor` is the demo's stand-in for the new method: the chosen categories' counts are
`factor` times the old ones. Residential (a ratio) cannot be updated this way.

**Failures.** A budget refusal (the cap holds headroom for one method update) or a bad
request fails at once, without retry, and stores nothing. Rerunning the same
`method_version` reuses the stored factors and spends nothing; reusing a version with
other settings is refused. One update at a time.
"""

from __future__ import annotations

from airflow.sdk import Param, chain, dag

from dp_ops.airflow.defaults import ON_CALL_ARGS
from dp_ops.airflow.operators import (
    GreatExpectationsGateOperator,
    MethodUpdateOperator,
    ReportStepOperator,
    SpendApprovalOperator,
)
from dp_ops.airflow.tags import Tag, tags
from dp_ops.reports.mobility.config import PUBLISHED_CATEGORIES
from dp_ops.reports.protocol import Step

REPORT = "mobility"

COUNT_CATEGORIES = [c for c in PUBLISHED_CATEGORIES if c != "residential"]


@dag(
    dag_id="mobility_method_update",
    schedule=None,
    catchup=False,
    is_paused_upon_creation=True,
    max_active_runs=1,
    default_args=ON_CALL_ARGS,
    params={
        "method_version": Param(type="string", pattern="^[A-Za-z0-9._-]{1,64}$",
                                title="New method version",
                                description="Recorded with every ledger spend; names the "
                                            "stored factors file."),
        "effective_date": Param(type="string", format="date", title="Effective date",
                                description="First day computed with the new method "
                                            "(YYYY-MM-DD)."),
        "categories": Param(type="array", minItems=1, uniqueItems=True,
                            items={"type": "string", "enum": COUNT_CATEGORIES},
                            title="Categories",
                            description="Published categories whose computation changes."),
        "factor": Param(type="number", exclusiveMinimum=0, title="Factor (demo)",
                        description="Stand-in for the new method: its counts for the "
                                    "categories are this many times the old ones."),
        "reason": Param(type="string", minLength=3, title="Reason",
                        description="Why the method changed; recorded with the spends."),
    },
    doc_md=__doc__,
    tags=tags(REPORT, Tag.ON_CALL, Tag.SPENDS_BUDGET, Tag.PUBLISHES),
)
def mobility_method_update() -> None:
    # waits for another person's approval (DP_SPEND_APPROVERS), showing the spend per
    # date and the headroom; Reject skips everything below, so nothing is spent
    approve_spend = SpendApprovalOperator(
        task_id="approve_spend", report=REPORT, spend="method_update",
        method_version="{{ params.method_version }}",
        effective_date="{{ params.effective_date }}", categories="{{ params.categories }}",
        factor="{{ params.factor }}", reason="{{ params.reason }}")
    method_update = MethodUpdateOperator(
        task_id="method_update", report=REPORT, method_version="{{ params.method_version }}",
        effective_date="{{ params.effective_date }}", categories="{{ params.categories }}",
        factor="{{ params.factor }}", reason="{{ params.reason }}")
    gate = GreatExpectationsGateOperator(task_id="gate", report=REPORT)
    publish = ReportStepOperator(task_id="publish", step=Step.PUBLISH, report=REPORT)

    chain(approve_spend, method_update, gate, publish)


mobility_method_update()
