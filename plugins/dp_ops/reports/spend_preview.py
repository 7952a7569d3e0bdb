"""The cost of an extra spend of a report, read from the ledger before it is approved.

A re-noise of one region-day and a mobility method update spend budget beyond the daily
run; the DAGs that do them pause for an approval that shows this preview
(:class:`dp_ops.privacy.preview.SpendPreview`): the slots the step would reserve, computed
by the step's own planning function, against what each date has spent and the cap
recorded in the ledger (the configured one before the first spend).
"""

from __future__ import annotations

from datetime import date

from dp_ops.privacy.ledger import SpendRequest
from dp_ops.privacy.preview import SpendPreview, preview
from dp_ops.reports.protocol import MethodUpdateForm
from dp_ops.reports.registry import AnyReport
from dp_ops.steps.ledger_binding import open_ledger


def _preview(report: AnyReport, what: str, requests: list[SpendRequest]) -> SpendPreview:
    ledger = open_ledger(report.root, report.ledger_url)
    try:
        days = {r.slot.day for r in requests}
        spent = {day: ledger.spent(report.name, day) for day in days}
        policy = ledger.policy(report.name)
    finally:
        ledger.dispose()
    cap = policy.cap if policy is not None else report.cap
    return preview(what, requests, spent, cap)


def renoise_preview(report: AnyReport, day: date, region: str) -> SpendPreview:
    """What re-noising ``region`` (and its ancestors) on ``day`` spends."""
    from dp_ops.regions import read_regions
    from dp_ops.steps.noising import plan_requests

    plan = report.noise_plan()
    requests = plan_requests(plan, read_regions(report.root.regions_csv), day, region)
    return _preview(report, f"re-noise of {report.name} {day} region {region}", requests)


def method_update_preview(report: AnyReport, form: MethodUpdateForm) -> SpendPreview:
    """What a method update of ``report`` spends (on every date of its comparison
    window); a report without method updates is a ``BadRequest``."""
    what, requests = report.method_update_spends(form)
    return _preview(report, what, requests)
