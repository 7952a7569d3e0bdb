"""Failure alerts (issue 15, point 2): each kind of failure gets its own subject, the text
names DAG, run, task and the failure, passes the leak scan, and goes out through Airflow's
SMTP provider to a real (local) SMTP server."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException
from support.smtp_sink import SmtpSink

from dp_ops.airflow.alerts import FailureAlert, FailureKind, classify, compose
from dp_ops.airflow.defaults import DEFAULT_ARGS
from dp_ops.errors import BudgetExceeded, GateFailed, IngestError, LedgerTampered


def _wrapped(exc: Exception) -> Exception:
    """As the operators raise a refusal: AirflowFailException from the original."""
    try:
        try:
            raise exc
        except Exception as inner:
            raise AirflowFailException(str(inner)) from inner
    except AirflowFailException as outer:
        return outer


@pytest.mark.parametrize("exc, kind", [
    (BudgetExceeded("privacy budget refused for date 2020-03-02"), FailureKind.BUDGET_REFUSED),
    (GateFailed("release gate failed: 2 of 43 expectations failed"), FailureKind.GATE_FAILED),
    (IngestError("missing raw partition raw/location_history/date=2020-03-02"),
     FailureKind.INPUT_MISSING),
    (LedgerTampered("ledger x fails verification"), FailureKind.PRIVACY_GUARD),
    (RuntimeError("disk full"), FailureKind.OTHER),
])
def test_each_failure_kind_has_its_own_subject(exc: Exception, kind: FailureKind) -> None:
    assert classify(_wrapped(exc)) is kind
    assert classify(exc) is kind
    subject, _ = compose(kind, dag_id="d", run_id="r", task_id="t", try_number=3, message="m")
    assert subject.startswith(f"[dp-ops] {kind.value}: d / t (r)")


def test_every_task_of_every_dag_alerts_on_failure() -> None:
    callbacks = DEFAULT_ARGS["on_failure_callback"]
    assert any(isinstance(c, FailureAlert) for c in callbacks)


def _context(exc: Exception) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="mobility_report", task_id="noise", try_number=1,
                         log_url="http://localhost:8080/log")
    return {"exception": _wrapped(exc), "ti": ti, "run_id": "backfill__2020-03-02"}


def test_an_alert_reaches_a_real_smtp_server(monkeypatch: pytest.MonkeyPatch) -> None:
    with SmtpSink() as sink:
        monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", sink.connection_uri())
        monkeypatch.setenv("DP_ALERT_EMAILS", "oncall@example.org, budget@example.org")
        FailureAlert().notify(_context(BudgetExceeded(
            "privacy budget refused for date 2020-03-02, slot mobility/2020-03-02/level 2/"
            "places/region *: spent 17.1600 + requested 1.7600 would exceed the per-user-day "
            "cap 18.0180 for report 'mobility'; no noise was drawn")))
    assert sink.subjects() == [
        "[dp-ops] BUDGET REFUSED: mobility_report / noise (backfill__2020-03-02)"]
    (rcpt, _), = sink.received
    assert rcpt == ["oncall@example.org", "budget@example.org"]
    (body,) = sink.bodies()
    for needle in ("DAG: mobility_report", "run: backfill__2020-03-02", "task: noise (try 1)",
                   "cap 18.0180", "log: http://localhost:8080/log"):
        assert needle in body, needle
    assert body.count("\n") < 12  # the message once, not a traceback


def test_without_recipients_the_alert_is_only_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    with SmtpSink() as sink:
        monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", sink.connection_uri())
        monkeypatch.delenv("DP_ALERT_EMAILS", raising=False)
        FailureAlert().notify(_context(GateFailed("release gate failed")))
    assert sink.received == []


def test_the_deadline_alert_names_the_run_and_goes_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The context is what the scheduler gives a deadline callback (a DAGRunResponse dump
    and the deadline)."""
    from dp_ops.airflow.alerts import deadline_missed

    context = {"dag_run": {"dag_id": "mobility_report", "dag_run_id": "scheduled__2026-12-01",
                           "queued_at": "2026-12-01T00:00:05Z", "state": "running"},
               "deadline": {"id": "x", "deadline_time": "2026-12-01T06:00:05Z"}}
    with SmtpSink() as sink:
        monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", sink.connection_uri())
        monkeypatch.setenv("DP_ALERT_EMAILS", "oncall@example.org")
        deadline_missed(context=context, report="mobility")
    assert sink.subjects() == [
        "[dp-ops] DEADLINE MISSED: mobility_report / (the run) (scheduled__2026-12-01)"]
    (body,) = sink.bodies()
    assert "queued at 2026-12-01T00:00:05Z" in body and "state running" in body


def test_the_run_deadline_is_measured_from_the_queue_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the daily DAGs carry (the dag.test() harness turns it off: see
    tests/conftest.py)."""
    from airflow.sdk.definitions.deadline import DeadlineReference

    from dp_ops.airflow.alerts import RUN_DEADLINE
    from dp_ops.airflow.defaults import run_deadline

    monkeypatch.delenv("DP_RUN_DEADLINE_HOURS")
    alert = run_deadline("mobility")
    assert alert is not None
    # from the queue time, not the logical date: a backfill of 2020 must not fire it
    assert alert.reference == DeadlineReference.DAGRUN_QUEUED_AT
    assert alert.interval == RUN_DEADLINE == timedelta(hours=6)
    assert alert.callback.path == "dp_ops.airflow.alerts.deadline_missed"
    assert alert.callback.kwargs == {"report": "mobility"}
    monkeypatch.setenv("DP_RUN_DEADLINE_HOURS", "1.5")
    alert = run_deadline("mobility")
    assert alert is not None and alert.interval == timedelta(minutes=90)
    monkeypatch.setenv("DP_RUN_DEADLINE_HOURS", "0")
    assert run_deadline("mobility") is None


@pytest.mark.parametrize("value", ["six", "-1", "1000", "nan"])
def test_a_bad_deadline_setting_names_the_variable(value: str) -> None:
    from dp_ops.airflow.defaults import deadline_interval

    with pytest.raises(ValueError, match="DP_RUN_DEADLINE_HOURS"):
        deadline_interval(value)
