"""Sensors that express data dependencies between runs (no sleeps in task code)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, Context
from airflow.sdk.bases.skipmixin import SkipMixin

from dp_ops.airflow.operators.steps import emit_events, skip_downstream
from dp_ops.airflow.runtime import parse_day
from dp_ops.errors import BadRequest


class BaselineReadySensor(BaseSensorOperator, SkipMixin):
    """Freeze the report's baseline as soon as it can be, and wait for it, for days that
    need it.

    Days before ``cfg.first_public_date`` publish nothing: no change against the
    baseline, no release row. The daily DAG's noise task skips this sensor and what
    follows for them (``skip_unneeded``); run for such a day anyway (cleared alone in the
    UI, say), the sensor succeeds at once and skips every task downstream of it
    (``report``, ``gate``, ``publish``), as a short-circuit does.
    Later days need ``DataRoot.baseline_file(report)``:
    each poke that does not find it runs the report's ``build_baseline`` step, which
    freezes the baseline once every day of the baseline window is noised (by any run;
    the first to freeze it wins, see ``store_first_wins``) and does nothing otherwise.
    One task instead of a build task plus a wait task saves a task process per daily run.

    Use ``mode="reschedule"``: between pokes the sensor frees its worker slot, so a waiting
    run does not starve the runs that noise the baseline window.

    The report must declare a baseline (:class:`~dp_ops.reports.declared.Baseline`).

    :param report: the report whose baseline the run waits for.
    :param day: the day the run reports, ``YYYY-MM-DD`` (templated).
    """

    template_fields: Sequence[str] = ("day",)

    def __init__(self, *, report: str, day: str, **kwargs: Any) -> None:
        from dp_ops.reports.spec import report_spec

        super().__init__(**kwargs)
        self.report = report_spec(report).name
        self.day = day

    def execute(self, context: Context) -> Any:
        from dp_ops.reports.registry import declared_report
        from dp_ops.reports.spec import report_spec

        report = declared_report(report_spec(self.report))
        cfg = report.load_config()
        day = parse_day(self.day)
        if report.needs_baseline(cfg, day):
            return super().execute(context)
        skip_downstream(self, context, self.get_flat_relative_ids(upstream=False),
                        f"{day} is before the first public date {cfg.first_public_date}: "
                        "nothing of it is published")
        return None

    def poke(self, context: Context) -> bool:
        from dp_ops.airflow.runtime import load

        rt = load(self.report)
        if rt.report.baseline is None:
            raise BadRequest(f"report={rt.name!r} has no baseline to wait for")
        path = rt.root.baseline_file(rt.name)
        if path.exists():
            self.log.info("baseline ready: %s", path)
            return True
        result = rt.build_baseline()
        self.log.info("build_baseline: %s", result.summary)
        emit_events(self, context, result.event)  # once: only the poke that froze it
        if path.exists():
            return True
        self.log.info("baseline not frozen yet (%s missing): its window is not fully "
                      "noised", path)
        return False
