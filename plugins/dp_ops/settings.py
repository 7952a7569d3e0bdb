"""Runtime settings, all from the environment so that the DAGs, the CLI and the tests agree.

What and where: ``DP_DATA_ROOT`` (the data root, default ``./data``) and ``DP_LEDGER_URL``
(the ledger's SQLAlchemy URL, default a SQLite file under the data root). The reports'
configurations are read by their own ``config`` modules (``DP_MOBILITY_CONFIG``,
``DP_SYMPTOMS_CONFIG``) with :func:`json_object`.

How (:class:`ExecutionSettings`): how the pipeline executes, as opposed to what it
computes: the engine that runs the bounding SQL, how many user shards the bounding is
split into, engine resources, and which levels of regions get a chart in each release.

None of these settings changes a published value or the privacy guarantee: sharded and
unsharded bounding, and DuckDB and Spark, give identical true aggregates for the same
input and bounding salt (tested); ``chart_levels`` only leaves charts out of the release
page (a release drawn with other levels is another release: its files differ). They
come from the environment, or from the JSON file named by ``DP_EXECUTION_CONFIG`` (same
field names, lower case), the environment winning; they are read once, when a report is
bound (:class:`dp_ops.reports.registry.BoundReport`), and every step of it sees that one
reading (:func:`execution_settings`):

==========================  =============================================================
``DP_ENGINE``               ``duckdb`` (default, embedded) or ``spark``
``DP_BOUNDING_SHARDS``      user shards of the bounding step (default 1); in Airflow each
                            shard is one mapped ``bound_contributions`` task instance
``DP_DUCKDB_MEMORY_LIMIT``  DuckDB's memory limit per bounding task (default ``1GB``);
                            beyond it DuckDB spills to ``work/tmp`` under the data root
``DP_DUCKDB_THREADS``       DuckDB threads per task (default: DuckDB's, one per core)
``DP_DUCKDB_ROWS_PER_PART`` a day with more input rows is bounded by DuckDB in user parts
                            of about this many rows, one after the other (default
                            8,000,000; each part re-reads the day's file, so smaller
                            parts cost time), which keeps memory flat
``DP_SPARK_MASTER``         Spark master URL for ``spark`` (default ``local[2]``)
``DP_SPARK_CONN_ID``        the Airflow connection (type ``spark_connect``, from the Apache
                            Spark provider) whose Spark Connect URL a task uses (default
                            ``spark_connect_default``); in a task it wins over
                            ``DP_SPARK_REMOTE``. Missing, the default name falls back to
                            ``DP_SPARK_REMOTE``; a name set here must exist
``DP_SPARK_REMOTE``         Spark Connect URL (``sc://host:15002``), the fallback (and the
                            CLI's way); a Connect URL wins over the master
``DP_SPARK_CONNECT_TIMEOUT`` seconds a task waits for the Spark Connect server to
                            accept a connection before it fails naming the URL (its
                            token masked); default 30
``DP_CHART_LEVELS``         region levels charted in each release, e.g. ``0,1`` (default:
                            every level of the report; ``none`` for no charts). Charts are
                            drawn at every gate step, so a geography of thousands of
                            sub-regions may chart only its upper levels
``DP_DOCS_INDEX_SECONDS``  the gate rebuilds the GX Data Docs site index when it
                            fails, when there is none, or when it is at least this old
                            (default 120; 0: every gate). Each run's own validation pages
                            are always written. The index re-reads every stored result,
                            which a backfill's gates would pay one after the other
==========================  =============================================================
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from dp_ops.errors import ConfigError
from dp_ops.layout import DataRoot, ledger_url


def data_root() -> DataRoot:
    return DataRoot.from_env()


def ledger(root: DataRoot | None = None) -> str:
    return ledger_url(root or data_root())


def json_object(variable: str, environ: Mapping[str, str] | None = None
                ) -> dict[str, Any] | None:
    """The JSON object in the file named by environment ``variable``, or ``None`` if unset."""
    path = (os.environ if environ is None else environ).get(variable)
    if not path:
        return None
    try:
        values = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{variable}={path!r}: cannot read JSON: {exc}") from exc
    if not isinstance(values, dict):
        raise ConfigError(f"{variable}={path!r}: expected a JSON object")
    return values


ENGINES = ("duckdb", "spark")
DEFAULT_SPARK_CONN_ID = "spark_connect_default"
MAX_SHARDS = 4096


@dataclass(frozen=True)
class ExecutionSettings:
    engine: str = "duckdb"
    bounding_shards: int = 1
    duckdb_memory_limit: str = "1GB"
    duckdb_threads: int | None = None
    duckdb_rows_per_part: int = 8_000_000
    spark_master: str = "local[2]"
    spark_remote: str | None = None
    spark_conn_id: str = DEFAULT_SPARK_CONN_ID
    spark_connect_timeout: int = 30
    chart_levels: tuple[int, ...] | None = None
    docs_index_seconds: int = 120

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"execution setting engine={self.engine!r}: expected one of "
                              f"{', '.join(ENGINES)}")
        if not (isinstance(self.bounding_shards, int) and 1 <= self.bounding_shards
                <= MAX_SHARDS):
            raise ConfigError(f"execution setting bounding_shards={self.bounding_shards!r}: "
                              f"expected an integer in [1, {MAX_SHARDS}]")
        if not (isinstance(self.duckdb_rows_per_part, int) and self.duckdb_rows_per_part >= 1):
            raise ConfigError("execution setting duckdb_rows_per_part="
                              f"{self.duckdb_rows_per_part!r}: expected an integer >= 1")
        if self.chart_levels is not None and not (
                isinstance(self.chart_levels, tuple)
                and all(isinstance(v, int) and v >= 0 for v in self.chart_levels)):
            raise ConfigError(f"execution setting chart_levels={self.chart_levels!r}: "
                              "expected region levels (integers >= 0)")
        if not (isinstance(self.docs_index_seconds, int)
                and self.docs_index_seconds >= 0):
            raise ConfigError("execution setting docs_index_seconds="
                              f"{self.docs_index_seconds!r}: expected an integer >= 0")
        if not (isinstance(self.spark_connect_timeout, int)
                and self.spark_connect_timeout >= 1):
            raise ConfigError("execution setting spark_connect_timeout="
                              f"{self.spark_connect_timeout!r}: expected an integer "
                              ">= 1")
        if self.duckdb_threads is not None and not (
                isinstance(self.duckdb_threads, int) and self.duckdb_threads >= 1):
            raise ConfigError(f"execution setting duckdb_threads={self.duckdb_threads!r}: "
                              "expected an integer >= 1")


_INT_FIELDS = {"bounding_shards", "duckdb_threads", "duckdb_rows_per_part",
               "docs_index_seconds", "spark_connect_timeout"}


# The settings of the report being run: bound once where the report is bound
# (:class:`dp_ops.reports.registry.BoundReport`), read by the steps deep down.
_BOUND: ContextVar[ExecutionSettings | None] = ContextVar("dp_ops_execution_settings",
                                                          default=None)


@contextmanager
def execution_settings_bound(bound: ExecutionSettings) -> Iterator[None]:
    """Make ``bound`` the settings :func:`execution_settings` returns while the block runs
    (in this thread or task; restored after)."""
    token = _BOUND.set(bound)
    try:
        yield
    finally:
        _BOUND.reset(token)


def execution_settings() -> ExecutionSettings:
    """The execution settings of the run: those bound with its report (read once, when it
    was bound), else, for a step called on its own (a test, a benchmark), read from the
    environment now."""
    bound = _BOUND.get()
    return bound if bound is not None else load_execution_settings()


def load_execution_settings(environ: Mapping[str, str] | None = None) -> ExecutionSettings:
    """Defaults, then ``DP_EXECUTION_CONFIG``'s JSON object, then ``DP_<FIELD>`` variables."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    loaded = json_object("DP_EXECUTION_CONFIG", env)
    if loaded is not None:
        known = {f.name for f in fields(ExecutionSettings)}
        for key in loaded:
            if key not in known:
                raise ConfigError(f"DP_EXECUTION_CONFIG={env['DP_EXECUTION_CONFIG']!r}: "
                                  f"unknown field {key!r}")
        values.update(loaded)
        if isinstance(values.get("chart_levels"), list):
            values["chart_levels"] = tuple(values["chart_levels"])
    for f in fields(ExecutionSettings):
        raw = env.get(f"DP_{f.name.upper()}")
        if raw is None or raw == "":
            continue
        if f.name == "chart_levels":
            values[f.name] = _levels(raw)
        elif f.name in _INT_FIELDS:
            try:
                values[f.name] = int(raw)
            except ValueError as exc:
                raise ConfigError(f"DP_{f.name.upper()}={raw!r}: expected an integer") from exc
        else:
            values[f.name] = raw
    return ExecutionSettings(**values)


