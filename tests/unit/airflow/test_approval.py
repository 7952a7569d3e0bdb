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
