"""A generic operator for the report steps that need no special failure handling."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from dp_ops.execution import load_execution_settings
from dp_ops.operators._runtime import parse_day, resolve

# The step functions this operator can run, and whether each one is per day.
_PER_DAY = {"ingest": True, "bound": True, "report": True, "build_baseline": False,
            "publish": False}


class ReportStepOperator(BaseOperator):
    """Run one step function of a report's ``steps`` module for one day.

    :param step: ``ingest``, ``bound``, ``build_baseline``, ``report`` or ``publish``
        (the function names of :mod:`dp_ops.mobility.steps`).
    :param day: the day to process, ``YYYY-MM-DD`` (templated); ignored by the steps that
        are not per day (``build_baseline`` and ``publish`` work on all days).
    :param report: which report's steps to run (``mobility`` or ``symptoms``).
    :param shard: for ``bound``, the user shard this task instance bounds (the DAGs map
        ``bound_contributions`` over the shard list that ``ingest`` returns:
        ``[0, ..., DP_BOUNDING_SHARDS - 1]``, just integers).

    Pushes only the shard list (``ingest``) and the step's ``StepResult.summary`` to XCom:
    it names paths and counts of cells, never rows, user ids or un-noised aggregates.
    """

    template_fields: Sequence[str] = ("day", "shard")
    ui_color = "#e8f1fb"

    def __init__(self, *, step: str, day: str | None = None, report: str = "mobility",
                 shard: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if step not in _PER_DAY:
            raise ValueError(f"step={step!r}: expected one of {sorted(_PER_DAY)}")
        if _PER_DAY[step] and day is None:
            raise ValueError(f"step={step!r} processes one day: pass day=")
        self.step = step
        self.day = day
        self.report = report
        self.shard = shard

    def execute(self, context: Context) -> str | list[int]:
        rt = resolve(self.report)
        if self.step == "ingest":
            result = rt.steps.ingest(rt.root, rt.cfg, parse_day(self.day))
        elif self.step == "bound":
            result = rt.steps.bound(rt.root, rt.cfg, parse_day(self.day),
                                    shard=None if self.shard is None else int(self.shard))
        elif self.step == "report":
            result = rt.steps.report(rt.root, rt.cfg, parse_day(self.day),
                                     ledger_url=rt.ledger_url)
        elif self.step == "build_baseline":
            result = rt.steps.build_baseline(rt.root, rt.cfg, ledger_url=rt.ledger_url)
        else:  # publish
            result = rt.steps.publish(rt.root, rt.cfg, run_id=context["run_id"],
                                      ledger_url=rt.ledger_url)
        for path in result.paths:
            self.log.info("%s wrote %s", self.step, path)
        self.log.info("%s: %s", self.step, result.summary)
        if self.step == "ingest":
            # the shard list is what bound_contributions maps over (Airflow maps over
            # return values only); the summary stays readable under its own key
            context["ti"].xcom_push(key="summary", value=result.summary)
            return list(range(load_execution_settings().bounding_shards))
        return result.summary
