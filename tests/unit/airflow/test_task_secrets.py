"""A task instance reads each connection's secret once (issue 49, the per-run cost): a
noise or publish step asks for the ledger key every time it opens or verifies the
ledger, and each lookup is an Execution API call. Another task instance in the same
process (``dag.test()``) looks it up again, and outside a task nothing is looked up."""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import SimpleNamespace

import pytest
from airflow.sdk.execution_time.context import set_current_context

from dp_ops.airflow import runtime

KEY = "ab" * 32


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The connection ids looked up through the secrets backend (the real lookup runs)."""
    monkeypatch.setenv("AIRFLOW_CONN_DP_LEDGER_KEY", f"generic://:{KEY}@")
    monkeypatch.setattr(runtime, "_task_secrets", None)
    seen: list[str] = []
    real = runtime._look_up_secret

    def counted(conn_id: str) -> str | None:
        seen.append(conn_id)
        return real(conn_id)

    monkeypatch.setattr(runtime, "_look_up_secret", counted)
    return seen


def _task(ti_id: str) -> AbstractContextManager[object]:
    """Inside the block, task instance ``ti_id`` is executing (its context is current)."""
    return set_current_context({"ti": SimpleNamespace(id=ti_id)})  # type: ignore[typeddict-item]


def test_one_lookup_per_connection_and_task_instance(lookups: list[str]) -> None:
    with _task("ti-1"):
        keys = [runtime.ledger_key_from_connection() for _ in range(5)]
        assert runtime.release_signing_key_from_connection() is None
        assert runtime.release_signing_key_from_connection() is None
    assert keys == [bytes.fromhex(KEY)] * 5
    assert lookups == ["dp_ledger_key", "dp_release_signing_key"]


def test_another_task_instance_looks_up_again(lookups: list[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with _task("ti-1"):
        assert runtime.ledger_key_from_connection() == bytes.fromhex(KEY)
    monkeypatch.setenv("AIRFLOW_CONN_DP_LEDGER_KEY", "generic://:" + "cd" * 32 + "@")
    with _task("ti-2"):
        assert runtime.ledger_key_from_connection() == bytes.fromhex("cd" * 32)
    assert lookups == ["dp_ledger_key", "dp_ledger_key"]


def test_outside_a_task_nothing_is_looked_up(lookups: list[str]) -> None:
    with _task("ti-1"):
        runtime.ledger_key_from_connection()
    assert runtime.ledger_key_from_connection() is None
    assert lookups == ["dp_ledger_key"]


def test_an_empty_password_is_refused_every_time(lookups: list[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from dp_ops.errors import BadRequest

    monkeypatch.setenv("AIRFLOW_CONN_DP_LEDGER_KEY", "generic://")
    with _task("ti-1"):
        for _ in range(2):
            with pytest.raises(BadRequest, match="password field, which is empty"):
                runtime.ledger_key_from_connection()
