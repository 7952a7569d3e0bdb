"""``dp_ops.airflow.supervisor``: a task supervisor whose task has closed every socket
looks for the task's exit again after a moment, not after a heartbeat interval; every
other wait of Airflow's supervisor is left as it is. Run through Airflow's own
``WatchedSubprocess._service_subprocess``, with what it reads of a supervisor (the
selector, the open sockets, the exit check) stood in for and the waits recorded; the
Airflow integration tests and ``make demo`` run real supervisors with it."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any

import pytest
from airflow.sdk.execution_time.supervisor import WatchedSubprocess

from dp_ops.airflow import supervisor


@dataclass
class _Selector:
    timeouts: list[float] = field(default_factory=list)

    def select(self, timeout: float) -> list[Any]:
        self.timeouts.append(timeout)
        return []


@dataclass
class _Supervised:
    """What ``_service_subprocess`` reads of a supervisor."""

    _open_sockets: dict[Any, str]
    _exit_code: int | None = None
    selector: _Selector = field(default_factory=_Selector)

    def _check_subprocess_exit(self, raise_on_timeout: bool = False,
                               expect_signal: int | None = None) -> int | None:
        return self._exit_code


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrap installed for the test only (Airflow's method restored after)."""
    monkeypatch.setattr(WatchedSubprocess, "_service_subprocess",
                        WatchedSubprocess._service_subprocess)
    monkeypatch.setattr(supervisor, "_original", {})
    supervisor.install()
    supervisor.install()  # once per process: a second call wraps nothing more


def _waits(supervised: _Supervised, max_wait_time: float, **kwargs: Any) -> list[float]:
    WatchedSubprocess._service_subprocess(supervised, max_wait_time, **kwargs)  # type: ignore[arg-type]
    return supervised.selector.timeouts


def test_a_task_with_every_socket_closed_is_looked_at_again_at_once(installed: None) -> None:
    assert _waits(_Supervised(_open_sockets={}), 5.0) == [supervisor.EXITING_WAIT]
    assert _waits(_Supervised(_open_sockets={}), 0.02) == [0.02]


def test_every_other_wait_is_airflow_s(installed: None) -> None:
    sock = socket.socket()
    try:
        assert _waits(_Supervised(_open_sockets={sock: "requests"}), 5.0) == [5.0]
    finally:
        sock.close()
    assert _waits(_Supervised(_open_sockets={}, _exit_code=0), 5.0) == [5.0]
    # the wait that escalates a kill (SIGTERM, then SIGKILL after its timeout)
    assert _waits(_Supervised(_open_sockets={}), 5.0, raise_on_timeout=True) == [5.0]


def test_without_the_wrap_airflow_waits_the_whole_interval() -> None:
    assert _waits(_Supervised(_open_sockets={}), 5.0) == [5.0]
