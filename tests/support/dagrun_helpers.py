"""Helpers for running DAGs with ``dag.test()`` in the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def repo_dags() -> dict:
    """The repository's DAGs by id, as the DAG processor parses them (no import error)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    return bag.dags


@contextmanager
def e2e_data_root(tmp_path_factory: pytest.TempPathFactory, name: str, start: date,
                  end: date, *, users: int, seed: int, config_env: str) -> Iterator[Path]:
    """A data root with the demo generator's input for ``start``..``end``, set as
    ``DP_DATA_ROOT`` while the block runs: the default ledger, the report's default
    configuration (``config_env`` unset), "approver" as the one who may approve spends
    (never the requester), and "dag_test" (the requester of ``dag.test()`` runs) and
    "approver" as Airflow users."""
    from dp_demo.generator import generate

    from dp_ops.layout import DataRoot

    root = tmp_path_factory.mktemp(name) / "data"
    root.mkdir()
    generate(DataRoot(root), start, end, users=users, seed=seed)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DP_DATA_ROOT", str(root))
        mp.delenv("DP_LEDGER_URL", raising=False)
        mp.delenv(config_env, raising=False)
        mp.setenv("DP_SPEND_APPROVERS", "approver")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "dag_test:user,approver:user")
        yield root


def logical_date(day: date) -> datetime:
    """The logical date of a manual/test run whose data interval starts on ``day``."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)


def delete_runs(*dag_ids: str) -> None:
    """Forget earlier ``dag.test()`` runs: the session's metadata DB is shared, and a
    finished run for the same logical date would not be run again."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    with create_session() as session:
        session.execute(delete(DagRun).where(DagRun.dag_id.in_(dag_ids)))


def task_states(dag_run) -> dict[str, tuple[str | None, int]]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(select(TaskInstance).where(
            TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id))
        return {ti.task_id: (str(ti.state) if ti.state else None, ti.try_number) for ti in tis}


def run_dag_day(dag, day: date):
    dag_run = dag.test(logical_date=logical_date(day))
    states = task_states(dag_run)
    assert dag_run.state == "success", f"{dag.dag_id} {day}: {states}"
    return dag_run


def asset_events(name: str) -> list[dict]:
    """The extras of every event of asset ``name`` in the metadata DB, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == name).order_by(AssetEvent.id)).scalars().all()
    return [dict(r or {}) for r in rows]
