"""The package is an Airflow provider: its provider info passes Airflow's own schema, and
Airflow's ProvidersManager finds it, with the ledger's connection type and hook and the
alert notifier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from dp_ops.airflow.provider import PACKAGE_NAME, get_provider_info


def test_the_provider_info_follows_airflows_schema() -> None:
    import airflow

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json")
                        .read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == PACKAGE_NAME
    (conn,) = info["connection-types"]
    assert conn["connection-type"] == "dp_ledger"
    assert conn["hook-class-name"] == "dp_ops.airflow.hooks.ledger.LedgerHook"


@pytest.mark.slow
def test_airflow_lists_the_provider_with_its_connection_type(tmp_path: Path) -> None:
    """``airflow providers list`` and ``airflow providers hooks`` (a fresh process, a
    throwaway AIRFLOW_HOME) show the package and its ledger hook."""
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "false"}
    airflow = str(Path(sys.executable).with_name("airflow"))
    listed = subprocess.run([airflow, "providers", "list", "--output", "json"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    providers = {p["package_name"]: p for p in json.loads(listed.stdout)}
    assert providers[PACKAGE_NAME]["version"] == "0.1.0"
    hooks = subprocess.run([airflow, "providers", "hooks", "--output", "json"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert hooks.returncode == 0, hooks.stderr[-2000:]
    (ours,) = [h for h in json.loads(hooks.stdout) if h["connection_type"] == "dp_ledger"]
    assert ours["class"] == "dp_ops.airflow.hooks.ledger.LedgerHook"
    assert ours["package_name"] == PACKAGE_NAME
