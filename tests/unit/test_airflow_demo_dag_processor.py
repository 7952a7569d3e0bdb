"""``scripts/airflow_demo.py`` stops the dag-processor for the backfill (issue 49, the
per-run cost): the DAGs are serialized before the backfills are created, the runs do not
need it, and once started again it re-parsed every DAG file, CPU the backfill could use.
With ``--keep-running`` (the deployment stays up) it starts again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.pipeline_helpers import load_airflow_demo


@pytest.mark.parametrize("keep_running", [False, True])
def test_the_dag_processor_runs_again_only_with_keep_running(tmp_path: Path,
                                                             keep_running: bool) -> None:
    demo = load_airflow_demo()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "airflow"  # an `airflow` that runs until stopped
    stand_in.write_text("#!/bin/sh\nexec sleep 60\n")
    stand_in.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    services = demo.Services(env=env, log_dir=tmp_path)
    services.start("dag-processor", "dag-processor")
    first = services.procs["dag-processor"]
    try:
        with demo.dag_processor_stopped(services, restart=keep_running):
            assert "dag-processor" not in services.procs
            assert first.poll() is not None  # stopped while the backfills are created
        assert ("dag-processor" in services.procs) is keep_running
        if keep_running:
            assert services.procs["dag-processor"].poll() is None
    finally:
        services.stop()
