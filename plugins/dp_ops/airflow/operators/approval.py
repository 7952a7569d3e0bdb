"""Approval before an extra spend: a re-noise or a method update waits for a second person.

:class:`SpendApprovalOperator` is Airflow's human-in-the-loop ``ApprovalOperator`` (the task
waits in the ``awaiting_input`` state; Browse > Required Actions in the UI, or the HITL REST
API) with what the approver needs and three rules of its own:

- the request shows what the run will spend and the headroom left under the recorded cap,
  per date (:mod:`dp_ops.reports.spend_preview`); a request the ledger would refuse fails at
  once, without asking anyone;
- the respondents are the users of ``DP_SPEND_APPROVERS`` minus the user who triggered the
  run: the requester cannot approve their own run (and a response by the requester is
  refused again when the task resumes, whatever the auth manager allowed);
- a run whose requester is not a known Airflow user (:func:`known_requesters`) is refused
  before anyone is asked: ``airflow dags trigger`` records the operating-system user, who
  may not be the person asking, so the real requester could approve their own run.

An approval is recorded, not implied: when an approver answers Approve, the task records
it in the ledger (:meth:`dp_ops.privacy.ledger.Ledger.record_approval`) under the digest of
the exact request it showed (:func:`dp_ops.steps.noising.renoise_request`,
:func:`dp_ops.reports.mobility.method_update_step.approval_request`), and the spending task
reserves only against that record. The response is read from the event Airflow's API
server builds from the human-in-the-loop row when it resumes this task; marking the task
successful by hand (the REST API, the UI) never runs that code, so it records nothing and
the spending task is refused. (A task cannot read another task instance's response: the
Execution API serves a task its own only.)

"Reject" (also the answer when nobody responds within ``APPROVAL_TIMEOUT``) skips every
downstream task, so nothing is ingested, spent or published. A re-noise-free rerun
(``renoise`` off) spends nothing and goes on without asking.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

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
from dp_ops.reports.protocol import MethodUpdateForm
from dp_ops.reports.spec import report_spec

if TYPE_CHECKING:
    from dp_ops.privacy.ledger import ApprovalRequest
    from dp_ops.reports.registry import AnyReport

APPROVERS_ENV = "DP_SPEND_APPROVERS"
# who may request an extra spend, for an auth manager whose users a task cannot list (the
# simple auth manager's are read from Airflow's configuration)
REQUESTERS_ENV = "DP_SPEND_REQUESTERS"
SIMPLE_AUTH_MANAGER = "SimpleAuthManager"
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


def airflow_users(auth_manager: str, users_setting: Sequence[str],
                  all_admins: bool) -> list[str]:
    """The user ids of the simple auth manager (``[core] simple_auth_manager_users``,
    ``name:role`` items); none for another auth manager, or when the simple one lets
    everybody in as an anonymous admin (``simple_auth_manager_all_admins``)."""
    if all_admins or auth_manager.rsplit(".", 1)[-1] != SIMPLE_AUTH_MANAGER:
        return []
    return [u for u in (item.split(":", 1)[0].strip() for item in users_setting) if u]


def known_requesters(requesters_env: str | None, users: Sequence[str]) -> list[str]:
    """Who may request an extra spend: ``DP_SPEND_REQUESTERS`` when set, else ``users``
    (the auth manager's, :func:`airflow_users`)."""
    if requesters_env and requesters_env.strip():
        return approvers(requesters_env)
    return list(users)


def check_requester(requester: str | None, known: Sequence[str]) -> str:
    """The run's requester, if Airflow knows them as a user; else :class:`BadRequest`. A
    run triggered with ``airflow dags trigger`` records the operating-system user, which
    says nothing about who asked: its requester could approve their own run."""
    how = ("trigger the run from the UI or the REST API as yourself (a run triggered with "
           "`airflow dags trigger` records the operating-system user, not an Airflow user); "
           "nothing was spent")
    if not (requester or "").strip():
        raise BadRequest(f"the run records no requester (triggering_user_name is empty), so "
                         f"nobody can be shown not to approve their own spend: {how}")
    if not known:
        raise BadRequest(f"requester={requests.shown(requester)}: this Airflow's users cannot "
                         f"be listed (another auth manager than the simple one): name who may "
                         f"request extra spends in {REQUESTERS_ENV}; nothing was spent")
    if requester not in known:
        raise BadRequest(f"requester={requests.shown(requester)}: not a known Airflow user, "
                         f"so an approval could not tell them from the approver: {how}")
    return str(requester)


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


def approving_user(event: Mapping[str, Any], approver_ids: Sequence[str],
                   requester: str | None) -> str:
    """The id of the approver whose response in ``event`` (the resumed task's HITL
    response) approves the spend: the one option Approve, answered by a user of
    ``approver_ids`` who is not the requester. Else :class:`BadRequest`."""
    chosen = list(event.get("chosen_options") or [])
    if chosen != [ApprovalOperator.APPROVE]:
        raise BadRequest(f"chosen_options={chosen!r}: not an approval; nothing was spent")
    responder = event.get("responded_by_user")
    user = str(responder.get("id") or "") if isinstance(responder, dict) else ""
    if not user or event.get("timedout"):
        raise BadRequest("the approval has no responder (a default answer, not a person's); "
                         "nothing was spent")
    if user not in approver_ids:
        raise BadRequest(f"responder={requests.shown(user)}: not in {APPROVERS_ENV}; "
                         "nothing was spent")
    if is_self_approval(responder, requester):
        raise BadRequest(f"{requests.shown(requester)} requested this run and cannot approve "
                         "it; nothing was spent")
    return user


class SpendApprovalOperator(ApprovalOperator):
    """Pause a run that spends extra budget until another person approves it.

    :param report: which report.
    :param spend: ``"renoise"`` (a region rerun; needs ``day``, ``region``, ``renoise``) or
        ``"method_update"`` (mobility; needs ``method_version``, ``effective_date``,
        ``categories``, ``factor``).
    The request fields are templated from the trigger form, as the spending task's are.
    """

    template_fields: Sequence[str] = (
        "subject", "body", "day", "region", "renoise", "repeat_renoise", "method_version",
        "effective_date", "categories", "factor", "reason")
    ui_color = "#fff3cd"

    def __init__(self, *, report: str, spend: str, reason: str = "",
                 day: str | None = None, region: str | None = None,
                 renoise: bool | str = True, repeat_renoise: bool | str = False,
                 method_version: str | None = None, effective_date: str | None = None,
                 categories: Any = None, factor: Any = None, **kwargs: Any) -> None:
        if spend not in (RENOISE, METHOD_UPDATE):
            raise ValueError(f"spend={spend!r}: expected {RENOISE!r} or {METHOD_UPDATE!r}")
        super().__init__(subject="Approve an extra privacy-budget spend",
                         defaults=self.REJECT, response_timeout=APPROVAL_TIMEOUT,
                         ignore_downstream_trigger_rules=True, **kwargs)
        self.report = report_spec(report).name
        self.spend = spend
        self.reason = reason
        self.day = day
        self.region = region
        self.renoise = renoise
        self.repeat_renoise = repeat_renoise
        self.method_version = method_version
        self.effective_date = effective_date
        self.categories = categories
        self.factor = factor

    def _preview(self) -> Any:
        from dp_ops.reports.spend_preview import method_update_preview, renoise_preview

        report = load(self.report)
        if self.spend == RENOISE:
            return renoise_preview(report, parse_day(self.day, field="date"), self._region())
        return method_update_preview(report, self._form())

    def _form(self) -> MethodUpdateForm:
        return MethodUpdateForm(
            method_version=str(self.method_version or "").strip(),
            effective_date=parse_day(self.effective_date, field="effective_date"),
            categories=parse_categories(self.categories), factor=parse_factor(self.factor),
            reason=str(self.reason or ""))

    def _region(self) -> str:
        region = parse_region(self.region)
        if region is None:
            raise BadRequest("region='': a re-noise needs a region")
        return region

    def _approval_request(self, report: AnyReport) -> ApprovalRequest:
        """The request as the spending task will reserve it (the same builders)."""
        if self.spend == RENOISE:
            from dp_ops.steps.noising import renoise_request

            return renoise_request(report.noise_plan(), parse_day(self.day, field="date"),
                                   self._region(), str(self.reason or ""),
                                   parse_bool(self.repeat_renoise, field="repeat_renoise"))
        return report.method_update_request(self._form())

    def _record_approval(self, context: Context, event: Mapping[str, Any]) -> None:
        """Record the approval in ``event`` in the ledger, or refuse (nothing recorded)."""
        from dp_ops.privacy.ledger import VIA_AIRFLOW
        from dp_ops.steps.ledger_binding import closing_ledger, open_ledger

        requester = context["dag_run"].triggering_user_name
        check_requester(requester, _known_requesters())
        approver = approving_user(event, approvers(os.environ.get(APPROVERS_ENV)), requester)
        report = load(self.report)
        request = self._approval_request(report)
        responded = event.get("responded_at")
        decided_at = (responded.isoformat(timespec="seconds")
                      if isinstance(responded, datetime) else None)
        with closing_ledger(open_ledger(report.root, report.ledger_url)) as ledger:
            recorded = ledger.record_approval(
                request, run_id=context["run_id"], requester=requester, approver=approver,
                via=VIA_AIRFLOW, decided_at=decided_at)
        self.log.info("approval recorded in the ledger: %s approved %s requested by %s "
                      "(request sha256 %s)", recorded.approver, request.describe(),
                      recorded.requester, recorded.request_sha256[:16])

    def execute(self, context: Context) -> Any:
        requester = context["dag_run"].triggering_user_name
        with refusals_fail_without_retry(self.log, "approval request"):
            if self.spend == RENOISE and not parse_bool(self.renoise, field="renoise"):
                self.log.info("renoise is off: this run reuses stored noise and spends "
                              "nothing; no approval needed")
                return None
            check_requester(requester, _known_requesters())
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
        if "error" not in event and event.get("chosen_options") == [self.APPROVE]:
            # the spending task reserves only against this record
            with refusals_fail_without_retry(self.log, "approval"):
                self._record_approval(context, event)
        return super().execute_complete(context, event)


def _known_requesters() -> list[str]:
    """:func:`known_requesters` of this process's environment and Airflow configuration."""
    from airflow.sdk.configuration import conf

    users = airflow_users(conf.get("core", "auth_manager"),
                          conf.getlist("core", "simple_auth_manager_users"),
                          conf.getboolean("core", "simple_auth_manager_all_admins"))
    return known_requesters(os.environ.get(REQUESTERS_ENV), users)
