"""The whole chain of a report in-process, in date order (``python -m dp_ops run``), written
once for every report: per day ingest, bound, noise, the baseline when the report has one
(:class:`~dp_ops.reports.protocol.BaselineSteps`) and report; then one gate and one
publish for all the days."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

from dp_ops.layout import DataRoot
from dp_ops.reports.protocol import BaselineSteps, ReportSteps
from dp_ops.steps.ingest import ingest_sources
from dp_ops.steps.noise_request import RunRequest
from dp_ops.steps.result import StepResult


def run_days(steps: ReportSteps[Any], sources: tuple[str, ...], root: DataRoot, cfg: Any,
             days: list[date], request: RunRequest, *, ledger_url: str,
             on_day: Callable[[date, list[StepResult]], None] | None = None,
             ) -> list[StepResult]:
    """Run ``steps`` (a report's steps module) over ``days``, ingesting its ``sources``
    first; ``on_day`` is called with
    each finished day's results (for progress). The step functions are looked up on
    ``steps`` at call time."""
    results: list[StepResult] = []
    for day in sorted(days):
        day_results = [
            ingest_sources(root, sources, day),
            steps.bound_contributions(root, cfg, day),
            steps.noise(root, cfg, request.for_day(day), ledger_url=ledger_url),
        ]
        if isinstance(steps, BaselineSteps):
            day_results.append(steps.build_baseline(root, cfg, ledger_url=ledger_url))
        day_results.append(steps.report(root, cfg, day, ledger_url=ledger_url))
        results.extend(day_results)
        if on_day is not None:
            on_day(day, day_results)
    results.append(steps.gate(root, cfg, run_id=request.run_id, ledger_url=ledger_url,
                              region=request.region))
    results.append(steps.publish(root, cfg, run_id=request.run_id, ledger_url=ledger_url))
    return results
