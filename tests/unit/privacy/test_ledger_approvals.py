"""Approval recorded, not implied (issue 31, point 4), at the ledger, on SQLite and
PostgreSQL: a ``renoise`` or ``method_update`` reservation needs an approval of its run and
its exact request in the ledger (``spend_approval``, chained and append-only), by someone
other than the requester; without one it is refused before anything is written.

No test here is statistical.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any

import pytest
from support.spend_requests import spend_request

from dp_ops.errors import ApprovalMissing
from dp_ops.privacy.ledger import ALL_REGIONS, Ledger, Slot

if TYPE_CHECKING:  # (imported where used: the code before approvals has no such class)
    from dp_ops.privacy.ledger import ApprovalRequest

DAY = date(2020, 3, 1)
CAP = 2.0
VERSION = "v1"


def slot(metric: str = "places", *, region: str = ALL_REGIONS, day: date = DAY) -> Slot:
    return Slot("mobility", day, 1, metric, region)


def _renoise(region: str = "R1", *, reason: str = "raw data corrected", day: date = DAY,
             repeat: bool = False) -> ApprovalRequest:
    from dp_ops.privacy.ledger import ApprovalRequest

    return ApprovalRequest(report="mobility", kind="renoise", days=(day,), reason=reason,
                           region=region, repeat=repeat, method_version=VERSION)


def _written(led: Ledger) -> tuple[int, int]:
    """(chain entries, spends): what a refused call must leave as it was."""
    return led.head()[0], len(led.spends())


@pytest.mark.parametrize("kind", ["renoise", "method_update"])
def test_an_extra_spend_without_an_approval_is_refused_before_anything_is_written(
        ledger: Ledger, kind: str) -> None:
    """Row 8 at the ledger: the order of tasks was the only approval. Now a reservation of
    these kinds that names no approved request is refused, and on a fresh ledger not even
    the first-use policy row is written."""
    before = _written(ledger)
    with pytest.raises(ApprovalMissing, match="without the request its approver approved"):
        ledger.reserve([spend_request(slot(region="R1"), 0.1)], run_id="oncall", kind=kind,
                       cap=CAP, method_version=VERSION, reason="fix")
    assert _written(ledger) == before
    assert ledger.policy("mobility") is None


def test_an_unrecorded_approval_is_refused_before_anything_is_written(ledger: Ledger) -> None:
    """A request passed along but never approved (nobody answered Approve): refused,
    naming the run, the request and how an approval gets recorded (the full text: it is
    what the operator reads)."""
    before = _written(ledger)
    with pytest.raises(ApprovalMissing) as err:
        ledger.reserve([spend_request(slot(region="R1"), 0.1)], run_id="oncall",
                       kind="renoise", cap=CAP, method_version=VERSION,
                       reason="raw data corrected", refuse_repeat_of="R1",
                       approval=_renoise())
    assert str(err.value) == (
        "re-noise of mobility 2020-03-01 region R1 by run 'oncall': no approval is recorded "
        "in the ledger for this run and this exact request (sha256 "
        f"{_renoise().sha256()[:16]}...). It is recorded only when someone other than the "
        "requester answers Approve in the run's approve_spend task (Browse > Required "
        "Actions; DP_SPEND_APPROVERS), or at the command line with --approved-by; a task "
        "marked successful by hand approves nothing. Nothing was spent")
    assert _written(ledger) == before


def test_nobody_approves_their_own_spend(ledger: Ledger) -> None:
    """Row 9 at the ledger: an approver equal to the requester (in any case), an empty
    approver and an unknown (empty) requester are refused, each with its full text (what
    the operator reads: the request, the run and what to do); nothing is recorded."""
    from dp_ops.privacy.ledger import VIA_AIRFLOW

    what = "re-noise of mobility 2020-03-01 region R1 by run 'oncall'"
    same = (": the approver {} is the requester; an extra spend needs the approval of "
            "someone else. Nothing was recorded or spent")
    unknown = (": the run has no known requester, so nobody can be shown not to be "
               "approving their own spend; nothing was recorded or spent. Request it as "
               "yourself (the Airflow UI or REST API), or at the command line name yourself "
               "with --requested-by")
    nobody = ": no approver named; nothing was recorded or spent"
    before = _written(ledger)
    for requester, approver, message in (
            ("alice", "alice", same.format("'alice'")),
            ("alice", "Alice ", same.format("'Alice'")),
            ("alice", "", nobody), ("alice", None, nobody),
            (None, "bob", unknown), ("  ", "bob", unknown)):
        with pytest.raises(ApprovalMissing) as err:
            ledger.record_approval(_renoise(), run_id="oncall",
                                   requester=requester, approver=approver, via=VIA_AIRFLOW)
        assert str(err.value) == what + message
    assert _written(ledger) == before
    assert ledger.approvals() == []


def test_a_malformed_approval_is_refused_naming_the_field(ledger: Ledger) -> None:
    """Who vouched for the names must be Airflow or the command line, and each name is
    plain text of at most 100 characters: refused with the field named exactly, before
    anything is recorded."""
    from dp_ops.errors import BadRequest
    from dp_ops.privacy.ledger import VIA_AIRFLOW

    before = _written(ledger)
    with pytest.raises(ValueError) as err:
        ledger.record_approval(_renoise(), run_id="oncall", requester="alice",
                               approver="bob", via="email")
    assert str(err.value) == "via='email': expected 'airflow_hitl' or 'cli'"
    for requester, approver, message in (
            ("al\tice", "bob",
             "requester='al\\tice': control characters are not allowed (found '\\t')"),
            ("alice", "b\u202eob",
             "approver='b\\u202eob': control characters are not allowed (found '\\u202e')"),
            ("alice", "b" * 101,
             f"approver={'b' * 40!r}... (101 characters): at most 100 characters")):
        with pytest.raises(BadRequest) as bad:
            ledger.record_approval(_renoise(), run_id="oncall", requester=requester,
                                   approver=approver, via=VIA_AIRFLOW)
        assert str(bad.value) == message
    assert _written(ledger) == before
    assert ledger.approvals() == []


def test_only_a_new_approval_signals_a_write(ledger: Ledger) -> None:
    """``after_write`` (the data root's high-water mark of the chain) runs once when an
    approval is recorded, and not when a retry finds the one already recorded."""
    from dp_ops.privacy.ledger import VIA_CLI

    calls: list[tuple[int, str]] = []
    ledger.after_write = lambda: calls.append(ledger.head())
    ledger.record_approval(_renoise(), run_id="oncall", requester="alice", approver="bob",
                           via=VIA_CLI)
    assert calls == [ledger.head()]
    ledger.record_approval(_renoise(), run_id="oncall", requester="alice", approver="carol",
                           via=VIA_CLI)
    assert calls == [ledger.head()]


def test_of_two_approvals_of_one_request_the_first_recorded_stands(ledger: Ledger) -> None:
    """``record_approval`` never writes a second approval of a run's request, but a ledger
    may hold two (chained rows appended with the key, by hand): the one with the lowest id
    counts, whatever order the database stores them in. Here id 2 is stored before id 1 (on
    PostgreSQL a scan without ORDER BY meets id 2 first)."""
    from dp_ops.privacy.ledger import VIA_CLI
    from dp_ops.privacy.ledger_schema import append

    request = _renoise()
    row = {"run_id": "oncall", "report": "mobility", "kind": "renoise",
           "request_sha256": request.sha256(), "request": request.canonical(),
           "requester": "alice", "via": VIA_CLI, "decided_at": "2026-12-08T10:00:00+00:00",
           "created_at": "2026-12-08T10:00:00+00:00"}
    with ledger.engine.begin() as conn:
        append(conn, "spend_approval", {**row, "id": 2, "approver": "carol"}, ledger.key())
        append(conn, "spend_approval", {**row, "id": 1, "approver": "bob"}, ledger.key())
    assert ledger.verify().ok
    found = ledger.approval(request, run_id="oncall")
    assert found is not None and (found.id, found.approver) == (1, "bob")
    assert ledger.require_approval(request, run_id="oncall") == found


def test_an_approval_covers_its_run_and_exact_request_only(ledger: Ledger) -> None:
    """Approved: a re-noise of R1 on DAY by run oncall-1, reason "raw data corrected", no
    repeat. Another run, reason, region, date or repeat flag is refused, nothing spent;
    the approved reservation spends, and a retry of the run finds the same approval."""
    from dp_ops.privacy.ledger import VIA_AIRFLOW

    approved = _renoise()
    ledger.reserve([spend_request(slot(), 0.5)], run_id="daily", kind="noise", cap=CAP,
                   method_version=VERSION)
    ledger.record_approval(approved, run_id="oncall-1",
                           requester="alice", approver="bob", via=VIA_AIRFLOW)
    r1 = [spend_request(slot(region="R1"), 0.1)]
    base = {"kind": "renoise", "cap": CAP, "method_version": VERSION,
            "reason": "raw data corrected", "refuse_repeat_of": "R1"}
    before = _written(ledger)
    for requests, changes, match in (
            (r1, {"run_id": "oncall-2", "approval": approved}, "no approval is recorded"),
            (r1, {"approval": _renoise(reason="another reason"),
                  "reason": "another reason"}, "no approval is recorded"),
            ([spend_request(slot(region="R2"), 0.1)], {"refuse_repeat_of": "R2"},
             "approved region 'R1'"),
            ([spend_request(slot(region="R1", day=date(2020, 3, 2)), 0.1)], {},
             "approved dates"),
            (r1, {"refuse_repeat_of": None}, "no repeat re-noise"),
            (r1, {"reason": "something else"}, "approved reason 'raw data corrected'"),
            (r1, {"method_version": "v2"}, "method version"),
            (r1, {"kind": "method_update", "refuse_repeat_of": None}, "kind 'renoise'")):
        kw = {**base, "run_id": "oncall-1", "approval": approved, **changes}
        with pytest.raises(ApprovalMissing, match=match):
            ledger.reserve(requests, **kw)
        assert _written(ledger) == before
    first = ledger.reserve(r1, run_id="oncall-1", approval=approved, **base)
    assert len(first.new_ids) == 1 and first.spends[0].kind == "renoise"
    retry = ledger.reserve(r1, run_id="oncall-1", approval=approved, **base)
    assert retry.spends == first.spends and not retry.new_ids


def test_an_approval_is_a_chained_append_only_record(ledger: Ledger,
                                                     ledger_url: str) -> None:
    """The row names the run, the request (its digest and text), both people and how the
    names were vouched for; recording it again returns it; the chain verifies, and the
    database refuses to change it."""
    import sqlalchemy as sa

    from dp_ops.privacy.ledger import VIA_CLI, _make_engine

    request = _renoise(repeat=True)
    recorded = ledger.record_approval(request, run_id="cli__1",
                                      requester="alice", approver="bob", via=VIA_CLI,
                                      decided_at="2026-12-08T10:00:00+00:00")
    assert (recorded.run_id, recorded.report, recorded.kind) == ("cli__1", "mobility",
                                                                 "renoise")
    assert recorded.request_sha256 == request.sha256()
    assert recorded.request == request.canonical()
    assert '"repeat":true' in recorded.request and '"region":"R1"' in recorded.request
    assert (recorded.requester, recorded.approver, recorded.via) == ("alice", "bob", "cli")
    assert recorded.decided_at == "2026-12-08T10:00:00+00:00"
    head = ledger.head()
    again = ledger.record_approval(request, run_id="cli__1",
                                   requester="alice", approver="carol", via=VIA_CLI)
    assert again == recorded and ledger.head() == head
    assert ledger.approvals() == [recorded] and ledger.approvals("other") == []
    assert ledger.approval(request, run_id="cli__1") == recorded
    assert ledger.verify().ok
    engine = _make_engine(ledger_url)
    try:
        for statement in ("UPDATE spend_approval SET approver = 'alice'",
                          "DELETE FROM spend_approval"):
            with pytest.raises(sa.exc.DBAPIError, match="append-only"):
                with engine.begin() as conn:
                    conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def test_the_request_digest_is_canonical() -> None:
    """Same request, same digest (dates in any order, parameters as pairs in any order);
    any field changed, another digest."""
    from dp_ops.privacy.ledger import ApprovalRequest

    days = (date(2020, 3, 2), date(2020, 3, 1))
    a = ApprovalRequest(report="mobility", kind="method_update", days=days, reason="r",
                        method_version="v2", parameters=(("x", "1"), ("a", "2")))
    b = ApprovalRequest(report="mobility", kind="method_update", days=days[::-1],
                        reason="r", method_version="v2", parameters=(("a", "2"), ("x", "1")))
    assert a.sha256() == b.sha256()
    for change in ({"reason": "r2"}, {"method_version": "v3"}, {"days": days[:1]},
                   {"parameters": (("x", "1.0"), ("a", "2"))}, {"report": "symptoms"}):
        other = ApprovalRequest(**{**a.__dict__, **change})
        assert other.sha256() != a.sha256(), change
    with pytest.raises(ValueError, match="only"):
        ApprovalRequest(report="mobility", kind="noise", days=days, reason="r")


def test_the_request_text_and_description_are_pinned() -> None:
    """The canonical text is what an approval's digest covers, so its keys, order, escaping
    and separators are part of the ledger's format; the description is what the approver
    reads."""
    import hashlib

    from dp_ops.privacy.ledger import ApprovalRequest

    update = ApprovalRequest(report="mobility", kind="method_update",
                             days=(date(2020, 3, 3), date(2020, 3, 1), date(2020, 3, 2)),
                             reason="r \u00e9", method_version="v2",
                             parameters=(("x", "1"), ("a", "2")))
    assert update.canonical() == (
        '{"days":["2020-03-01","2020-03-02","2020-03-03"],"kind":"method_update",'
        '"method_version":"v2","parameters":{"a":"2","x":"1"},"reason":"r \\u00e9",'
        '"region":null,"repeat":false,"report":"mobility"}')
    assert update.sha256() == hashlib.sha256(update.canonical().encode()).hexdigest()
    assert update.describe() == "method update v2 of mobility (dates 2020-03-01..2020-03-03)"
    renoise = ApprovalRequest(report="mobility", kind="renoise", days=(date(2020, 3, 1),),
                              reason="why", region="R1", repeat=True)
    assert renoise.canonical() == (
        '{"days":["2020-03-01"],"kind":"renoise","method_version":"","parameters":{},'
        '"reason":"why","region":"R1","repeat":true,"report":"mobility"}')
    assert renoise.describe() == "re-noise of mobility 2020-03-01 region R1"
    two = ApprovalRequest(report="mobility", kind="renoise",
                          days=(date(2020, 3, 5), date(2020, 3, 1)), reason="why", region="R1")
    assert two.describe() == "re-noise of mobility 2020-03-01..2020-03-05 region R1"
    with pytest.raises(ValueError) as err:
        ApprovalRequest(report="mobility", kind="renoise", days=(), reason="why")
    assert str(err.value) == "days=(): an approval request names the dates it spends on"


def test_a_reservation_unlike_its_approved_request_is_named_point_by_point() -> None:
    from dp_ops.privacy.ledger import ApprovalRequest, Slot, approval_mismatch

    day = date(2020, 3, 1)
    requests = [spend_request(Slot("mobility", day, 1, "a", "R1"), 0.1)]
    request = ApprovalRequest(report="mobility", kind="renoise", days=(day,), reason="why",
                              region="R1")
    ok: dict[str, Any] = {"kind": "renoise", "method_version": "", "reason": "why: more",
                          "refuse_repeat_of": "R1"}
    assert approval_mismatch(request, requests, **ok) is None
    assert approval_mismatch(request, requests, **{**ok, "refuse_repeat_of": None,
                                                   "method_version": "v9"}) == (
        "approved method version '', reserving 'v9'; no repeat re-noise, reserving with the "
        "repeat check off")
    blank = ApprovalRequest(report="mobility", kind="renoise", days=(day,), reason="  ",
                            region="R1")
    assert approval_mismatch(blank, requests, **{**ok, "reason": "  "}) == \
        "approved reason '  '"


def test_a_policy_names_every_term_that_differs_to_the_last_digit() -> None:
    from dp_ops.privacy.ledger import Policy

    policy = Policy("mobility", 1.0, {"max_places": 4.0}, "r", "first use", "t")
    assert policy.differences(1.0, {"max_places": 4.0}) == []
    assert policy.differences(1.0 + 1e-13, {"max_places": 4.0 * (1 - 1e-13)}) == []
    assert policy.differences(1.0 + 1e-10, {"max_places": 4.0, "max_hours": 24.0}) == [
        f"cap: recorded 1.0, configured {1.0 + 1e-10!r}",
        "max_hours: recorded None, configured 24.0"]
    assert policy.differences(1.0, {}) == ["max_places: recorded 4.0, configured None"]
