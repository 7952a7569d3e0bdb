"""The report DAGs, built from a report's spec: every report gets the same daily DAG and the
same on-call rerun DAG, so a DAG file is its documentation and one call::

    from dp_ops.airflow.dag_factory import daily_report_dag
    from dp_ops.reports.spec import report_spec

    mobility_report = daily_report_dag(report_spec("mobility"), doc_md=__doc__)

The daily chain is ``ingest`` -> ``bound_contributions`` (mapped over the user shards) ->
``noise`` -> [``baseline``] -> ``report`` -> ``gate`` -> ``publish``. The ``baseline``
wait is there for a report that declares the ``baseline`` asset (and so a
:class:`~dp_ops.reports.declared.Baseline`); ``noise`` skips what has nothing to do
for the day (the report's ``skipped_after_noise``), so ``report`` runs after a wait that
succeeded or was skipped, never after a failed one. The rerun DAG puts
``validate_request`` and ``approve_spend`` in front of the same steps and passes the form's
region, re-noise flag and reason down. Building a DAG reads only the spec: no report code,
no pandas, no data root.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, BaseOperator, CronDataIntervalTimetable, TriggerRule, chain, dag

from dp_ops.airflow.assets import events_alias
from dp_ops.airflow.defaults import (
    DAILY_ARGS,
    ON_CALL_ARGS,
    RERUN_DAY,
    RERUN_REASON,
    RERUN_REGION,
    RERUN_RENOISE,
    RERUN_REPEAT_RENOISE,
    RUN_DAY,
    bounding_pool,
    rerun_params,
    run_deadline,
)
from dp_ops.airflow.operators import (
    BaselineReadySensor,
    BudgetCheckedNoiseOperator,
    GreatExpectationsGateOperator,
    ReportStepOperator,
    SpendApprovalOperator,
    ValidateRerunRequestOperator,
)
from dp_ops.airflow.tags import Tag, tags
from dp_ops.reports.protocol import Step
from dp_ops.reports.spec import ReportSpec

# The asset a report declares when it has a frozen baseline (a declared Baseline).
BASELINE_ASSET = "baseline"


# What every rerun DAG's page says after its report's own paragraphs.
RERUN_DOC = """
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

The date travels as a param: a manual run has no logical date, and Airflow refuses a
second run for the same logical date anyway. One rerun at a time.
"""


def rerun_dag_id(spec: ReportSpec) -> str:
    """The id of a report's on-call rerun DAG."""
    return f"{spec.name}_region_rerun"


def daily_report_dag(spec: ReportSpec, *, doc_md: str | None = None) -> DAG:
    """The report's daily DAG (``spec.daily_dag_id``): one run per day, the run's data
    interval (00:00-24:00 UTC) being the day it processes; created paused, no catch-up
    (backfills are explicit), an alert when a run is not done in time."""
    name = spec.name

    @dag(
        dag_id=spec.daily_dag_id,
        schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
        start_date=datetime(2020, 1, 1, tzinfo=UTC),
        catchup=False,
        is_paused_upon_creation=True,
        # Backfills set their own limit (`airflow backfill create --max-active-runs`); 4
        # suits a 2-core machine (docs/airflow.md). The ledger and the publish step are
        # safe under concurrency.
        max_active_runs=4,
        default_args=DAILY_ARGS,
        # an alert when a run is not done DP_RUN_DEADLINE_HOURS (6) after being queued
        deadline=run_deadline(name),
        doc_md=doc_md,
        tags=tags(name, Tag.DAILY, Tag.SPENDS_BUDGET, Tag.PUBLISHES),
    )
    def daily() -> None:
        ingest, bound = _ingest_and_bound(name, RUN_DAY)
        # skips what has nothing to do for the day (say, report, gate and publish before
        # the first public date, and the baseline wait once the baseline is frozen)
        noise = BudgetCheckedNoiseOperator(task_id="noise", day=RUN_DAY, report=name,
                                           skip_unneeded=True)
        tail = _report_gate_publish(name, RUN_DAY, region=None,
                                    after_wait=BASELINE_ASSET in spec.assets)
        if BASELINE_ASSET in spec.assets:
            baseline = BaselineReadySensor(
                task_id="baseline", report=name, day=RUN_DAY,
                # through an alias: one baseline event, from the poke that froze it
                outlets=[events_alias(name, BASELINE_ASSET)],
                mode="reschedule", poke_interval=30, timeout=timedelta(hours=12))
            chain(ingest, bound, noise, baseline, *tail)
        else:
            chain(ingest, bound, noise, *tail)

    built: DAG = daily()
    return built


