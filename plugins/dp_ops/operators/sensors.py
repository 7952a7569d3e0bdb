"""Sensors that express data dependencies between runs (no sleeps in task code)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, Context

from dp_ops.operators._runtime import parse_day, resolve


class BaselineReadySensor(BaseSensorOperator):
    """Wait until the report's frozen baseline exists, for days that need it.

    Days before ``cfg.first_public_date`` publish no change against the baseline, so the
    sensor succeeds at once for them. Later days wait until
    ``DataRoot.baseline_file(report)`` exists: the baseline is frozen by ``build_baseline``
    once every day of the baseline window is noised, which may happen in another run.

    Use ``mode="reschedule"``: between pokes the sensor frees its worker slot, so a waiting
    run does not starve the runs that noise the baseline window.

    :param day: the day the run reports, ``YYYY-MM-DD`` (templated).
    :param report: which report (``mobility``).
    """

    template_fields: Sequence[str] = ("day",)

    def __init__(self, *, day: str, report: str = "mobility", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.day = day
        self.report = report

    def poke(self, context: Context) -> bool:
        rt = resolve(self.report)
        day = parse_day(self.day)
        if day < rt.cfg.first_public_date:
            self.log.info("%s is before the first public date %s: no baseline needed",
                          day, rt.cfg.first_public_date)
            return True
        path = rt.root.baseline_file(self.report)
        if path.exists():
            self.log.info("baseline ready: %s", path)
            return True
        self.log.info("baseline not frozen yet (%s missing): the baseline window "
                      "%s..%s is not fully noised", path, rt.cfg.baseline_start,
                      rt.cfg.baseline_end)
        return False
