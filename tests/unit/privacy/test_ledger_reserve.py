"""What ``Ledger.reserve`` refuses and records, pinned exactly: every refusal's text (an
operator acts on it), the first-use policy row as stored, which earlier spends a slot
reuses, and the cap compared at its exact edge. On SQLite and, with a server, on
PostgreSQL (conftest.py). No test here is statistical."""

from __future__ import annotations

import re
from datetime import date

import pytest
import sqlalchemy as sa
from support.approvals import approve, request_of, reserve_approved
from support.spend_requests import spend_request

from dp_ops.errors import ApprovalMissing, BadRequest, BudgetExceeded, PolicyMismatch
from dp_ops.privacy import ledger as ledger_module
from dp_ops.privacy.ledger import Ledger, Slot, cap_refusal

DAY = date(2020, 3, 1)
SLOT = Slot("mobility", DAY, 1, "a")
TERMS = {"max_places": 4.0, "max_hours": 24.0}


def noise(ledger: Ledger, *slots: Slot, eps: float = 0.1, cap: float = 1.0,
          run_id: str = "r") -> set[int]:
    got = ledger.reserve([spend_request(s, eps) for s in slots], run_id=run_id, kind="noise",
                         cap=cap, method_version="v1", terms=TERMS)
    return {s.id for s in got.spends}


def test_a_reservation_without_a_reason_records_an_empty_one(ledger: Ledger) -> None:
    noise(ledger, SLOT)
    assert [s.reason for s in ledger.spends()] == [""]


@pytest.mark.parametrize("kw, message", [
    ({"cap": 0.0}, "cap=0.0: must be a finite number > 0"),
    ({"cap": -1.0}, "cap=-1.0: must be a finite number > 0"),
    ({"cap": float("inf")}, "cap=inf: must be a finite number > 0"),
    ({"requests": [spend_request(SLOT, 0.1), spend_request(SLOT, 0.2)]},
     f"slot {SLOT.describe()} is requested twice in one reservation"),
    ({"approval": "given"}, "kind='noise' needs no approval; one was given"),
])
def test_a_malformed_reservation_is_refused_with_what_was_wrong(
        ledger: Ledger, kw: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"requests": [spend_request(SLOT, 0.1)], "run_id": "r",
                               "kind": "noise", "cap": 1.0, "method_version": "v1", **kw}
    if args.get("approval") == "given":
        args["approval"] = request_of([spend_request(SLOT, 0.1)], kind="renoise",
                                      reason="why", method_version="v1")
    with pytest.raises(ValueError) as err:
        ledger.reserve(**args)  # type: ignore[arg-type]
    assert str(err.value) == message
    assert ledger.spends() == []


def test_a_renoise_without_its_approved_request_is_refused(ledger: Ledger) -> None:
    with pytest.raises(ApprovalMissing) as err:
        ledger.reserve([spend_request(Slot("mobility", DAY, 1, "a", "R1"), 0.1)],
                       run_id="run-7", kind="renoise", cap=1.0, method_version="v1",
                       reason="why")
    assert str(err.value) == ("a renoise reservation by run 'run-7' came without the request "
                              "its approver approved; nothing was spent")


def test_the_first_spend_records_the_configured_policy_as_written(ledger: Ledger,
                                                                  ledger_url: str) -> None:
    noise(ledger, SLOT)
    [policy] = ledger.policies()
    assert (policy.report, policy.cap, policy.terms, policy.run_id, policy.reason) == \
        ("mobility", 1.0, {"max_hours": 24.0, "max_places": 4.0}, "r",
         "first use: the configured policy")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", policy.created_at)
    engine = sa.create_engine(ledger_url)
    try:
        with engine.connect() as conn:
            terms, created = conn.execute(sa.text(
                "SELECT terms, created_at FROM report_policy")).one()
    finally:
        engine.dispose()
    assert terms == '{"max_hours":24.0,"max_places":4.0}'  # compact, sorted: it is hashed
    assert str(created) == policy.created_at


def test_a_process_with_another_policy_is_refused_with_the_recorded_one(
        ledger: Ledger) -> None:
    noise(ledger, SLOT)
    created = ledger.policies()[0].created_at
    with pytest.raises(PolicyMismatch) as err:
        ledger.reserve([spend_request(Slot("mobility", DAY, 2, "a"), 0.1)], run_id="r2",
                       kind="noise", cap=2.0, method_version="v1",
                       terms={"max_places": 5.0, "max_hours": 24.0})
    assert str(err.value) == (
        "report 'mobility': this process's configuration differs from the privacy policy "
        "recorded in the ledger (cap: recorded 1.0, configured 2.0; max_places: recorded "
        f"4.0, configured 5.0); recorded {created} by 'r' ('first use: the configured "
        "policy'). Nothing was spent. To change the policy, record it first with `python -m "
        "dp_ops ledger set-cap` or `set-epsilon` (with a reason), then run with the matching "
        "configuration")
    assert len(ledger.spends()) == 1


@pytest.mark.parametrize("other", [
    Slot("symptoms", DAY, 1, "a"),          # another report
    Slot("mobility", date(2020, 3, 2), 1, "a"),
    Slot("mobility", DAY, 2, "a"),          # another level
    Slot("mobility", DAY, 1, "b"),          # another metric group
    Slot("mobility", DAY, 1, "a", "R1"),    # one region's slot
])
def test_a_slot_reuses_only_its_own_spend(ledger: Ledger, other: Slot) -> None:
    first = noise(ledger, other)
    if other.report == "symptoms":
        assert ledger.policies()[0].report == "symptoms"
    second = noise(ledger, SLOT)
    assert first.isdisjoint(second)
    assert noise(ledger, SLOT) == second  # the same slot again: reused
    assert sorted((s.slot, s.generation) for s in ledger.spends()) == \
        sorted([(other, 0), (SLOT, 0)], key=lambda t: (t[0].report, t[0].day, t[0].level,
                                                       t[0].metric, t[0].region_scope))


