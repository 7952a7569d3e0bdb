"""The symptoms DAGs run end to end through Airflow (``dag.test()``) on small synthetic
data: the daily DAG for every day like a backfill, then the on-call rerun DAG.

As in ``test_mobility_dag_e2e``: a run for day D has logical date D + 1 day, so its
``data_interval_start`` (the day processed) is D, exactly as in a backfill run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from support.dagrun_helpers import (
    asset_events,
    delete_runs,
    e2e_data_root,
    logical_date,
    repo_dags,
    run_dag_day,
    task_states,
)
from support.dates import date_range
from support.hitl import responder

pytestmark = [pytest.mark.slow, pytest.mark.integration]

START, END = date(2020, 1, 1), date(2020, 1, 14)
USERS = 3000
SEED = 11


@pytest.fixture(scope="module")
def dags(airflow_db: Path) -> dict:
    return repo_dags()


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Synthetic input for START..END, in ``DP_DATA_ROOT`` for the whole module."""
    with e2e_data_root(tmp_path_factory, "symptoms_e2e", START, END, users=USERS, seed=SEED,
                       config_env="DP_SYMPTOMS_CONFIG") as root:
        yield root


def _spends(root: Path) -> list:
    from dp_ops.layout import DataRoot, ledger_url
    from dp_ops.privacy.ledger import Ledger

    ledger = Ledger(ledger_url(DataRoot(root)))
    try:
        return ledger.spends("symptoms")
    finally:
        ledger.dispose()


@pytest.fixture(scope="module")
def backfilled(dags: dict, data_root: Path) -> Path:
    delete_runs("symptoms_dataset", "symptoms_region_rerun")
    for day in date_range(START, END):
        run_dag_day(dags["symptoms_dataset"], day)
    return data_root


def test_release_published(backfilled: Path) -> None:
    latest = backfilled / "published" / "symptoms" / "latest"
    manifest = json.loads((latest / "manifest.json").read_text())
    assert manifest["last_date"] == END.isoformat()
    assert manifest["epsilon"]["per_user_day_max"] == 1.68
    weekly = (latest / "2020_DM_weekly_symptoms_dataset.csv").read_text().splitlines()
    assert weekly[0].startswith("open_covid_region_code,country_region_code,country_region,")
    assert len(weekly[0].split(",")) == 8 + 422
    assert {line.split(",")[7] for line in weekly[1:]} == {"2020-01-06"}
    assert (latest / "2020_DM_daily_symptoms_dataset.csv").is_file()
    assert {s.slot.day for s in _spends(backfilled)} == set(date_range(START, END))


def test_rerunning_a_day_spends_nothing(dags: dict, backfilled: Path) -> None:
    """... and announces nothing: one `symptoms_release` event per release published by
    the backfill, none for the rerun that reproduces the current release (issue 15,
    point 3)."""
    before = _spends(backfilled)
    events = asset_events("symptoms_release")
    releases = {p.name for p in (backfilled / "published" / "symptoms" / "releases").iterdir()}
    # (the metadata DB is the session's: count this data root's releases only)
    assert len([e for e in events if e["release_id"] in releases]) == len(releases) >= 1
    assert events[-1]["release_id"] == (backfilled / "published" / "symptoms"
                                        / "latest").resolve().name
    delete_runs("symptoms_dataset")
    run_dag_day(dags["symptoms_dataset"], END)
    assert _spends(backfilled) == before
    assert len(asset_events("symptoms_release")) == len(events)


def test_region_rerun_with_renoise_spends_and_records_reason(dags: dict,
                                                            backfilled: Path) -> None:
    before = _spends(backfilled)
    reason = "integration test: corrected raw search data"
    with responder("symptoms_region_rerun", user="approver") as asked:
        dag_run = dags["symptoms_region_rerun"].test(
            logical_date=None,
            run_conf={"date": END.isoformat(), "region": "DM-02-001", "renoise": True,
                      "reason": reason})
    assert dag_run.state == "success", task_states(dag_run)
    assert len(asked.subjects) == 1 and "DM-02-001" in asked.subjects[0]
    new = [s for s in _spends(backfilled) if s not in before]
    assert len(new) == 6 and {s.reason for s in new} == {reason}
    assert {s.slot.region_scope for s in new} == {"DM-02-001", "DM-02", "DM"}


