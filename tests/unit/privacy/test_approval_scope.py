"""The scope of an approval, one field at a time: an approval recorded for one run and one
request (report, kind, region, dates, reason, repeat flag, method version, parameters)
authorises a reservation of exactly that, and nothing wider. Each field is tried two ways,
both refused with :class:`ApprovalMissing` before anything is written:

- the reservation differs in that field but hands over the approved request (the request
  must describe the reservation: :func:`dp_ops.privacy.ledger.approval_mismatch`);
- the reservation differs in that field and hands over a request that describes it, which
  nobody approved (the approval is looked up by run and by the digest of the whole
  request, so a field left out of the digest would let the approval of one request cover
  another).

On SQLite and, when a server is given, PostgreSQL. No test here is statistical.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date, timedelta
from typing import Any

import pytest
from support.spend_requests import spend_request

from dp_ops.errors import ApprovalMissing
from dp_ops.privacy.ledger import (
    ALL_REGIONS,
    VIA_CLI,
    ApprovalRequest,
    Ledger,
    Slot,
    SpendRequest,
)

DAY = date(2020, 3, 1)
CAP = 2.0
RUN = "oncall-1"
RENOISE = ApprovalRequest(report="mobility", kind="renoise", days=(DAY,),
                          reason="raw data corrected", region="R1", method_version="v1")
UPDATE = ApprovalRequest(report="mobility", kind="method_update", days=(DAY,),
                         reason="new method", method_version="v2",
                         parameters=(("factor", "1.5"),))


@pytest.fixture
def ledger(ledger: Ledger) -> Ledger:
    """The shared ledger (tests/unit/conftest.py, on both backends) with the two approvals
    of these tests recorded."""
    for approved in (RENOISE, UPDATE):
        ledger.record_approval(approved, run_id=RUN, requester="alice", approver="bob",
                               via=VIA_CLI)
    return ledger


def _slots(request: ApprovalRequest, extra_scope: str | None = None) -> list[SpendRequest]:
    """The reservation ``request`` describes: each of its days, its region (a method
    update: every region), and ``extra_scope`` beside it."""
    scopes = [request.region or ALL_REGIONS] + ([extra_scope] if extra_scope else [])
    return [spend_request(Slot(request.report, day, 1, "places", scope), 0.1)
            for day in sorted(request.days) for scope in scopes]


def _reserve(led: Ledger, request: ApprovalRequest, *, approval: ApprovalRequest,
             run_id: str = RUN, extra_scope: str | None = None) -> Any:
    """Reserve what ``request`` describes, handing over ``approval``."""
    renoise = request.kind == "renoise"
    return led.reserve(_slots(request, extra_scope), run_id=run_id, kind=request.kind,
                       cap=CAP, method_version=request.method_version,
                       reason=request.reason,
                       refuse_repeat_of=None if request.repeat or not renoise
                       else request.region,
                       approval=approval)


def _refused(led: Ledger, request: ApprovalRequest, **kw: Any) -> None:
    before = (led.head()[0], len(led.spends()))
    with pytest.raises(ApprovalMissing):
        _reserve(led, request, **kw)
    assert (led.head()[0], len(led.spends())) == before, "a refused reservation wrote"


# one change per field of the request, each to a reservation the approval does not cover
RENOISE_CHANGES: dict[str, dict[str, Any]] = {
    "region": {"region": "R2"},
    "dates": {"days": (DAY + timedelta(days=1),)},
    "more dates": {"days": (DAY, DAY + timedelta(days=1))},
    "reason": {"reason": "another reason"},
    "method version": {"method_version": "v9"},
    "report": {"report": "symptoms"},
    "repeat": {"repeat": True},
    "kind": {"kind": "method_update"},
}
UPDATE_CHANGES: dict[str, dict[str, Any]] = {
    "parameters": {"parameters": (("factor", "2.5"),)},
    "method version": {"method_version": "v3"},
    "dates": {"days": (DAY, DAY + timedelta(days=1))},
    "kind": {"kind": "renoise", "region": ALL_REGIONS, "repeat": True},
}


def test_the_approved_requests_are_authorised(ledger: Ledger) -> None:
    """The control: exactly the approved requests reserve."""
    for approved in (RENOISE, UPDATE):
        assert len(_reserve(ledger, approved, approval=approved).new_ids) == 1


def test_an_approval_does_not_authorise_another_run(ledger: Ledger) -> None:
    for approved in (RENOISE, UPDATE):
        _refused(ledger, approved, approval=approved, run_id="oncall-2")


@pytest.mark.parametrize(("approved", "field", "change"),
                         [(RENOISE, f, c) for f, c in RENOISE_CHANGES.items()]
                         + [(UPDATE, f, c) for f, c in UPDATE_CHANGES.items()],
                         ids=[f"renoise-{f}" for f in RENOISE_CHANGES]
                         + [f"method_update-{f}" for f in UPDATE_CHANGES])
def test_an_approval_does_not_authorise_another_request(
        ledger: Ledger, approved: ApprovalRequest, field: str, change: dict[str, Any]
) -> None:
    other = replace(approved, **change)
    # handing over the approved request for a reservation it does not describe
    if field != "parameters":  # (a reservation does not show a method's parameters)
        _refused(ledger, other, approval=approved)
    # handing over a request that describes the reservation, which nobody approved
    _refused(ledger, other, approval=other)


def test_an_approval_of_one_region_does_not_reach_every_region(ledger: Ledger) -> None:
    """A re-noise approved for R1 cannot also re-noise the all-regions slots."""
    _refused(ledger, RENOISE, approval=RENOISE, extra_scope=ALL_REGIONS)