def test_a_spend_past_the_cap_is_refused_before_any_noise(ledger: Ledger) -> None:
    noise(ledger, SLOT, eps=0.75)
    with pytest.raises(BudgetExceeded) as err:
        noise(ledger, Slot("mobility", DAY, 2, "a"), eps=0.5)
    assert str(err.value) == (
        "privacy budget refused for date 2020-03-01, slot mobility/2020-03-01/level 2/a/"
        "region *: spent 0.7500 + requested 0.5000 would exceed the per-user-day cap 1.0000 "
        "for report 'mobility'; no noise was drawn")


def test_the_cap_is_reached_exactly_not_passed() -> None:
    cap = 1.0
    at_edge = cap + ledger_module.EPS_TOLERANCE  # so_far + epsilon == cap + tolerance
    assert cap_refusal([spend_request(SLOT, at_edge)], lambda *_: 0.0, cap) is None
    over = [spend_request(SLOT, 0.5), spend_request(Slot("mobility", DAY, 2, "a"), 0.5 + 2e-9)]
    assert cap_refusal(over, lambda *_: 0.0, cap) is not None


REGION = Slot("mobility", DAY, 1, "a", "R1")


def renoise(ledger: Ledger, run_id: str, **kw: object) -> set[int]:
    got = reserve_approved(ledger, [spend_request(REGION, 0.01)], run_id=run_id,
                           kind="renoise", cap=1.0, method_version="v1", terms=TERMS, **kw)
    return {s.id for s in got.spends}


def test_a_repeated_renoise_of_a_region_is_refused_naming_three_earlier_runs(
        ledger: Ledger) -> None:
    for run in "abcd":
        renoise(ledger, run)  # repeats allowed: no refuse_repeat_of
    with pytest.raises(BadRequest) as err:
        renoise(ledger, "e", refuse_repeat_of="R1")
    assert str(err.value) == (
        "region='R1' date=2020-03-01: already re-noised by run(s) 'a', 'b', 'c'; each "
        "re-noise publishes another noisy version of the same cells. To re-noise again, "
        "set repeat_renoise (recorded in the ledger with the reason)")
    # the run that re-noised may retry; a normal noise of the region is not a re-noise
    assert renoise(ledger, "d", refuse_repeat_of=None)
    noise(ledger, REGION)
    assert [s.generation for s in ledger.spends()] == [0, 1, 2, 3]


def test_only_renoises_by_other_runs_count_as_repeats(ledger: Ledger) -> None:
    noise(ledger, REGION, run_id="daily")        # generation 0, kind noise
    first = renoise(ledger, "a", refuse_repeat_of="R1")
    assert renoise(ledger, "a", refuse_repeat_of="R1") == first  # its own retry
    assert ledger.reserve([spend_request(REGION, 0.01)], run_id="x", kind="noise", cap=1.0,
                          method_version="v1", terms=TERMS,
                          refuse_repeat_of="R1").spends[0].generation == 0


def test_an_approval_of_another_request_is_refused_with_the_difference(
        ledger: Ledger) -> None:
    request = request_of([spend_request(REGION, 0.01)], kind="renoise", method_version="v1")
    approve(ledger, request, "f")
    with pytest.raises(ApprovalMissing) as err:
        ledger.reserve([spend_request(REGION, 0.01)], run_id="f", kind="renoise", cap=1.0,
                       method_version="v2", reason="test spend", approval=request)
    assert str(err.value) == (
        "re-noise of mobility 2020-03-01 region R1 by run 'f': the approval given is not for "
        "this reservation (approved method version 'v1', reserving 'v2'); nothing was spent")


def test_every_slot_of_a_reservation_is_covered_when_the_first_is_reused(
        ledger: Ledger) -> None:
    first = noise(ledger, SLOT)
    other = Slot("mobility", DAY, 2, "a")
    got = ledger.reserve([spend_request(SLOT, 0.1), spend_request(other, 0.1)], run_id="r2",
                         kind="noise", cap=1.0, method_version="v1", terms=TERMS)
    assert [s.slot for s in got.spends] == [SLOT, other]
    assert {s.id for s in got.spends} - got.new_ids == first and len(got.new_ids) == 1
    level2 = Slot("mobility", DAY, 2, "a", "R1")
    again = reserve_approved(ledger, [spend_request(REGION, 0.01), spend_request(level2, 0.01)],
                             run_id="m", kind="renoise", cap=1.0, method_version="v1",
                             terms=TERMS)
    retry = reserve_approved(ledger, [spend_request(REGION, 0.01), spend_request(level2, 0.01)],
                             run_id="m", kind="renoise", cap=1.0, method_version="v1",
                             terms=TERMS)
    assert retry.spends == again.spends and not retry.new_ids


def test_a_reopened_ledger_checks_its_key_against_the_first_link(ledger_url: str) -> None:
    first = Ledger(ledger_url)
    noise(first, SLOT)
    noise(first, Slot("mobility", DAY, 2, "a"))
    first.dispose()
    again = Ledger(ledger_url)  # a new process: the key is loaded and checked
    try:
        assert len(again.key()) == 32
        assert noise(again, Slot("mobility", DAY, 3, "a"))
    finally:
        again.dispose()
