"""``scripts/airflow_demo.py``'s settings (issue 16): both DAGs backfilled at once by
default, with enough executor slots for both, the DAG files re-parsed every 5 min, the
supervisors' heartbeats at Airflow's default, the scheduler's idle sleep by how many DAGs
run at once, and the input generated beside Airflow's start-up."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pipeline_helpers import load_airflow_demo


def _env(argv: list[str], tmp_path: Path) -> dict[str, str]:
    demo = load_airflow_demo()
    args = demo.parse_args(argv)
    return dict(demo.airflow_env(args, tmp_path, tmp_path / "data", 8080, 8793))


def test_both_dags_at_once_by_default(tmp_path: Path) -> None:
    demo = load_airflow_demo()
    args = demo.parse_args([])
    assert args.together and args.dag_ids == ["mobility_report", "symptoms_dataset"]
    # twice --max-active-runs (4) executor slots per DAG backfilled at the same time
    assert _env([], tmp_path)["AIRFLOW__CORE__PARALLELISM"] == "16"
    assert _env(["--no-together"], tmp_path)["AIRFLOW__CORE__PARALLELISM"] == "8"
    assert _env(["--dag-id", "symptoms_dataset"], tmp_path)["AIRFLOW__CORE__PARALLELISM"] == "8"


def test_the_dag_files_are_not_reparsed_every_30_s(tmp_path: Path) -> None:
    env = _env([], tmp_path)
    assert env["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] == "300"


def test_supervisors_heartbeat_at_the_default_interval(tmp_path: Path) -> None:
    # a longer interval keeps each finished task's supervisor (and executor slot) busy
    # for up to that long (scripts/airflow_demo.py)
    assert "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL" not in _env([], tmp_path)


def test_the_scheduler_idle_sleep_follows_how_many_dags_run_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one DAG: each task of a run's chain waited up to Airflow's default 1 s to be
    # scheduled while the cores idled; both at once: the cores are busy, Airflow's 1 s
    monkeypatch.delenv("AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME", raising=False)
    sleep = "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"
    assert _env([], tmp_path)[sleep] == "1"
    assert _env(["--dag-id", "mobility_report"], tmp_path)[sleep] == "0.2"
    assert _env(["--no-together"], tmp_path)[sleep] == "0.2"
    monkeypatch.setenv(sleep, "0.5")
    assert _env([], tmp_path)[sleep] == "0.5"
    assert _env(["--dag-id", "mobility_report"], tmp_path)[sleep] == "0.5"


def test_generating_the_input_beside_the_start_up(tmp_path: Path) -> None:
    demo = load_airflow_demo()
    assert demo.parse_args([]).generate_users is None
    args = demo.parse_args(["--start", "2020-01-01", "--end", "2020-01-02",
                            "--generate-users", "50"])
    generator = demo.Generator(args, tmp_path / "data")
    generator.wait()  # nothing started: nothing to wait for
    with pytest.raises(SystemExit):
        demo.parse_args(["--generate-users", "0"])
    # a generator that fails stops the demo with its exit code, before the scheduler
    generator.proc = subprocess.Popen(["false"])
    with pytest.raises(demo.DemoError, match="generating the input failed"):
        generator.wait()
    # one that succeeds but leaves no input is caught by the input check
    generator.proc = subprocess.Popen(["true"])
    with pytest.raises(demo.DemoError, match="no synthetic input"):
        generator.wait()