def test_row7_a_whole_rollback_is_refused_by_what_airflow_announced(
        dags: dict, backfilled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 31, attack 7 through Airflow: the whole data root (ledger, records and
    ``published/``) restored from a backup taken before a release. Nothing in the data
    root remembers that release; the release asset event Airflow stored when it was
    published does, and the next run's noise task refuses before spending. (The data root
    is put back as it was afterwards, for the tests that follow.)"""
    import shutil

    from dp_ops.layout import DataRoot

    backup, after = tmp_path / "backup", tmp_path / "after"
    shutil.copytree(backfilled, backup, symlinks=True)
    with responder("symptoms_region_rerun", user="approver"):
        dag_run = dags["symptoms_region_rerun"].test(
            logical_date=None,
            run_conf={"date": date(2020, 1, 12).isoformat(), "region": "DM-02-001",
                      "renoise": True, "reason": "integration test: before a rollback"})
    assert dag_run.state == "success", task_states(dag_run)
    announced = asset_events("symptoms_release")[-1]
    assert announced["release_id"] == DataRoot(backfilled).latest_release(
        "symptoms").resolve().name
    shutil.copytree(backfilled, after, symlinks=True)
    try:
        shutil.rmtree(backfilled)
        shutil.copytree(backup, backfilled, symlinks=True)
        spent, latest = _spends(backfilled), DataRoot(backfilled).latest_release(
            "symptoms").resolve()
        assert latest.name != announced["release_id"]
        delete_runs("symptoms_dataset")
        dag_run = dags["symptoms_dataset"].test(logical_date=logical_date(END))
        states = task_states(dag_run)
        assert dag_run.state == "failed" and states["noise"] == ("failed", 1), states
        assert f"symptoms/{announced['release_id']} was announced" in capsys.readouterr().out
        assert _spends(backfilled) == spent
        assert DataRoot(backfilled).latest_release("symptoms").resolve() == latest
    finally:
        shutil.rmtree(backfilled)
        shutil.copytree(after, backfilled, symlinks=True)
        delete_runs("symptoms_dataset")


def test_region_rerun_rejects_a_day_not_noised_yet(dags: dict, backfilled: Path) -> None:
    dag_run = dags["symptoms_region_rerun"].test(
        logical_date=None,
        run_conf={"date": "2020-02-01", "region": "DM-02-001", "renoise": False,
                  "reason": "integration test"})
    states = task_states(dag_run)
    assert dag_run.state == "failed"
    assert states["validate_request"] == ("failed", 1)


def test_budget_refusal_fails_noise_without_retry(dags: dict, airflow_db: Path,
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from dp_demo.generator import generate

    from dp_ops.layout import DataRoot

    root = tmp_path / "data"
    root.mkdir()
    day = date(2020, 1, 1)
    generate(DataRoot(root), day, day, users=200, seed=SEED)
    config = tmp_path / "symptoms.json"
    config.write_text(json.dumps({"cap_override": 1.0}))  # below one normal run (1.68)
    monkeypatch.setenv("DP_DATA_ROOT", str(root))
    monkeypatch.setenv("DP_SYMPTOMS_CONFIG", str(config))
    monkeypatch.delenv("DP_LEDGER_URL", raising=False)
    delete_runs("symptoms_dataset")
    dag_run = dags["symptoms_dataset"].test(logical_date=logical_date(day))
    states = task_states(dag_run)
    assert dag_run.state == "failed"
    assert states["noise"] == ("failed", 1), states
    assert _spends(root) == []
    delete_runs("symptoms_dataset")
