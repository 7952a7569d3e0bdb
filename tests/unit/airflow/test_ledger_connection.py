"""The ledger URL from the Airflow Connection ``dp_ledger`` (issue 15, point 6): the
pipeline's tasks read it there, its password masked in every log; without the connection
``DP_LEDGER_URL`` or the default applies (the CLI never looks at Airflow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dp_ops.airflow.runtime import ledger_url_from_connection, load
from dp_ops.errors import BadRequest

ENV = "AIRFLOW_CONN_DP_LEDGER"


def test_without_the_connection_the_environment_applies(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("DP_LEDGER_URL", f"sqlite:///{tmp_path}/env.sqlite")
    monkeypatch.setenv("DP_DATA_ROOT", str(tmp_path))
    assert ledger_url_from_connection() is None
    assert load("mobility").ledger_url == f"sqlite:///{tmp_path}/env.sqlite"


def test_a_postgres_connection_becomes_a_psycopg_url_and_its_password_is_masked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk._shared.secrets_masker.secrets_masker import redact

    monkeypatch.setenv(ENV, "postgres://dp_ledger:s3cret-Pw@db.internal:5432/dp_ledger"
                            "?sslmode=require")
    url = ledger_url_from_connection()
    assert url == ("postgresql+psycopg://dp_ledger:s3cret-Pw@db.internal:5432/dp_ledger"
                   "?sslmode=require")
    assert "s3cret-Pw" not in str(redact(f"opening the ledger at {url}"))


def test_the_connection_wins_over_the_environment(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, f"sqlite:///{tmp_path}/conn.sqlite")  # Airflow: 4 slashes, absolute
    monkeypatch.setenv("DP_LEDGER_URL", f"sqlite:///{tmp_path}/env.sqlite")
    monkeypatch.setenv("DP_DATA_ROOT", str(tmp_path))
    assert load("symptoms").ledger_url == f"sqlite:///{tmp_path}/conn.sqlite"


def test_another_connection_type_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "mysql://u:p@h/db")
    with pytest.raises(BadRequest, match="conn_type='mysql'"):
        ledger_url_from_connection()


def test_the_connection_is_looked_up_only_when_a_step_needs_the_ledger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ingest, bounding and the gate never open the ledger: their task instances make no
    # Execution API call for the connection (issue 16: one call per task instance)
    from dp_ops.airflow import runtime

    calls: list[int] = []

    def lookup() -> str:
        calls.append(1)
        return f"sqlite:///{tmp_path}/conn.sqlite"

    monkeypatch.setattr(runtime, "ledger_url_from_connection", lookup)
    monkeypatch.setenv("DP_DATA_ROOT", str(tmp_path))
    report = runtime.load("mobility")
    assert report.root.root == tmp_path and calls == []
    assert report.ledger_url == f"sqlite:///{tmp_path}/conn.sqlite"
    assert report.ledger_url == f"sqlite:///{tmp_path}/conn.sqlite"
    assert calls == [1]  # once, then cached


def test_the_task_only_providers_do_nothing_outside_a_task(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``load()`` registers, process-wide, where a task finds the ledger key (the
    Connection ``dp_ledger_key``) and what Airflow announced (the release asset events).
    Outside a task (``dag.test()`` runs tasks inside the test process; later in-process
    steps are no task) both step aside: the key comes from the environment, nothing is
    announced, and nothing raises."""
    from dp_ops.airflow import runtime
    from dp_ops.privacy import ledger_key
    from dp_ops.steps import ledger_binding

    monkeypatch.setenv("AIRFLOW_CONN_DP_LEDGER_KEY", "generic://:" + "cd" * 32 + "@")
    monkeypatch.setenv("DP_DATA_ROOT", str(tmp_path))
    load("mobility")
    try:
        assert runtime.ledger_key_from_connection() is None
        assert runtime.announced_releases() == []
        assert ledger_key.load_key(create=True) != bytes.fromhex("cd" * 32)
    finally:
        ledger_key.use_provider(None)
        ledger_binding.use_announcements(None)
