"""A generic operator for the report steps that need no special failure handling."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.bases.skipmixin import SkipMixin

from dp_ops.airflow.links import ReleasePageLink
from dp_ops.airflow.runtime import load, parse_day, refusals_fail_without_retry
from dp_ops.reports.protocol import Step
from dp_ops.reports.spec import report_spec


def emit_events(task: BaseOperator, context: Context,
                event: Mapping[str, str | float | int] | None) -> None:
    """Add one asset event through each of ``task``'s asset-alias outlets, if the step
    reported one (``StepResult.event``); nothing otherwise."""
    if event is None:
        return
    from airflow.sdk import AssetAlias

    from dp_ops.airflow.assets import alias_targets

    targets = alias_targets()
    for outlet in task.outlets:
        if isinstance(outlet, AssetAlias) and outlet.name in targets:
            asset = targets[outlet.name]
            context["outlet_events"][outlet].add(asset, extra=dict(event))
            task.log.info("asset event for %s: %s", asset.name, dict(event))


def skip_downstream(task: BaseOperator, context: Context, task_ids: Collection[str],
                    why: str) -> None:
    """Skip the tasks downstream of ``task`` whose ids are in ``task_ids`` (Airflow marks
    them skipped and starts no process for them) and log which and ``why``; nothing when
    none is downstream. Raises Airflow's ``DownstreamTasksSkipped`` when it skips: the
    task ends as a success."""
    assert isinstance(task, SkipMixin), f"{type(task).__name__} cannot skip tasks"
    tasks = [t for t in task.get_flat_relatives(upstream=False) if t.task_id in task_ids]
    if tasks:
        task.log.info("%s: skipping %s", why, ", ".join(sorted(t.task_id for t in tasks)))
        task.skip(ti=context["ti"], tasks=tasks)


class ReportStepOperator(BaseOperator):
    """Run one step of a report (:class:`dp_ops.reports.registry.BoundReport`) for one day.

    :param report: which report's steps to run (required).
    :param step: which step (:class:`dp_ops.reports.protocol.Step`, whose value is the
        task id the DAGs use): ``ingest``, ``bound_contributions``, ``report`` or
        ``publish``.
    :param day: the day to process, ``YYYY-MM-DD`` (templated); required by every step
        but ``publish``, which promotes the whole staged release.
    :param shard: for ``bound_contributions``, the user shard this task instance bounds
        (the DAGs map it over the shard list that ``ingest`` returns:
        ``[0, ..., DP_BOUNDING_SHARDS - 1]``, just integers).

    Pushes only the shard list (``ingest``) and the step's ``StepResult.summary`` to XCom:
    it names paths and counts of cells, never rows, user ids or un-noised aggregates.
    """

    template_fields: Sequence[str] = ("day", "shard")
    ui_color = "#e8f1fb"
    # publish tasks only (set in __init__): a link to the release page, served by the
    # "Privacy budget" plugin. Airflow writes an XCom per link after every task instance,
    # an Execution API call each (729 of the demo's 8,065 calls when every step had it).
    operator_extra_links: tuple[ReleasePageLink, ...] = ()

    def __init__(self, *, report: str, step: Step | str, day: str | None = None,
                 shard: int | None = None, **kwargs: Any) -> None:
        step = Step(step)  # a ValueError naming the bad value at parse time
        if step is not Step.PUBLISH and day is None:
            raise ValueError(f"step={step.value!r} processes one day: pass day=")
        if step is Step.PUBLISH and "outlets" not in kwargs:
            # every publish task announces a new `latest` (docs/airflow.md, Assets)
            from dp_ops.airflow.assets import events_alias

            kwargs["outlets"] = [events_alias(report)]
        super().__init__(**kwargs)
        self.report = report_spec(report).name
        self.step = step.value
        self.day = day
        self.shard = shard
        if step is Step.PUBLISH:
            self.operator_extra_links = (ReleasePageLink(),)

    def execute(self, context: Context) -> str | list[int]:
        step = Step(self.step)
        with refusals_fail_without_retry(self.log):
            bound = load(self.report)
            if step is Step.PUBLISH:
                result = bound.publish(run_id=context["run_id"])
            else:
                day = parse_day(self.day)
                match step:
                    case Step.INGEST:
                        result = bound.ingest(day)
                    case Step.BOUND_CONTRIBUTIONS:
                        shard = None if self.shard is None else int(self.shard)
                        result = bound.bound(day, shard=shard)
                    case Step.REPORT:
                        result = bound.report_day(day)
        for path in result.paths:
            self.log.info("%s wrote %s", step.value, path)
        self.log.info("%s: %s", step.value, result.summary)
        emit_events(self, context, result.event)
        if step is Step.INGEST:
            # the shard list is what bound_contributions maps over (Airflow maps over
            # return values only); the summary stays readable under its own key
            context["ti"].xcom_push(key="summary", value=result.summary)
            return list(range(bound.settings.bounding_shards))
        return result.summary
