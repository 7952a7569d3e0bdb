"""What the DAG files share: task defaults and the on-call rerun form.

Imported at DAG-parse time, so it imports nothing but the Airflow SDK and dp_ops.errors
(through the alert notifier).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from typing import Any

from airflow.sdk import Param

# (the SDK exports these lazily, which mypy cannot follow: import them from their modules)
from airflow.sdk.definitions.callback import SyncCallback
from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

from dp_ops.airflow.alerts import (
    RUN_DEADLINE,
    RUN_DEADLINE_ENV,
    FailureAlert,
    deadline_missed,
)

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "dp-ops",
    "retries": 2,
    "retry_delay": timedelta(seconds=20),
    "execution_timeout": timedelta(hours=1),
    # one e-mail per failed task, its subject naming the kind of failure (OPERATIONS.md,
    # Alerts): SMTP connection `smtp_default`, recipients DP_ALERT_EMAILS
    "on_failure_callback": [FailureAlert()],
}

# On-call DAGs (region reruns, method updates) run ahead of daily runs and backfills: when
# worker slots are scarce, the scheduler queues the task instances of highest priority
# first. "absolute": the weight is the task's own, not summed over downstream tasks, so a
# long daily chain cannot outweigh an on-call task.
ON_CALL_PRIORITY = 100
ON_CALL_ARGS: dict[str, Any] = {**DEFAULT_ARGS, "priority_weight": ON_CALL_PRIORITY,
                                "weight_rule": "absolute"}
DAILY_ARGS: dict[str, Any] = {**DEFAULT_ARGS, "priority_weight": 1,
                              "weight_rule": "absolute"}

# The day a scheduled or backfill run processes: the start of its one-day data interval.
RUN_DAY = "{{ data_interval_start | ds }}"


def deadline_interval(value: str | None) -> timedelta | None:
    """The daily runs' deadline from ``DP_RUN_DEADLINE_HOURS`` (hours after a run is
    queued; unset: ``RUN_DEADLINE``; ``0``: no deadline). Anything else is a ValueError
    naming the variable (a DAG import error in the UI)."""
    if value is None or not value.strip():
        return RUN_DEADLINE
    try:
        hours = float(value)
    except ValueError:
        raise ValueError(f"{RUN_DEADLINE_ENV}={value[:40]!r}: expected a number of hours "
                         "(0: no deadline)") from None
    if not (0 <= hours <= 24 * 7):
        raise ValueError(f"{RUN_DEADLINE_ENV}={value[:40]!r}: expected 0 (no deadline) to "
                         "168 hours")
    return timedelta(hours=hours) if hours else None


def run_deadline(report: str) -> DeadlineAlert | None:
    """The daily DAGs' deadline: an alert when a run is not done its deadline
    (``DP_RUN_DEADLINE_HOURS``, default 6 h) after it was queued (not after its logical
    date: a backfill of 2020 dates must not fire it). Read when the DAG file is parsed.

    The ``dag.test()`` harness of the integration tests sets 0 (no deadline): Airflow
    3.3.2's ``dag.test()`` fails on a DAG with a deadline (it looks the deadline alerts up
    by their serialized dicts instead of their ids); the scheduler handles them, which
    the topology test runs (docs/airflow.md)."""
    interval = deadline_interval(os.environ.get(RUN_DEADLINE_ENV))
    if interval is None:
        return None
    return DeadlineAlert(reference=DeadlineReference.DAGRUN_QUEUED_AT, interval=interval,
                         callback=SyncCallback(deadline_missed, kwargs={"report": report}),
                         name=f"{report}_run_deadline")


BOUNDING_POOL_ENV = "DP_BOUNDING_POOL"
_POOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")


def bounding_pool(value: str | None = None) -> str:
    """The Airflow pool of the tasks that run on the engine (``ingest`` and
    ``bound_contributions``), from ``DP_BOUNDING_POOL`` (default ``default_pool``). With
    the Spark engine on a cluster, a pool whose slots are the Spark applications the
    cluster can run at once keeps a backfill from queueing more Spark jobs than that,
    while the other steps (which run on the workers) go on; create the pool first
    (``airflow pools set spark_bounding 4 "..."``). Read when the DAG file is parsed; a
    malformed name is a ValueError naming the variable (a DAG import error)."""
    name = os.environ.get(BOUNDING_POOL_ENV) if value is None else value
    if name is None or not name.strip():
        return "default_pool"
    if not _POOL_NAME.fullmatch(name.strip()):
        raise ValueError(f"{BOUNDING_POOL_ENV}={name[:40]!r}: expected a pool name (letters, "
                         "digits, '_', '.', '-')")
    return name.strip()


# The rerun form's values, as templates for the operators.
RERUN_DAY = "{{ params.date }}"
RERUN_REGION = "{{ params.region }}"
RERUN_RENOISE = "{{ params.renoise }}"
RERUN_REASON = "{{ params.reason }}"
RERUN_REPEAT_RENOISE = "{{ params.repeat_renoise }}"


def rerun_params(daily_dag_id: str) -> dict[str, Param]:
    """The trigger form of a ``*_region_rerun`` DAG (docs/design.md, Operations)."""
    return {
        "date": Param(type="string", format="date", title="Date",
                      description="The day to recompute (YYYY-MM-DD); it must already have "
                                  f"been noised by {daily_dag_id}."),
        "region": Param(type="string", minLength=1, title="Region",
                        description="A region_id from reference/regions.csv."),
        "renoise": Param(False, type="boolean", title="Draw fresh noise",
                         description="Spend privacy budget again for this region and day "
                                     "(recorded in the ledger). Leave off to reuse the "
                                     "stored noise."),
        "reason": Param(type="string", minLength=3, maxLength=500, title="Reason",
                        description="Why this rerun is needed (incident or ticket); recorded "
                                    "with any spend. At most 500 characters, one line."),
        "repeat_renoise": Param(False, type="boolean", title="Re-noise again",
                                description="Only with 'Draw fresh noise': allow a second "
                                            "re-noise of this region and day (refused "
                                            "otherwise; recorded in the ledger)."),
    }
