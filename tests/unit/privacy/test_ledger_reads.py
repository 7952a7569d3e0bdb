"""What the ledger gives back (dp_ops.privacy.ledger): the derived-file records a release is
verified against, the chain head, approvals, and the two texts an operator reads
(``ledger`` and ``ledger --summary``), pinned exactly. On SQLite and, with a server, on
PostgreSQL (conftest.py). No test here is statistical."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from support.approvals import approve, request_of
from support.spend_requests import spend_request

from dp_ops.errors import ApprovalMissing
from dp_ops.privacy.ledger import (
    Ledger,
    Slot,
    safe_url,
)
from dp_ops.privacy.ledger_schema import GENESIS

SHA = [f"{i:x}" * 64 for i in range(1, 6)]


def test_derived_records_are_read_per_report_name_and_version(ledger: Ledger) -> None:
    ledger.record_derived("mobility", "x_1", SHA[0])
    ledger.record_derived("mobility", "x_1", SHA[1], replaces=SHA[0])
    ledger.record_derived("mobility", "x_1", SHA[0], replaces=SHA[1])  # back to a version
    ledger.record_derived("mobility", "xy1", SHA[2])   # "_" is no wildcard in the prefix
    ledger.record_derived("mobility", "base", SHA[3])
    ledger.record_derived("symptoms", "x_1", SHA[4])
    assert ledger.derived_versions("mobility", "x_1") == [SHA[0], SHA[1], SHA[0]]
    assert ledger.derived_sha256("mobility", "x_1") == SHA[0]
    assert ledger.derived_sha256("mobility", "nothing") is None
    assert ledger.derived_names("mobility") == ["base", "x_1", "xy1"]
    assert ledger.derived_names("other") == []
    assert ledger.derived_current("mobility", "x_") == {"x_1": SHA[0]}
    assert ledger.derived_current("mobility", "x") == {"x_1": SHA[0], "xy1": SHA[2]}
    assert ledger.derived_current("symptoms", "") == {"x_1": SHA[4]}


def test_the_head_and_each_link_of_the_chain(ledger: Ledger) -> None:
    seq, head = ledger.head()
    assert seq >= 0 and (seq > 0 or head == GENESIS)
    ledger.reserve([spend_request(Slot("mobility", date(2020, 3, 1), 1, "a"), 0.1)],
                   run_id="r", kind="noise", cap=1.0, method_version="v1")
    after, tip = ledger.head()
    assert after > seq and tip != head and len(tip) == 64
    assert ledger.chain_sha256(after) == tip
    assert ledger.chain_sha256(after + 1) is None
    if seq:
        assert ledger.chain_sha256(seq) == head


def test_an_approval_is_required_of_exactly_its_run_and_request(ledger: Ledger) -> None:
    requests = [spend_request(Slot("mobility", date(2020, 3, 1), 1, "a", "R1"), 0.1)]
    request = request_of(requests, kind="renoise", reason="why", method_version="v1")
    with pytest.raises(ApprovalMissing) as err:
        ledger.require_approval(request, run_id="run-1")
    assert "by run 'run-1': no approval is recorded in the ledger for this run and this " \
        "exact request (sha256 " + request.sha256()[:16] + "...)" in str(err.value)
    assert str(err.value).endswith("Nothing was spent")
    approve(ledger, request, "run-1")
    approve(ledger, request, "run-2")
    found = ledger.require_approval(request, run_id="run-1")
    assert (found.run_id, found.request_sha256) == ("run-1", request.sha256())
    assert [a.run_id for a in ledger.approvals()] == ["run-1", "run-2"]
    assert [a.run_id for a in ledger.approvals("run-2")] == ["run-2"]


def test_spent_totals_and_policies(ledger: Ledger) -> None:
    d1, d2 = date(2020, 3, 1), date(2020, 3, 2)
    for report, day, eps in (("mobility", d1, 0.1), ("mobility", d1, 0.2),
                             ("mobility", d2, 0.3), ("symptoms", d1, 0.5)):
        ledger.reserve([spend_request(Slot(report, day, 1, f"m{eps}"), eps)], run_id="r",
                       kind="noise", cap=1.0, method_version="v1")
    assert ledger.spent("mobility", d1) == pytest.approx(0.3, abs=1e-15)
    assert ledger.spent("mobility", date(2020, 3, 9)) == 0
    assert ledger.totals("mobility") == {("mobility", d1): pytest.approx(0.3, abs=1e-15),
                                         ("mobility", d2): 0.3}
    assert list(ledger.totals()) == [("mobility", d1), ("mobility", d2), ("symptoms", d1)]
    ledger.set_policy("mobility", reason="tighter", run_id="op", cap=0.9)
    assert [(p.report, p.cap) for p in ledger.policies()] == [
        ("mobility", 1.0), ("symptoms", 1.0), ("mobility", 0.9)]


def test_a_url_is_shown_without_its_password() -> None:
    assert safe_url("postgresql+psycopg://dp:s3cret@db:5432/ledger") == (
        "postgresql+psycopg://dp:***@db:5432/ledger")
    assert safe_url("sqlite:////data/ledger.sqlite") == "sqlite:////data/ledger.sqlite"
    assert safe_url("not a url") == "(the configured ledger URL)"


def test_a_spend_carries_its_stored_record(ledger: Ledger) -> None:
    ledger.reserve([spend_request(Slot("mobility", date(2020, 3, 1), 1, "a"), 0.1),
                    spend_request(Slot("mobility", date(2020, 3, 1), 1, "b"), 0.1)],
                   run_id="r", kind="noise", cap=1.0, method_version="v1")
    first, second = ledger.spends()
    ledger.record_stored(first.id, SHA[0], 7)
    assert [(s.stored_sha256, s.stored_cells) for s in ledger.spends()] == [(SHA[0], 7),
                                                                           (None, None)]


def test_the_databases_refusals_say_what_was_refused(ledger_url: str) -> None:
    import sqlalchemy as sa

    from dp_ops.privacy.ledger_schema import VERSION_TABLE

    led = Ledger(ledger_url)
    led.reserve([spend_request(Slot("mobility", date(2020, 3, 1), 1, "a"), 0.1)],
                run_id="r", kind="noise", cap=1.0, method_version="v1")
    led.dispose()
    sqlite = ledger_url.startswith("sqlite")
    forward = "the ledger migration version only moves forward: "
    cases = [
        ("UPDATE budget_spend SET epsilon = 0",
         "the ledger is append-only: UPDATE of budget_spend refused"),
        ("DELETE FROM budget_spend", "the ledger is append-only: DELETE of budget_spend refused"),
        (f"DELETE FROM {VERSION_TABLE}", forward + "DELETE refused"),
        (f"UPDATE {VERSION_TABLE} SET version_num = '0001'",
         forward + ("UPDATE to an earlier or the same revision refused" if sqlite
                    else "UPDATE refused")),
        (f"INSERT INTO {VERSION_TABLE} (version_num) VALUES ('0003')",
         forward + ("INSERT of a second row refused" if sqlite else "INSERT refused")),
    ]
    engine = sa.create_engine(ledger_url)
    try:
        for statement, message in cases:
            with pytest.raises(sa.exc.DBAPIError) as err:
                with engine.begin() as conn:
                    conn.exec_driver_sql(statement)
            assert message in str(err.value), statement
    finally:
        engine.dispose()


@pytest.mark.parametrize("kw, message", [
    ({"cap": 0.0}, "cap=0.0: must be a finite number > 0"),
    ({"cap": -1.0}, "cap=-1.0: must be a finite number > 0"),
    ({"cap": float("inf")}, "cap=inf: must be a finite number > 0"),
    ({"cap": float("nan")}, "cap=nan: must be a finite number > 0"),
    ({"terms": {"max_places": 0.0}}, "max_places=0.0: must be a finite number > 0"),
    ({"terms": {"max_places": float("inf")}}, "max_places=inf: must be a finite number > 0"),
    ({"terms": {"max_places": "4"}}, "max_places='4': must be a finite number > 0"),
    ({"terms": {"other": 1.0, "more": 2.0}},
     "more, other: not a term of mobility's policy (known: max_hours, max_places)"),
    ({"reason": ""}, "reason='': say why the policy changes; it is recorded"),
])
def test_a_policy_change_is_refused_with_what_was_wrong(ledger: Ledger, kw: dict[str, Any],
                                                        message: str) -> None:
    from dp_ops.errors import BadRequest

    ledger.reserve([spend_request(Slot("mobility", date(2020, 3, 1), 1, "a"), 0.1)],
                   run_id="r", kind="noise", cap=1.0, method_version="v1",
                   terms={"max_places": 4.0, "max_hours": 24.0})
    with pytest.raises(BadRequest) as err:
        ledger.set_policy("mobility", **{"reason": "why", "run_id": "op", **kw})
    assert str(err.value) == message
    assert len(ledger.policies()) == 1


def test_a_cap_below_a_spent_date_is_refused_naming_the_date(ledger: Ledger) -> None:
    from dp_ops.errors import BadRequest, BudgetExceeded

    with pytest.raises(BadRequest) as err:
        ledger.set_policy("mobility", reason="why", run_id="op", cap=0.5)
    assert str(err.value) == ("report 'mobility' has no recorded policy yet: its first spend "
                              "records the configured one")
    for day, eps in ((1, 0.25), (2, 0.375), (3, 0.125)):
        ledger.reserve([spend_request(Slot("mobility", date(2020, 3, day), 1, "a"), eps)],
                       run_id="r", kind="noise", cap=1.0, method_version="v1")
    with pytest.raises(BudgetExceeded) as exceeded:
        ledger.set_policy("mobility", reason="why", run_id="op", cap=0.3)
    assert str(exceeded.value) == ("cap=0.3: date 2020-03-02 of mobility has already spent "
                                   "0.375000 per user-day; a cap below that would leave it over")
    assert ledger.set_policy("mobility", reason="why", run_id="op", cap=0.375).cap == 0.375


def test_a_cap_the_tolerance_below_a_spent_date_is_not_below_it(ledger: Ledger) -> None:
    """A new cap is compared with what a date spent as a reservation is: a date that spent
    the new cap plus exactly the tolerance (float rounding) is within it, so the cap is
    recorded."""
    from dp_ops.privacy.ledger import EPS_TOLERANCE

    spent = 0.375 + EPS_TOLERANCE
    ledger.reserve([spend_request(Slot("mobility", date(2020, 3, 1), 1, "a"), spent)],
                   run_id="r", kind="noise", cap=1.0, method_version="v1")
    assert ledger.spent("mobility", date(2020, 3, 1)) == spent
    assert ledger.set_policy("mobility", reason="why", run_id="op", cap=0.375).cap == 0.375
