"""The package installs like any other (issue: a report is a plug-in, an Airflow
provider): a wheel built from the repository, installed into a fresh virtual environment,
runs ``dp-ops run mobility`` on demo data from a directory outside the checkout, with no
``DP_SQL_DIR`` and nothing of the checkout on its import path. Its SQL, schemas and
report specs come from the wheel itself (package data and entry points)."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest
from support.pipeline_helpers import load_script

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def run(cmd: list[str], *, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"{cmd}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_a_wheel_in_a_fresh_venv_runs_a_report_without_the_checkout(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DP_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # the build: pip's isolated build, as a user's `pip wheel .` does, of a copy of the
    # tracked files (setuptools writes build/ and an egg-info beside the sources)
    source = tmp_path / "source"
    load_script("critical_mutants").copy_repository(source)  # symlinks kept
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
         str(source)], cwd=outside, env=env)
    (wheel,) = (tmp_path / "dist").glob("dp_report_factory-*.whl")
    # a fresh venv; the pinned dependencies are those of the project's venv, reached by a
    # .pth line (a line adds a path, it runs none of that path's .pth files: the checkout's
    # editable install of dp_ops stays invisible)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=outside, env=env)
    python = venv / "bin" / "python"
    (purelib,) = [Path(p) for p in json.loads(run(
        [str(python), "-c", "import json, site; print(json.dumps(site.getsitepackages()))"],
        cwd=outside, env=env))]
    (purelib / "project_dependencies.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         str(wheel)], cwd=outside, env=env)

    where = run([str(python), "-c", "import dp_ops, dp_ops.engine.sql as s; "
                 "print(dp_ops.__file__); print(s.sql_dir())"], cwd=outside, env=env)
    package, sql = where.split()
    assert Path(package).is_relative_to(venv) and Path(sql).is_relative_to(venv), where
    assert not Path(sql).is_symlink() and len(list(Path(sql).rglob("*.sql"))) >= 8

    data = tmp_path / "data"
    env.update(DP_DATA_ROOT=str(data), DP_LEDGER_KEY="ab" * 32, GX_ANALYTICS_ENABLED="false")
    dp_ops = str(venv / "bin" / "dp-ops")
    run([dp_ops, "generate", "--start", "2020-01-03", "--end", "2020-01-04", "--users", "3000"],
        cwd=outside, env=env)
    out = run([dp_ops, "run", "mobility", "--start", "2020-01-03", "--end", "2020-01-04"],
              cwd=outside, env=env)
    assert "2020-01-04" in out
    # the report ran: budget recorded, noise stored privately, from the wheel's code
    ledger = run([dp_ops, "ledger"], cwd=outside, env=env)
    assert "mobility" in ledger and "2020-01-03..2020-01-04" in ledger
    noise = data / "noise" / "mobility" / "date=2020-01-04"
    files = [p for p in noise.rglob("*") if p.is_file()]
    assert files and all(p.stat().st_mode & 0o777 == 0o600 for p in files)
    assert (data / "noise" / "mobility").stat().st_mode & 0o777 == 0o700
