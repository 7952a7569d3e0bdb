"""``scripts/airflow_demo.py``'s settings (issue 16): both DAGs backfilled at once by
default, with enough executor slots for both, and the DAG files re-parsed every 5 min."""

from __future__ import annotations

from pathlib import Path

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
