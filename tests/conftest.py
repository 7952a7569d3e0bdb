"""Shared test fixtures.

Airflow reads ``AIRFLOW_HOME`` and its ``AIRFLOW__*`` settings once, when ``airflow`` is
first imported, so the isolated Airflow home is set up here at import time, before any
test module can import Airflow: no test ever touches a developer's own Airflow home or
metadata DB. The metadata DB itself is only migrated (a few seconds) by the
``airflow_db`` fixture, for the tests that run DAGs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cached_roots import GeneratedRoots
from support.cached_roots import generated_roots as _generated_roots
from support.worker_groups import (
    GROUP_DIR,
    WORKER_INPUT,
    FileGroupScheduling,
    group_dir,
    write_groups,
)

from dp_ops.release_signing import generate_key_file as _generate_release_key

REPO = Path(__file__).resolve().parents[1]

_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="dp_ops_airflow_home_"))
(_AIRFLOW_HOME / "plugins").mkdir()
os.environ.update({
    "AIRFLOW_HOME": str(_AIRFLOW_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
    # An empty folder, not <repo>/plugins: Airflow's plugin manager exec()s every .py
    # file under its plugins folder as a top-level module (dp_ops/__main__.py would run
    # the CLI). dp_ops is no Airflow plugin; it is installed in the venv (make venv:
    # pip install -e .), so this process and its children import it from there.
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(_AIRFLOW_HOME / "plugins"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}",
    "GX_ANALYTICS_ENABLED": "false",
    # No run deadline on the daily DAGs parsed in this process: Airflow 3.3.2's dag.test()
    # fails on a DAG with a deadline (dp_ops.airflow.defaults.run_deadline). The DAGs carry
    # it wherever this is unset: the scheduler tests (test_airflow_operations,
    # test_topology) start their Airflow without it.
    "DP_RUN_DEADLINE_HOURS": "0",
    # The ledger key (dp_ops.privacy.ledger_key): one per test session, outside every data
    # root, made by the first ledger created; subprocesses (Airflow, workers) inherit it.
    "DP_LEDGER_KEY_FILE": str(_AIRFLOW_HOME / "ledger.key"),
    # The release-signing key (dp_ops.release_signing): one per test session, beside the
    # ledger key; every publish signs with it. tests/support/release_keys.py reads it.
    "DP_RELEASE_SIGNING_KEY_FILE": str(_AIRFLOW_HOME / "release_signing.key"),
})
for _name in ("DP_LEDGER_KEY", "DP_RELEASE_SIGNING_KEY", "DP_RELEASE_UNSIGNED",
              "DP_RELEASE_SIGNER"):
    os.environ.pop(_name, None)
_generate_release_key(_AIRFLOW_HOME / "release_signing.key")


# The pytest process's SIGTERM handler when the session starts (normally the default).
_SIGTERM_AT_START = signal.getsignal(signal.SIGTERM)


@pytest.fixture(autouse=True)
def _no_airflow_sigterm_handler_left() -> Iterator[None]:
    """Remove the SIGTERM handler that ``dag.test()`` leaves behind.

    ``dag.test()`` runs tasks in this process through Airflow's task runner, which
    installs a SIGTERM handler and never removes it. In a forked child that handler does
    nothing, so a later test's ``multiprocessing`` pool can no longer terminate its workers
    (``Pool.__exit__`` waited forever in
    ``tests/unit/reports/mobility/test_mobility_suites.py`` after the e2e tests), and in
    this process it swallows SIGTERM (a CI timeout could not stop pytest).
    """
    yield
    if (getattr(signal.getsignal(signal.SIGTERM), "__module__", None) or "").startswith(
            "airflow."):
        signal.signal(signal.SIGTERM, _SIGTERM_AT_START)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep a slow module on one worker under ``pytest -n N --dist loadgroup``.

    Fast tests are handed out one by one; every test of a module that has a slow test or
    uses a module-scoped fixture gets the module as its ``xdist_group`` (unless it names a
    group of its own, as the modules sharing ``previous`` do), so that its module-scoped
    fixtures (data roots, Airflow deployments, Spark servers) are built once, on one
    worker; the tests using the engine tests' session ``spark`` share the group "spark"
    (one JVM). A worker writes the groups for the controller's scheduler
    (support/worker_groups.py)."""
    slow_modules = {item.nodeid.split("::", 1)[0] for item in items
                    if item.get_closest_marker("slow") or _module_scoped_fixtures(item)}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if item.get_closest_marker("xdist_group") is not None:
            continue
        if "spark" in getattr(item, "fixturenames", ()):
            # the engine tests' session SparkSession: one JVM, on one worker
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif module in slow_modules:
            item.add_marker(pytest.mark.xdist_group(module))
    write_groups(config, items)


def _module_scoped_fixtures(item: pytest.Item) -> bool:
    """Whether ``item`` uses a module-scoped fixture: its module then runs on one worker,
    which builds the fixture once (handed out one by one, both workers would build it)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Give each xdist worker the directory it writes its tests' groups to."""
    node.workerinput[WORKER_INPUT] = str(group_dir(node.config))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the groups the workers wrote (support/worker_groups.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return FileGroupScheduling(config, log, group_dir(config))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``DP_TEST_TIMELINE=FILE``: one JSON line per test phase (worker, test id,
    phase, start and stop), for ``benchmarks/test_timeline.py`` to show where a run's
    workers spent their time. Test ids and times only."""
    path = os.environ.get("DP_TEST_TIMELINE")
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return  # under xdist, the controller writes every worker's reports
    import json

    node = getattr(report, "node", None)
    worker = getattr(getattr(node, "gateway", None), "id", "main")
    with open(path, "a") as out:
        out.write(json.dumps({"worker": worker, "test": report.nodeid, "phase": report.when,
                              "start": getattr(report, "start", None),
                              "stop": getattr(report, "stop", None)}) + "\n")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)
    if GROUP_DIR in config.stash:
        shutil.rmtree(config.stash[GROUP_DIR], ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """The session's isolated ``AIRFLOW_HOME`` (DB not necessarily migrated)."""
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def airflow_db(airflow_home: Path) -> Path:
    """A migrated SQLite metadata DB in the isolated Airflow home (``dag.test()`` and
    ``airflow dags test`` need one). Migrated once per session, in a subprocess so that
    this process's Airflow settings stay untouched."""
    res = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"],
                         capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        pytest.fail(f"airflow db migrate failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return airflow_home / "airflow.db"


@pytest.fixture(scope="session")
def generated_roots(pytestconfig: pytest.Config,
                    tmp_path_factory: pytest.TempPathFactory) -> GeneratedRoots:
    """The demo generator's input per (users, seed, start, end), generated once for all
    workers and copied to each caller (``generated_roots.copy(dst, users=..., ...)``)."""
    return _generated_roots(pytestconfig, tmp_path_factory)


@pytest.fixture
def dp_data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty data root in ``DP_DATA_ROOT`` with the default ledger under it (any
    ``DP_LEDGER_URL`` or ``DP_MOBILITY_CONFIG`` of the developer's shell is removed)."""
    root = tmp_path / "data"
    root.mkdir()
    monkeypatch.setenv("DP_DATA_ROOT", str(root))
    monkeypatch.delenv("DP_LEDGER_URL", raising=False)
    monkeypatch.delenv("DP_MOBILITY_CONFIG", raising=False)
    yield root
