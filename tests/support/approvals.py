"""Approvals for tests that spend beyond the daily run (issue 31, point 4).

A ``renoise`` or ``method_update`` reservation needs an approval of its run and its exact
request recorded in the ledger (what the DAGs' ``approve_spend`` task records when an
approver answers Approve). Tests that make such spends directly record one here first, as
``requester`` and ``approver``, two different people.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from dp_ops.privacy.ledger import (
    ALL_REGIONS,
    VIA_CLI,
    ApprovalRequest,
    Ledger,
    Reservation,
    SpendRequest,
)

REQUESTER, APPROVER = "requester", "approver"


def request_of(requests: Sequence[SpendRequest], *, kind: str, reason: str = "",
               method_version: str, refuse_repeat_of: str | None = None) -> ApprovalRequest:
    """The approval request that describes a ledger-level reservation: its report, dates
    and version; for a re-noise the region it checks for repeats, else its finest scope
    (and then it is a repeat, as the reservation checks none)."""
    (report,) = {r.slot.report for r in requests}
    region = None
    if kind == "renoise":
        scopes = [r.slot.region_scope for r in requests]
        region = refuse_repeat_of or next((s for s in scopes if s != ALL_REGIONS),
                                          ALL_REGIONS)
    return ApprovalRequest(report=report, kind=kind,
                           days=tuple(sorted({r.slot.day for r in requests})),
                           reason=reason or "test spend", region=region,
                           repeat=kind == "renoise" and refuse_repeat_of is None,
                           method_version=method_version)


def approve(ledger: Ledger, request: ApprovalRequest, run_id: str) -> ApprovalRequest:
    ledger.record_approval(request, run_id=run_id, requester=REQUESTER, approver=APPROVER,
                           via=VIA_CLI)
    return request


def reserve_approved(ledger: Ledger, requests: Sequence[SpendRequest], **kw: Any
                     ) -> Reservation:
    """``ledger.reserve(requests, **kw)`` with an approval of exactly that reservation
    recorded first. An empty reason is made ``"test spend"`` (an approval needs one)."""
    kw["reason"] = kw.get("reason") or "test spend"
    request = request_of(requests, kind=kw["kind"], reason=kw["reason"],
                         method_version=kw["method_version"],
                         refuse_repeat_of=kw.get("refuse_repeat_of"))
    return ledger.reserve(requests, approval=approve(ledger, request, kw["run_id"]), **kw)


def approve_renoise(root: Any, ledger_url: str, plan: Any, day: date, region: str,
                    reason: str, *, run_id: str, repeat: bool = False) -> ApprovalRequest:
    """Record, through the data root's ledger binding, the approval a re-noise of
    ``region`` on ``day`` by ``run_id`` needs (the request
    :func:`dp_ops.steps.noising.noise_day` checks)."""
    from dp_ops.steps.ledger_binding import closing_ledger, open_ledger
    from dp_ops.steps.noising import renoise_request

    with closing_ledger(open_ledger(root, ledger_url)) as ledger:
        return approve(ledger, renoise_request(plan, day, region, reason, repeat), run_id)


def approve_method_update(root: Any, ledger_url: str, cfg: Any, update: Any, *,
                          run_id: str) -> ApprovalRequest:
    """Record the approval a method update by ``run_id`` needs (the request
    :func:`dp_ops.reports.mobility.method_update_step.run_method_update` checks)."""
    from dp_ops.reports.mobility.method_update_step import approval_request
    from dp_ops.steps.ledger_binding import closing_ledger, open_ledger

    with closing_ledger(open_ledger(root, ledger_url)) as ledger:
        return approve(ledger, approval_request(cfg, update), run_id)
