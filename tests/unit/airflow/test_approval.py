"""Who may approve an extra spend (dp_ops.airflow.operators.approval)."""

from __future__ import annotations

import pytest

from dp_ops.airflow.operators.approval import (
    SpendApprovalOperator,
    approvers,
    is_self_approval,
    respondents,
)
from dp_ops.errors import BadRequest


def test_approvers_are_a_clean_ordered_list() -> None:
    assert approvers(" alice, bob,,alice ,carol ") == ["alice", "bob", "carol"]
    assert approvers(None) == [] and approvers("") == []
    with pytest.raises(BadRequest, match="DP_SPEND_APPROVERS"):
        approvers("alice,\x1b[31mbob")


def test_the_requester_is_never_a_respondent() -> None:
    assert respondents(["alice", "bob"], "alice") == ["bob"]
    assert respondents(["alice", "bob"], None) == ["alice", "bob"]
    with pytest.raises(BadRequest, match="cannot approve their own run"):
        respondents(["alice"], "alice")
    with pytest.raises(BadRequest, match="is empty"):
        respondents([], "alice")


def test_a_response_by_the_requester_is_a_self_approval() -> None:
    assert is_self_approval({"id": "alice", "name": "alice"}, "alice")
    # FAB-style: numeric id, the username as name
    assert is_self_approval({"id": "7", "name": "alice"}, "alice")
    assert not is_self_approval({"id": "bob", "name": "bob"}, "alice")
    assert not is_self_approval({"id": "bob", "name": "bob"}, None)


class _Run:
    triggering_user_name = "alice"


def test_a_self_approval_fails_the_task_before_anything_runs() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    op = SpendApprovalOperator(task_id="approve_spend", report="mobility", spend="renoise",
                               day="2020-03-01", region="R-1", renoise=True, reason="x" * 5)
    event = {"chosen_options": ["Approve"], "params_input": {},
             "responded_by_user": {"id": "alice", "name": "alice"}}
    with pytest.raises(AirflowFailException, match="cannot approve it; nothing was spent"):
        op.execute_complete({"dag_run": _Run()}, event)  # type: ignore[arg-type]


def test_an_unknown_spend_kind_is_a_dag_error() -> None:
    with pytest.raises(ValueError, match="spend='everything'"):
        SpendApprovalOperator(task_id="t", report="mobility", spend="everything")


# -- issue 31, point 4: approval recorded, not implied ----------------------------------

SIMPLE = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


def test_the_known_requesters_are_the_auth_managers_users() -> None:
    from dp_ops.airflow.operators.approval import airflow_users, known_requesters

    assert airflow_users(SIMPLE, ["admin:admin", " approver:user", ""], False) == [
        "admin", "approver"]
    # everybody an anonymous admin, or an auth manager whose users a task cannot list
    assert airflow_users(SIMPLE, ["admin:admin"], True) == []
    assert airflow_users("airflow.providers.fab.auth_manager.FabAuthManager",
                         ["admin:admin"], False) == []
    assert known_requesters(None, ["admin"]) == ["admin"]
    assert known_requesters(" alice, bob ", ["admin"]) == ["alice", "bob"]


def test_a_requester_who_is_not_an_airflow_user_is_refused() -> None:
    from dp_ops.airflow.operators.approval import check_requester

    assert check_requester("alice", ["alice", "bob"]) == "alice"
    for requester, match in (("root", "not a known Airflow user"),
                             (None, "records no requester"), ("", "records no requester"),
                             ("alice", "cannot be listed")):
        with pytest.raises(BadRequest, match=match):
            check_requester(requester, [] if match == "cannot be listed" else ["alice"])


class _CliRun:
    """A run triggered with `airflow dags trigger`: the requester is the OS user."""

    triggering_user_name = "root"


def test_row9_a_cli_triggered_renoise_is_refused_before_anyone_is_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31, row 9: a re-noise triggered with `airflow dags trigger` records the OS user
    as its requester, so the real requester could approve it. Now the approval task
    refuses it at once, without retry, before showing it to anyone."""
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", SIMPLE)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS",
                       "admin:admin,approver:user")
    monkeypatch.delenv("DP_SPEND_REQUESTERS", raising=False)
    monkeypatch.setenv("DP_SPEND_APPROVERS", "approver")
    op = SpendApprovalOperator(task_id="approve_spend", report="mobility", spend="renoise",
                               day="2020-03-01", region="R-1", renoise=True, reason="x" * 5)
    with pytest.raises(AirflowFailException, match="requester='root': not a known Airflow "
                       "user.*airflow dags trigger.*nothing was spent"):
        op.execute({"dag_run": _CliRun()})  # type: ignore[arg-type]


def test_only_an_approvers_approve_approves() -> None:
    from dp_ops.airflow.operators.approval import approving_user

    def event(option: str, user: str | None, **extra: object) -> dict[str, object]:
        return {"chosen_options": [option], "params_input": {},
                "responded_by_user": None if user is None else {"id": user, "name": user},
                **extra}

    assert approving_user(event("Approve", "bob"), ["bob"], "alice") == "bob"
    for ev, match in ((event("Reject", "bob"), "not an approval"),
                      (event("Approve", None, timedout=True), "no responder"),
                      (event("Approve", "bob", timedout=True), "no responder"),
                      (event("Approve", "mallory"), "not in DP_SPEND_APPROVERS"),
                      (event("Approve", "alice"), "cannot approve")):
        with pytest.raises(BadRequest, match=match):
            approving_user(ev, ["bob", "alice"], "alice")


def test_an_approve_from_someone_not_allowed_records_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The resumed approval task records an approval only for an approver's response to
    a known requester's run; otherwise it fails without retry before opening the ledger."""
    from airflow.sdk.exceptions import AirflowFailException

    import dp_ops.airflow.operators.approval as approval

    def no_ledger(report: str) -> object:
        raise AssertionError("the ledger was opened")

    monkeypatch.setattr(approval, "load", no_ledger)
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", SIMPLE)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS",
                       "alice:user,approver:user,mallory:user")
    monkeypatch.setenv("DP_SPEND_APPROVERS", "approver")
    op = SpendApprovalOperator(task_id="approve_spend", report="mobility", spend="renoise",
                               day="2020-03-01", region="R-1", renoise=True, reason="x" * 5)
    by_mallory = {"chosen_options": ["Approve"], "params_input": {},
                  "responded_by_user": {"id": "mallory", "name": "mallory"}}
    with pytest.raises(AirflowFailException, match="not in DP_SPEND_APPROVERS"):
        op.execute_complete({"dag_run": _Run(), "run_id": "r"},  # type: ignore[arg-type]
                            by_mallory)
    by_approver = {**by_mallory, "responded_by_user": {"id": "approver", "name": "approver"}}
    with pytest.raises(AirflowFailException, match="not a known Airflow user"):
        op.execute_complete({"dag_run": _CliRun(), "run_id": "r"},  # type: ignore[arg-type]
                            by_approver)
