"""Failure alerts by e-mail (OPERATIONS.md, Alerts): every task of every DAG fails loudly.

``DEFAULT_ARGS`` sets :class:`FailureAlert` as each task's ``on_failure_callback``. It
sends one e-mail per failed task (after its last retry) through Airflow's SMTP provider,
the connection ``smtp_default``, to the addresses in ``DP_ALERT_EMAILS`` (comma-separated;
unset: the alert is only logged). The subject says which kind of failure it is, so that
people can filter on it:

- ``[dp-ops] BUDGET REFUSED``: the ledger refused a spend (nothing was drawn);
- ``[dp-ops] GATE FAILED``: the release gate failed (nothing was published);
- ``[dp-ops] INPUT MISSING``: a raw partition is missing or unreadable;
- ``[dp-ops] PRIVACY GUARD``: a ledger or stored-state check refused (tampering, a
  mismatched ledger or policy): treat as an incident;
- ``[dp-ops] TASK FAILED``: anything else;
- ``[dp-ops] DEADLINE MISSED``: a daily run was not done within ``DP_RUN_DEADLINE_HOURS``
  (default 6) of being queued (``defaults.run_deadline``, measured from the queue time,
  so a backfill of 2020 dates does not fire it), whatever its state.

The text names the DAG, run, task and try, and the error's message, which by the
pipeline's rule names files, parameters and counts, never rows, user ids or un-noised
values (the leak-scan test checks the alert too).
"""

from __future__ import annotations

import html
import logging
import os
from collections.abc import Iterator, Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Any

from airflow.sdk import BaseNotifier

from dp_ops import errors

_LOG = logging.getLogger(__name__)
ALERT_EMAILS_ENV = "DP_ALERT_EMAILS"
SMTP_CONN_ID = "smtp_default"


class FailureKind(StrEnum):
    BUDGET_REFUSED = "BUDGET REFUSED"
    GATE_FAILED = "GATE FAILED"
    INPUT_MISSING = "INPUT MISSING"
    PRIVACY_GUARD = "PRIVACY GUARD"
    OTHER = "TASK FAILED"
    DEADLINE_MISSED = "DEADLINE MISSED"


# How long a daily run may take from being queued (docs: OPERATIONS.md, Alerts), unless
# DP_RUN_DEADLINE_HOURS says otherwise. A normal run takes minutes; a run still going
# after this is stuck or starved.
RUN_DEADLINE = timedelta(hours=6)
RUN_DEADLINE_ENV = "DP_RUN_DEADLINE_HOURS"


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def classify(exc: BaseException | None) -> FailureKind:
    """The kind of a task failure, from the exception and what it was raised from (the
    operators wrap refusals in AirflowFailException)."""
    for e in _chain(exc):
        if isinstance(e, errors.BudgetExceeded):
            return FailureKind.BUDGET_REFUSED
        if isinstance(e, errors.GateFailed):
            return FailureKind.GATE_FAILED
        if isinstance(e, errors.IngestError | FileNotFoundError | errors.RegionTableError):
            return FailureKind.INPUT_MISSING
        if isinstance(e, errors.LedgerError | errors.NoiseTampered
                      | errors.DerivedStateTampered):
            return FailureKind.PRIVACY_GUARD
    return FailureKind.OTHER


def compose(kind: FailureKind, *, dag_id: str, run_id: str, task_id: str, try_number: int,
            message: str, log_url: str | None = None) -> tuple[str, str]:
    """(subject, html body) of an alert. ``message`` is cut to 2,000 characters."""
    subject = f"[dp-ops] {kind.value}: {dag_id} / {task_id} ({run_id})"
    lines = [f"DAG: {dag_id}", f"run: {run_id}", f"task: {task_id} (try {try_number})",
             f"failure: {kind.value}", "", message[:2000]]
    if log_url:
        lines += ["", f"log: {log_url}"]
    body = "<pre>" + html.escape("\n".join(lines)) + "</pre>"
    return subject, body


def recipients() -> list[str]:
    return [a.strip() for a in os.environ.get(ALERT_EMAILS_ENV, "").split(",") if a.strip()]


def send_alert(subject: str, body: str, *, log: Any,
               smtp_conn_id: str = SMTP_CONN_ID) -> bool:
    """E-mail an alert to ``DP_ALERT_EMAILS`` through ``smtp_conn_id``; without recipients
    only log it. True if it was sent."""
    to = recipients()
    if not to:
        log.warning("alert not sent (%s unset): %s", ALERT_EMAILS_ENV, subject)
        return False
    from airflow.providers.smtp.hooks.smtp import SmtpHook

    with SmtpHook(smtp_conn_id=smtp_conn_id) as hook:
        hook.send_email_smtp(to=to, subject=subject, html_content=body)
    log.info("alert sent to %d address(es): %s", len(to), subject)
    return True


def deadline_missed(*, context: Mapping[str, Any], report: str) -> None:
    """The DAGs' deadline callback (run by the scheduler's executor when a run is still not
    done its deadline after it was queued)."""
    run = context.get("dag_run") or {}
    deadline = context.get("deadline") or {}
    subject, body = compose(
        FailureKind.DEADLINE_MISSED, dag_id=str(run.get("dag_id", f"{report} DAG")),
        run_id=str(run.get("dag_run_id", run.get("run_id", "?"))), task_id="(the run)",
        try_number=0,
        message=(f"the {report} run queued at {run.get('queued_at')} is not done by its "
                 f"deadline {deadline.get('deadline_time')} (the run's deadline after "
                 "queueing);"
                 f" state {run.get('state')}. Look for a stuck or queued task in the grid."))
    send_alert(subject, body, log=_LOG)


class FailureAlert(BaseNotifier):
    """Send the failure alert of a task (see the module docstring)."""

    def __init__(self, *, smtp_conn_id: str = SMTP_CONN_ID) -> None:
        super().__init__()
        self.smtp_conn_id = smtp_conn_id

    def notify(self, context: Mapping[str, Any]) -> None:
        exc = context.get("exception")
        ti = context.get("ti") or context.get("task_instance")
        kind = classify(exc if isinstance(exc, BaseException) else None)
        subject, body = compose(
            kind, dag_id=str(getattr(ti, "dag_id", "?")), run_id=str(context.get("run_id", "?")),
            task_id=str(getattr(ti, "task_id", "?")),
            try_number=int(getattr(ti, "try_number", 0) or 0),
            message=str(exc) if exc is not None else "(no exception)",
            log_url=getattr(ti, "log_url", None))
        send_alert(subject, body, log=self.log, smtp_conn_id=self.smtp_conn_id)
