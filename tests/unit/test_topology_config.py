"""The topology runner (scripts/topology.py) starts exactly docker-compose.yaml's stack.

Nothing is started here: these check that every process it would start gets the compose
file's environment for its service, moved to loopback and to a local /opt/airflow, plus
only the documented local settings; the integration test runs the stack itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.pipeline_helpers import load_script

topo = load_script("topology")
PORTS = topo.Ports(postgres=15432, redis=16379, api=18080, worker_logs=18793,
                   triggerer_logs=18794, scheduler_health=18974)
PROCESS = {"PATH", "HOME", "PYTHONUNBUFFERED"}  # the caller's venv, the local home


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return topo.load_compose(topo.env_values())


@pytest.mark.parametrize("service", [*topo.AIRFLOW_SERVICES, "airflow-init"])
def test_every_process_gets_its_services_environment(compose: dict[str, Any],
                                                     service: str, tmp_path: Path) -> None:
    declared = compose["services"][service]["environment"]
    env = topo.service_env(compose, service, tmp_path, PORTS)
    assert set(env) == set(declared) | set(topo.LOCAL) | PROCESS
    for key, value in declared.items():
        assert env[key] == topo.relocate(str(value), tmp_path, PORTS), key
    local = topo.local_settings(tmp_path, PORTS)
    assert not set(local) & set(declared), "a local setting overrides the compose file"
    for key in local:
        assert env[key] == local[key]


def test_relocation_moves_hosts_and_paths_only(compose: dict[str, Any], tmp_path: Path) -> None:
    env = topo.service_env(compose, "airflow-scheduler", tmp_path, PORTS)
    text = "\n".join(env.values())
    for container_only in ("/opt/airflow", "@postgres", "@redis:", "airflow-apiserver:"):
        assert container_only not in text
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith(
        "postgresql+psycopg2://airflow:") and "@127.0.0.1:15432/airflow" in env[
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://:@127.0.0.1:16379/0"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18080/execution/"
    assert env["DP_LEDGER_URL"].startswith("postgresql+psycopg://dp_ledger:")
    assert env["AIRFLOW_CONN_DP_LEDGER"].endswith("@127.0.0.1:15432/dp_ledger")
    assert env["DP_DATA_ROOT"] == f"{tmp_path}/data"


def test_the_local_home_mirrors_the_mounts(compose: dict[str, Any], tmp_path: Path) -> None:
    home = tmp_path / "opt-airflow"
    topo.link_volumes(compose, home)
    repo = Path(topo.REPO)
    assert (home / "dags").resolve() == repo / "dags"
    assert not (home / "include").exists()  # the SQL is package data, not a mount
    assert (home / "dp_config").resolve() == repo / "docker" / "config"
    assert (home / "auth").is_dir() and not (home / "auth").is_symlink()  # named volume


def test_secrets_are_fresh_and_placeholders_gone() -> None:
    a, b = topo.env_values(), topo.env_values()
    secrets = [k for k, v in topo.read_env_file(topo.ENV_EXAMPLE).items()
               if v.startswith(topo.PLACEHOLDER)]
    assert secrets and all(a[k] != b[k] and topo.PLACEHOLDER not in a[k] for k in secrets)
