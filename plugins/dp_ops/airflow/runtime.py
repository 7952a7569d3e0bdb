"""What every operator does in ``execute()``: bind its report (config, data root, ledger
URL, all from the environment, see :mod:`dp_ops.settings`), parse rendered template
values, and turn a pipeline error into a task failure with or without retry.

Nothing here runs at DAG-parse time: the operators call it from ``execute()`` so that the
DAG processor never reads the environment's data root, the config file or the ledger.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from airflow.sdk.exceptions import AirflowFailException

from dp_ops import requests
from dp_ops.errors import BadRequest, BudgetExceeded, GateFailed, Refusal

if TYPE_CHECKING:
    from dp_ops.reports.registry import AnyReport


class ErrorLog(Protocol):
    """What :func:`refusals_fail_without_retry` needs of a logger: a stdlib
    :class:`logging.Logger` and an operator's ``self.log`` (Airflow's structlog-based
    logger) both qualify."""

    def error(self, msg: Any, /, *args: Any) -> object: ...


LEDGER_CONN_ID = "dp_ledger"
LEDGER_KEY_CONN_ID = "dp_ledger_key"


def ledger_url_from_connection() -> str | None:
    """The ledger's SQLAlchemy URL from the Airflow Connection ``dp_ledger``, through
    :class:`~dp_ops.airflow.hooks.ledger.LedgerHook` (its password masked in every log),
    or None when there is no such connection: then ``DP_LEDGER_URL`` or the default
    applies."""
    from dp_ops.airflow.hooks.ledger import LedgerHook

    return LedgerHook(LEDGER_CONN_ID).get_url()


def _current_task_instance() -> str | None:
    """The id of the task instance executing in this process now, or None outside a task:
    the providers below are registered process-wide by :func:`load`, and must do nothing
    once the task is over (``dag.test()`` runs tasks inside the test process; the steps
    that test runs afterwards are no task)."""
    from airflow.sdk import get_current_context

    try:
        context = get_current_context()
    except Exception:  # the SDK raises AirflowException when no task context is active
        return None
    return str(context["ti"].id)


def _in_task() -> bool:
    return _current_task_instance() is not None


# The secrets the running task instance read, by connection id: a step asks for the ledger
# key each time it opens or verifies the ledger (several times per noise or publish task),
# and each lookup is an Execution API call. One lookup per connection and task instance;
# another task instance in this process (dag.test()) looks them up afresh.
_task_secrets: tuple[str, dict[str, str | None]] | None = None


def _secret_from_connection(conn_id: str) -> str | None:
    """The password of the Airflow Connection ``conn_id`` inside a task (served by the
    secrets backend, masked in every log from here on; looked up once per task instance),
    or None outside a task or when there is no such connection; an empty password is
    refused."""
    global _task_secrets
    ti = _current_task_instance()
    if ti is None:
        return None
    if _task_secrets is None or _task_secrets[0] != ti:
        _task_secrets = (ti, {})
    known = _task_secrets[1]
    if conn_id not in known:
        known[conn_id] = _look_up_secret(conn_id)
    return known[conn_id]


def _look_up_secret(conn_id: str) -> str | None:
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException
    from airflow.sdk.log import mask_secret

    try:
        conn = Connection.get(conn_id)
    except AirflowNotFoundException:
        return None
    if not conn.password:
        raise BadRequest(f"connection {conn_id}: the key goes in its password field, "
                         "which is empty")
    mask_secret(conn.password)
    return str(conn.password)


def ledger_key_from_connection() -> bytes | None:
    """The ledger key from the Airflow Connection ``dp_ledger_key`` (its password: 64 hex
    digits; served by the secrets backend, masked in every log), or None when there is no
    such connection: then ``DP_LEDGER_KEY`` or the key file applies
    (:mod:`dp_ops.privacy.ledger_key`)."""
    from dp_ops.privacy.ledger_key import parse_key

    secret = _secret_from_connection(LEDGER_KEY_CONN_ID)
    if secret is None:
        return None
    return parse_key(secret, source=f"connection {LEDGER_KEY_CONN_ID}")


def release_signing_key_from_connection() -> str | None:
    """The release-signing key from the Airflow Connection ``dp_release_signing_key`` (its
    password: the OpenSSH private key or its seed in hex; served by the secrets backend,
    masked in every log), or None when there is no such connection: then
    ``DP_RELEASE_SIGNING_KEY`` or the key file applies (:mod:`dp_ops.release_signing`)."""
    from dp_ops.release_signing import CONNECTION_ID

    return _secret_from_connection(CONNECTION_ID)


def spark_remote_from_connection(conn_id: str) -> str | None:
    """The Spark Connect URL of the Airflow Connection ``conn_id`` (type ``spark_connect``:
    host, port, optional user id and token; the Apache Spark provider's
    ``SparkConnectHook`` builds the URL, its token masked in every log), or None when
    there is no such connection or no task is running: then ``DP_SPARK_REMOTE`` applies."""
    from airflow.sdk.exceptions import AirflowNotFoundException
    from airflow.sdk.log import mask_secret

    if not _in_task():
        return None
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    hook = SparkConnectHook(conn_id)
    try:
        conn = hook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    if conn.password:  # the token, as typed and as the URL quotes it
        mask_secret(conn.password)
        mask_secret(quote(conn.password))
    return hook.get_connection_url()


def announced_releases() -> list[Mapping[str, Any]]:
    """The extras of every release asset event (every report), from Airflow's metadata DB
    through the Execution API: what was announced, kept outside the data root."""
    from airflow.sdk.execution_time.context import InletEventsAccessor

    from dp_ops.airflow.assets import release_assets

    if not _in_task():
        return []
    out: list[Mapping[str, Any]] = []
    for asset in release_assets():
        for event in InletEventsAccessor(asset_name=asset.name, asset_uri=asset.uri):
            out.append(dict(event.extra or {}))
    return out


def load(report: str) -> AnyReport:
    """``report`` bound to its config, data root and ledger (imported here, at run time,
    so that parsing a DAG file imports none of the pipeline). The ledger URL comes from the
    Airflow Connection ``dp_ledger`` when it exists (:func:`ledger_url_from_connection`),
    else from ``DP_LEDGER_URL`` or the default, looked up when a step first needs the
    ledger (one Execution API call; ingest, bounding and the gate never do)."""
    from dp_ops import release_signing
    from dp_ops.privacy import ledger_key
    from dp_ops.reports.registry import load_report
    from dp_ops.settings import use_spark_remote_provider
    from dp_ops.steps.ledger_binding import use_announcements

    ledger_key.use_provider(ledger_key_from_connection)
    release_signing.use_provider(release_signing_key_from_connection)
    use_spark_remote_provider(spark_remote_from_connection)
    use_announcements(announced_releases)
    return load_report(report, ledger_url=ledger_url_from_connection)


@contextmanager
def refusals_fail_without_retry(log: ErrorLog, request: str = "request") -> Iterator[None]:
    """The one place that decides retry. A :class:`dp_ops.errors.Refusal` fails the task
    at once, without retry, since retrying cannot change it:

    - a budget refusal (nothing was drawn) and a failed release gate (the last good
      release stays published; the message names the Data Docs) are logged as errors;
    - a bad request fails with ``"<request> refused: <why>"``.

    Any other error propagates unchanged, and the task's retries apply."""
    try:
        yield
    except BudgetExceeded as exc:
        log.error("privacy budget refused, no noise drawn: %s", exc)
        raise AirflowFailException(str(exc)) from exc
    except GateFailed as exc:
        log.error("release gate failed; the last good release stays published. %s", exc)
        raise AirflowFailException(str(exc)) from exc
    except BadRequest as exc:
        raise AirflowFailException(f"{request} refused: {exc}") from exc
    except Refusal as exc:
        raise AirflowFailException(str(exc)) from exc


def parse_day(value: Any, *, field: str = "day") -> date:
    """A rendered ``YYYY-MM-DD`` (or a date/datetime) as a :class:`date`."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return requests.iso_day(value, field=field)


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def parse_bool(value: Any, *, field: str) -> bool:
    """A rendered boolean param. Jinja renders ``{{ params.renoise }}`` to the string
    ``"True"`` or ``"False"``, and ``bool("False")`` is true, so parse it strictly."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise BadRequest(f"{field}={value!r}: expected true or false")


def parse_region(value: Any) -> str | None:
    """A rendered region id (plain, short: :func:`dp_ops.requests.region_id`), or
    ``None`` for "every region"."""
    if value is None:
        return None
    text = str(value).strip()
    return requests.region_id(text) if text else None
