"""A task supervisor that notices its task's exit at once, so that it needs no heartbeat
every second.

Airflow 3's supervisor (``airflow.sdk.execution_time.supervisor``) watches its task
process's sockets and checks whether the process has exited after each wait. When the
task's last socket closes a moment before the process can be reaped (usual: the sockets
close as the process exits), the supervisor has nothing left to watch and sleeps a whole
``[workers] min_heartbeat_interval`` (Airflow's default 5 s) before it looks again, holding
the executor slot meanwhile. Our deployments worked around it with an interval of 1 s,
which makes every running task heartbeat once a second: most of the Execution API's
requests in a backfill.

:func:`install` wraps the supervisor's wait: while the task process still runs but every
one of its sockets is closed, the supervisor waits at most :data:`EXITING_WAIT` before it
looks for the exit again. Nothing else changes: a wait with sockets open, and the waits
that escalate a kill (``raise_on_timeout``), are Airflow's own. With it the deployments
keep Airflow's default interval. ``docker/airflow/airflow_local_settings.py`` installs it
in the processes that run supervisors (the scheduler's LocalExecutor workers, the Celery
worker's pool).
"""

from __future__ import annotations

import threading
from typing import Any

# How long a supervisor whose task closed every socket waits before it looks for the
# task's exit again (seconds).
EXITING_WAIT = 0.05

_lock = threading.Lock()
_original: dict[str, Any] = {}


def exiting_wait(supervisor: Any, max_wait_time: float, raise_on_timeout: bool) -> float:
    """How long ``supervisor`` waits in this round: at most :data:`EXITING_WAIT` once its
    task closed every socket and has not yet been reaped, else ``max_wait_time``."""
    if (not raise_on_timeout and supervisor._exit_code is None
            and not supervisor._open_sockets):
        return min(max_wait_time, EXITING_WAIT)
    return max_wait_time


def install() -> None:
    """Wrap ``WatchedSubprocess._service_subprocess`` (once per process)."""
    from airflow.sdk.execution_time.supervisor import WatchedSubprocess

    with _lock:
        if _original:
            return
        serve = WatchedSubprocess._service_subprocess
        _original["serve"] = serve

        def _service_subprocess(self: Any, max_wait_time: float,
                                raise_on_timeout: bool = False,
                                expect_signal: None | int = None) -> Any:
            return serve(self, exiting_wait(self, max_wait_time, raise_on_timeout),
                         raise_on_timeout, expect_signal)

        WatchedSubprocess._service_subprocess = _service_subprocess  # type: ignore[method-assign]
