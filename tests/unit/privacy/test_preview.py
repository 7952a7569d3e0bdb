"""The spend preview an approver reads (dp_ops.privacy.preview) says what the ledger will do."""

from __future__ import annotations

from datetime import date

import pytest
from support.approvals import reserve_approved
from support.spend_requests import spend_request

from dp_ops.errors import BudgetExceeded
from dp_ops.privacy.ledger import ALL_REGIONS, Ledger, Slot, SpendRequest
from dp_ops.privacy.preview import preview

D1, D2 = date(2020, 3, 1), date(2020, 3, 2)
CAP = 1.0


def _request(day: date, eps: float, metric: str = "places", region: str = "R-1") -> SpendRequest:
    return spend_request(Slot("mobility", day, 1, metric, region), eps)


def test_per_date_cost_and_headroom() -> None:
    p = preview("re-noise R-1", [_request(D1, 0.25), _request(D1, 0.125, "workplaces"),
                                 _request(D2, 0.5)], {D1: 0.5}, CAP)
    assert p.slots == 3
    assert [(d.day, d.spent, d.requested, d.headroom_after) for d in p.days] == [
        (D1, 0.5, 0.375, 0.125), (D2, 0.0, 0.5, 0.5)]
    assert p.fits and p.requested_max == 0.5 and p.tightest is not None
    assert p.tightest.day == D1
    text = p.markdown()
    assert "+0.5000 epsilon per user-day" in text and "least headroom after it 0.1250" in text
    assert "| 2020-03-01 | 0.5000 | 0.3750 | 0.8750 | 1.0000 | 0.1250 |" in text


def test_over_the_cap_says_so() -> None:
    p = preview("re-noise R-1", [_request(D1, 0.6)], {D1: 0.5}, CAP)
    assert not p.fits
    assert "EXCEEDS the cap" in p.summary()
    # the ledger's own words
    assert p.refusal == ("privacy budget refused for date 2020-03-01, slot mobility/2020-03-01/"
                         "level 1/places/region R-1: spent 0.5000 + requested 0.6000 would "
                         "exceed the per-user-day cap 1.0000 for report 'mobility'")


def test_nothing_requested_spends_nothing() -> None:
    p = preview("nothing", [], {}, CAP)
    assert p.fits and p.days == () and "spends nothing" in p.summary()


@pytest.fixture
def ledger_url(sqlite_ledger_url: str) -> str:
    """SQLite only, not both backends as in the rest of tests/unit/privacy: the preview's
    sums are the ledger's own, and test_ledger_reserve.py checks the cap on both."""
    return sqlite_ledger_url


@pytest.mark.parametrize("extra", [0.2, 0.25, 0.25 + 1e-6, 0.3])
def test_the_preview_agrees_with_the_ledgers_refusal(ledger: Ledger, extra: float) -> None:
    """Whatever the preview says fits is what the ledger accepts (the same sum per date,
    the same tolerance), at and around the cap."""
    ledger.reserve([spend_request(Slot("mobility", D1, 1, "places", ALL_REGIONS), 0.75)],
                   run_id="daily", kind="noise", cap=CAP, method_version="v1")
    request = [_request(D1, extra)]
    p = preview("re-noise", request, {D1: ledger.spent("mobility", D1)}, CAP)
    if p.fits:
        reserve_approved(ledger, request, run_id="oncall", kind="renoise", cap=CAP,
                         method_version="v1", reason="test")
    else:
        with pytest.raises(BudgetExceeded):
            reserve_approved(ledger, request, run_id="oncall", kind="renoise", cap=CAP,
                             method_version="v1", reason="test")
    assert p.fits == (extra <= 0.25)
