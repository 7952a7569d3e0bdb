"""``scripts/airflow_demo.py``'s settings (issue 16): both DAGs backfilled at once by
default, with enough executor slots for both, the DAG files re-parsed every 5 min, the
supervisors' heartbeats at Airflow's default, the scheduler's idle sleep at 0.2 s, and the
input generated beside Airflow's start-up."""

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


def test_the_scheduler_loops_again_after_0_2_s_idle(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # each task of a run's chain waited up to Airflow's default 1 s to be scheduled
    monkeypatch.delenv("AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME", raising=False)
    assert _env([], tmp_path)["AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"] == "0.2"
    monkeypatch.setenv("AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME", "1")
    assert _env([], tmp_path)["AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"] == "1"


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


def test_duckdb_runs_one_thread_per_task(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # several tasks per core at once: DuckDB's own threads only cost CPU there
    monkeypatch.delenv("DP_DUCKDB_THREADS", raising=False)
    assert _env([], tmp_path)["DP_DUCKDB_THREADS"] == "1"
    monkeypatch.setenv("DP_DUCKDB_THREADS", "2")
    assert _env([], tmp_path)["DP_DUCKDB_THREADS"] == "2"
