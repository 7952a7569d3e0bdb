"""Approval before an extra spend: a re-noise or a method update waits for a second person.

:class:`SpendApprovalOperator` is Airflow's human-in-the-loop ``ApprovalOperator`` (the task
waits in the ``awaiting_input`` state; Browse > Required Actions in the UI, or the HITL REST
API) with what the approver needs and two rules of its own:

- the request shows what the run will spend and the headroom left under the recorded cap,
  per date (:mod:`dp_ops.reports.spend_preview`); a request the ledger would refuse fails at
  once, without asking anyone;
- the respondents are the users of ``DP_SPEND_APPROVERS`` minus the user who triggered the
  run: the requester cannot approve their own run (and a response by the requester is
  refused again when the task resumes, whatever the auth manager allowed).

"Reject" (also the answer when nobody responds within ``APPROVAL_TIMEOUT``) skips every
downstream task, so nothing is ingested, spent or published. A re-noise-free rerun
(``renoise`` off) spends nothing and goes on without asking.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.execution_time.hitl import HITLUser

from dp_ops import requests
from dp_ops.airflow.operators.method_update import parse_categories, parse_factor
from dp_ops.airflow.runtime import (
    load,
    parse_bool,
    parse_day,
    parse_region,
    refusals_fail_without_retry,
)
from dp_ops.errors import BadRequest, BudgetExceeded
from dp_ops.reports.protocol import ReportName

APPROVERS_ENV = "DP_SPEND_APPROVERS"
# Nobody answered: the default answer (Reject) applies, and nothing is spent.
APPROVAL_TIMEOUT = timedelta(hours=24)
RENOISE, METHOD_UPDATE = "renoise", "method_update"


def approvers(text: str | None) -> list[str]:
    """The user ids of ``DP_SPEND_APPROVERS`` (comma-separated, as the auth manager knows
    them: the simple auth manager's usernames), in order, without duplicates."""
    out: list[str] = []
    for item in (text or "").split(","):
        user = item.strip()
        if not user:
            continue
        requests.plain_text(user, field=APPROVERS_ENV, max_length=100)
        if user not in out:
            out.append(user)
    return out


def respondents(approver_ids: Sequence[str], requester: str | None) -> list[str]:
    """Who may answer: every approver but the requester. Raises :class:`BadRequest` when
    nobody is left, since the run could then never be approved."""
    if not approver_ids:
        raise BadRequest(f"{APPROVERS_ENV} is empty: name the users who may approve extra "
                         "privacy spends (comma-separated user ids), then rerun")
    others = [a for a in approver_ids if a != requester]
    if not others:
        raise BadRequest(f"the only approver in {APPROVERS_ENV} is the requester "
                         f"{requests.shown(requester)}, who cannot approve their own run: "
                         "add another approver")
    return others


def is_self_approval(responder: Any, requester: str | None) -> bool:
    """Whether a HITL response (``{"id": ..., "name": ...}``) came from the requester."""
    if requester is None or not isinstance(responder, dict):
        return False
    return requester in {str(responder.get("id")), str(responder.get("name"))}


class SpendApprovalOperator(ApprovalOperator):
    """Pause a run that spends extra budget until another person approves it.

    :param report: which report.
    :param spend: ``"renoise"`` (a region rerun; needs ``day``, ``region``, ``renoise``) or
        ``"method_update"`` (mobility; needs ``method_version``, ``effective_date``,
        ``categories``, ``factor``).
    The request fields are templated from the trigger form, as the spending task's are.
    """

    template_fields: Sequence[str] = (
        "subject", "body", "day", "region", "renoise", "method_version", "effective_date",
        "categories", "factor", "reason")
    ui_color = "#fff3cd"

    def __init__(self, *, report: ReportName | str, spend: str, reason: str = "",
                 day: str | None = None, region: str | None = None,
                 renoise: bool | str = True, method_version: str | None = None,
                 effective_date: str | None = None, categories: Any = None,
                 factor: Any = None, **kwargs: Any) -> None:
        if spend not in (RENOISE, METHOD_UPDATE):
            raise ValueError(f"spend={spend!r}: expected {RENOISE!r} or {METHOD_UPDATE!r}")
        super().__init__(subject="Approve an extra privacy-budget spend",
                         defaults=self.REJECT, response_timeout=APPROVAL_TIMEOUT,
                         ignore_downstream_trigger_rules=True, **kwargs)
        self.report = ReportName(report).value
        self.spend = spend
        self.reason = reason
        self.day = day
        self.region = region
        self.renoise = renoise
        self.method_version = method_version
        self.effective_date = effective_date
        self.categories = categories
        self.factor = factor

    def _preview(self) -> Any:
        from dp_ops.reports.spend_preview import method_update_preview, renoise_preview

        report = load(self.report)
        if self.spend == RENOISE:
            region = parse_region(self.region)
            if region is None:
                raise BadRequest("region='': a re-noise needs a region")
            return renoise_preview(report, parse_day(self.day, field="date"), region)
        if report.name != ReportName.MOBILITY:
            raise BadRequest(f"report={report.name!r}: only mobility has method updates")
        return method_update_preview(
            report,  # type: ignore[arg-type]  # mobility, checked above
            method_version=str(self.method_version or "").strip(),
            effective_date=parse_day(self.effective_date, field="effective_date"),
            categories=parse_categories(self.categories), factor=parse_factor(self.factor))

    def execute(self, context: Context) -> Any:
        requester = context["dag_run"].triggering_user_name
        with refusals_fail_without_retry(self.log, "approval request"):
            if self.spend == RENOISE and not parse_bool(self.renoise, field="renoise"):
                self.log.info("renoise is off: this run reuses stored noise and spends "
                              "nothing; no approval needed")
                return None
            preview = self._preview()
            if not preview.fits:
                raise BudgetExceeded(f"{preview.refusal}; not sent for approval, nothing "
                                     "was spent")
            users = respondents(approvers(os.environ.get(APPROVERS_ENV)), requester)
        self.log.info("asking %s to approve: %s", ", ".join(users), preview.summary())
        self.subject = f"Approve {self.spend.replace('_', ' ')}: {preview.what}"
        self.body = (f"Requested by **{requester or 'unknown'}**, reason: "
                     f"{requests.shown(self.reason)}\n\n{preview.markdown()}")
        self.assigned_users = [HITLUser(id=u, name=u) for u in users]
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        requester = context["dag_run"].triggering_user_name
        if "error" not in event and is_self_approval(event.get("responded_by_user"),
                                                     requester):
            raise AirflowFailException(
                f"approval refused: {requests.shown(requester)} requested this run and "
                "cannot approve it; nothing was spent")
        return super().execute_complete(context, event)