def region_rerun_dag(spec: ReportSpec, *, doc_md: str | None = None) -> DAG:
    """The report's on-call rerun of one region and day, triggered from the form
    (:func:`dp_ops.airflow.defaults.rerun_params`); one at a time, no deadline (it may
    wait a day for an approval). Its page is ``doc_md`` (a heading line, then what is
    particular to the report) with :data:`RERUN_DOC` after the heading."""
    name = spec.name

    @dag(
        dag_id=rerun_dag_id(spec),
        schedule=None,
        catchup=False,
        is_paused_upon_creation=True,
        max_active_runs=1,
        default_args=ON_CALL_ARGS,
        params=rerun_params(spec.daily_dag_id),
        doc_md=_rerun_doc(doc_md or f"# {spec.title}: on-call rerun"),
        tags=tags(name, Tag.ON_CALL, Tag.SPENDS_BUDGET, Tag.PUBLISHES),
    )
    def rerun() -> None:
        validate_request = ValidateRerunRequestOperator(
            task_id="validate_request", day=RERUN_DAY, region=RERUN_REGION,
            renoise=RERUN_RENOISE, reason=RERUN_REASON, report=name, retries=0)
        # with renoise on, waits for another person's approval (DP_SPEND_APPROVERS),
        # showing the spend and the headroom; Reject skips everything below, so nothing
        # is spent
        approve_spend = SpendApprovalOperator(
            task_id="approve_spend", report=name, spend="renoise", day=RERUN_DAY,
            region=RERUN_REGION, renoise=RERUN_RENOISE,
            repeat_renoise=RERUN_REPEAT_RENOISE, reason=RERUN_REASON)
        ingest, bound = _ingest_and_bound(name, RERUN_DAY)
        noise = BudgetCheckedNoiseOperator(
            task_id="noise", day=RERUN_DAY, region=RERUN_REGION, renoise=RERUN_RENOISE,
            reason=RERUN_REASON, repeat_renoise=RERUN_REPEAT_RENOISE, report=name)
        chain(validate_request, approve_spend, ingest, bound, noise,
              *_report_gate_publish(name, RERUN_DAY, region=RERUN_REGION, after_wait=False))

    built: DAG = rerun()
    return built


def _rerun_doc(doc_md: str) -> str:
    heading, _, rest = doc_md.strip().partition("\n")
    return "\n\n".join(p for p in (heading, RERUN_DOC.strip(), rest.strip()) if p) + "\n"


def _ingest_and_bound(name: str, day: str) -> tuple[BaseOperator, Any]:
    # both run on the engine (DP_ENGINE): with Spark, in the cluster's pool of jobs
    ingest = ReportStepOperator(task_id="ingest", step=Step.INGEST, day=day, report=name,
                                pool=bounding_pool())
    # one mapped task instance per user shard (DP_BOUNDING_SHARDS, default 1)
    bound = ReportStepOperator.partial(
        task_id="bound_contributions", step=Step.BOUND_CONTRIBUTIONS, day=day, report=name,
        pool=bounding_pool(),
    ).expand(shard=ingest.output)
    return ingest, bound


def _report_gate_publish(name: str, day: str, *, region: str | None,
                         after_wait: bool) -> list[BaseOperator]:
    # after a baseline wait, report runs when the wait succeeded or was skipped (frozen)
    report = ReportStepOperator(
        task_id="report", step=Step.REPORT, day=day, report=name,
        trigger_rule=TriggerRule.NONE_FAILED if after_wait else TriggerRule.ALL_SUCCESS)
    # Each run stages and promotes the whole release; a publish overtaken by a release
    # ending on a later day rebuilds from the current state, so runs finishing out of
    # order can neither roll the release back nor skip their own values.
    gate = GreatExpectationsGateOperator(task_id="gate", report=name, region=region)
    publish = ReportStepOperator(task_id="publish", step=Step.PUBLISH, report=name)
    return [report, gate, publish]