def _levels(raw: str) -> tuple[int, ...]:
    """``"0,1"`` -> (0, 1); ``"none"`` -> ()."""
    if raw.strip().lower() == "none":
        return ()
    try:
        return tuple(sorted({int(part) for part in raw.split(",") if part.strip()}))
    except ValueError as exc:
        raise ConfigError(f"DP_CHART_LEVELS={raw!r}: expected levels like 0,1 or none") from exc


# How a task finds the Spark Connect URL of an Airflow connection: registered by the
# Airflow adapters (dp_ops.airflow.runtime), so that this package's core knows no Airflow.
# Called with the connection id; returns None when there is no such connection (or no
# task is running).
_SPARK_REMOTE_PROVIDER: ContextVar[Callable[[str], str | None] | None] = ContextVar(
    "dp_ops_spark_remote_provider", default=None)


def use_spark_remote_provider(provider: Callable[[str], str | None] | None) -> None:
    """Look Spark Connect URLs up with ``provider`` (connection id -> URL or None)."""
    _SPARK_REMOTE_PROVIDER.set(provider)


def spark_remote_url(settings: ExecutionSettings) -> str | None:
    """The Spark Connect URL the Spark engine uses, if any: the Airflow connection
    ``spark_conn_id`` when a task runs and it exists, else ``DP_SPARK_REMOTE``. A
    connection named explicitly (not the default name) that does not exist is a
    :class:`ConfigError`: the work would otherwise silently run elsewhere."""
    provider = _SPARK_REMOTE_PROVIDER.get()
    if provider is not None:
        url = provider(settings.spark_conn_id)
        if url:
            return url
        if settings.spark_conn_id != DEFAULT_SPARK_CONN_ID:
            raise ConfigError(f"DP_SPARK_CONN_ID={settings.spark_conn_id!r}: no such Airflow "
                              "connection (create it with type spark_connect, or unset "
                              "DP_SPARK_CONN_ID to use DP_SPARK_REMOTE)")
    return settings.spark_remote or None
