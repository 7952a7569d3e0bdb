"""Airflow local settings of this project's deployments: pre-import the pipeline's heavy
libraries in the process that task processes are forked from.

Airflow imports this module (``$AIRFLOW_HOME/config/airflow_local_settings.py``) in every
one of its processes. A task process is forked, without exec, from the Celery worker's
pool processes (CeleryExecutor: ``docker-compose.yaml``, ``scripts/topology.py``) or from
the scheduler (LocalExecutor: ``make demo``), so importing pandas, pyarrow, DuckDB,
matplotlib, Great Expectations and dp_ops there once saves every task those imports
(Great Expectations' the slowest; DuckDB and its engine not when ``DP_ENGINE=spark``);
it also builds the noise samplers' tables, compiles the SQL templates, computes what every
ledger check compares with, reads the public region table and runs one throwaway
validation, whose set-up the gate tasks then skip, and makes the task supervisors there
notice their task's exit at once (``dp_ops.airflow.supervisor``). Other processes import
nothing more.

Mounted at /opt/airflow/config by docker-compose.yaml; ``scripts/airflow_demo.py`` links
it into its Airflow home.
"""

import os
import sys
from collections.abc import Callable

_FORKS_TASKS = (["scheduler"], ["celery", "worker"])

if any(sys.argv[1:1 + len(cmd)] == cmd for cmd in _FORKS_TASKS):
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    # With DP_ENGINE=spark the work on private rows runs on Spark: the task processes need
    # no DuckDB engine, so none is loaded into them here.
    _SPARK = os.environ.get("DP_ENGINE", "").strip().lower() == "spark"
    if not _SPARK:
        import duckdb  # noqa: F401
    import great_expectations  # noqa: F401
    import matplotlib.backends.backend_agg  # noqa: F401  (release charts)
    import matplotlib.figure  # noqa: F401
    import pandas  # noqa: F401
    import PIL.Image  # noqa: F401
    import pyarrow.compute  # noqa: F401
    import pyarrow.dataset  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    def _warm_dp_ops() -> None:
        """Every module of dp_ops, the operators the DAG files use among them, so that a
        task process does not import them itself (the DAG file's operators, the report's
        step modules and what they import lazily)."""
        import importlib
        import pkgutil

        import dp_ops

        for module in pkgutil.walk_packages(dp_ops.__path__, "dp_ops."):
            if module.name.endswith("__main__") or ".migrations" in module.name:
                continue  # the CLI entry point; Alembic's env (run by Alembic only)
            if _SPARK and module.name == "dp_ops.engine.duckdb":
                continue
            importlib.import_module(module.name)

    _warm_dp_ops()

    # What Airflow's task runner imports in every task process after the fork (the DAG
    # bundle, the execution timeout, the standard provider's EmptyOperator); a module
    # another Airflow version lacks is left to the tasks
    import importlib

    for _module in ("airflow.dag_processing.bundles.local", "airflow.sdk.execution_time.cache",
                    "airflow.sdk.execution_time.timeout",
                    "airflow.providers.standard.operators.empty"):
        try:
            importlib.import_module(_module)
        except ImportError:
            pass

    def _warm(prepare: Callable[[], object], what: str, otherwise: str) -> None:
        """Run ``prepare`` once here. On any error (a config that does not load, say) the
        process starts all the same and each task does it itself (``otherwise``) and
        reports the problem with its parameter; nothing about data is read here."""
        try:
            prepare()
        except Exception as exc:  # noqa: BLE001  (the scheduler must start regardless)
            print(f"dp_ops: {what} not prepared at start ({type(exc).__name__}); "
                  f"{otherwise}", file=sys.stderr)

    from dp_ops.engine.sql import prepare_templates
    from dp_ops.gx.runner import warm_up
    from dp_ops.privacy.ledger_migrations import prepare_checks
    from dp_ops.regions import read_regions
    from dp_ops.reports.registry import prepare_noise_samplers
    from dp_ops.settings import data_root
    from dp_ops.sources.spec import source_specs

    def _read_region_table() -> None:
        """The data root's public region table, validated (every task reads it; a task
        reads it again when the file changed since: :func:`read_regions`)."""
        path = data_root().regions_csv
        if path.is_file():
            read_regions(path)

    # The exact noise sampler's tables for the configured epsilons (each noise task would
    # build them otherwise).
    _warm(prepare_noise_samplers, "noise samplers", "each noise task builds its own")
    # The ledger's newest migration and the schema it must have (every task that opens or
    # verifies the ledger compares with them)
    _warm(prepare_checks, "ledger checks", "each task that opens the ledger builds them")
    # The installed sources, found through their entry points (each ingest task would
    # scan every distribution's metadata for them otherwise)
    _warm(source_specs, "sources", "each ingest task finds them itself")
    # The SQL templates the engines render, compiled
    _warm(prepare_templates, "SQL templates", "each task compiles the ones it runs")
    # The public region table (no private data)
    _warm(_read_region_table, "region table", "each task reads and validates it")
    # One throwaway Great Expectations validation of a made-up two-row frame in a
    # temporary project: a forked gate task then skips GX's first-validation set-up.
    _warm(warm_up, "release gate", "each gate task sets Great Expectations up itself")

    # The task supervisors run here: each notices its task's exit as soon as the task has
    # closed its sockets, instead of after a heartbeat interval (dp_ops.airflow.supervisor)
    from dp_ops.airflow.supervisor import install as _install_supervisor_wait

    _warm(_install_supervisor_wait, "supervisor exit check",
          "a supervisor may notice its task's exit a heartbeat interval late")
