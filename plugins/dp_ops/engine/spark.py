"""Run the ingest and bounding SQL of ``include/sql/`` on Apache Spark instead of DuckDB.

Selected with ``DP_ENGINE=spark`` (see :mod:`dp_ops.settings`). The SQL is DuckDB's: the
judging and per-user queries are written in the subset both engines share (a Jinja
``dialect`` switch where spellings differ), and a report may give Spark a faster
formulation of its cell sums (``BoundingSql``; mobility's ``mobility/cell_sums_spark.sql``)
held equal to its per-user query. DuckDB's ``$name`` bind parameters become Spark's
``:name`` (values still go in as parameters, never into the string). The pseudo-random
keys are ``md5`` strings, which both engines compute alike, so Spark judges and bounds
every row and user exactly as DuckDB does (``tests/integration/test_spark_engine.py``,
the bad-input corpus on both engines). Ingest on Spark: :mod:`dp_ops.engine.spark_ingest`.

Where Spark runs
----------------
* Local (default): ``DP_SPARK_MASTER=local[2]`` starts Spark inside the task's process (a
  JVM, Java 17+, slow to start). Nothing else is needed.
* A cluster, driver in the Airflow worker (client mode): ``DP_SPARK_MASTER`` set to the
  cluster's master (``spark://host:7077``, ``yarn``, ``k8s://https://host:443``), with
  ``SPARK_CONF_DIR``/``spark-defaults.conf`` on the worker for memory, executors, etc.
* Spark Connect: in an Airflow task, the connection ``DP_SPARK_CONN_ID`` (type
  ``spark_connect``, default ``spark_connect_default``) when it exists, else
  ``DP_SPARK_REMOTE=sc://host:15002`` (:func:`dp_ops.settings.spark_remote_url`; either
  wins over the master). The Airflow workers only need the thin client
  (``pyspark[connect]``); the queries run on the server, and no worker reads a row.
* Under ``spark-submit`` or in any process that already has an active SparkSession, that
  session is used as it is (its master and configuration win).

With anything but a local master, the **data root must be on storage that the Airflow
workers, the Spark driver and every executor see under the same absolute path** (a shared
POSIX mount such as NFS): Spark reads the raw and clean rows and writes its results
through ``file:`` paths, and the worker then moves each result file into place with
``os.replace``.

Privacy: the rows read and the cell sums written are private. Nothing here logs, prints,
collects or shows rows or values (ingest brings back only the number of rows per
outcome); only paths and the query text can appear in errors.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from dp_ops.engine import spark_ingest
from dp_ops.engine.base import (
    BoundingSql,
    ColumnType,
    Judging,
    aggregate_sql,
    ancestors_table,
    shard_relation,
)
from dp_ops.engine.files import file_mode, make_dirs
from dp_ops.errors import SparkEngineError
from dp_ops.layout import DataRoot
from dp_ops.settings import ExecutionSettings, spark_remote_url

if TYPE_CHECKING:  # pyspark is imported only when the Spark engine is selected
    from pyspark.sql import SparkSession

ANCESTORS_VIEW = "ancestors"
CLEAN_VIEW = "clean_rows"
APP_NAME = "dp_ops-bounding"

# Local sessions only: a small shuffle for one day's data on a few cores, no UI port, and
# quiet logs. A cluster's (or Spark Connect server's) own configuration is left alone.
_LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.log.level": "WARN",
}
# Every session: runtime settings that keep results independent of the host.
_SESSION_CONF = {"spark.sql.session.timeZone": "UTC"}
# While a bounding query runs: its persisted stages are kept uncompressed. Each is read
# once or twice and dropped when the query ends, so compressing it costs more CPU than the
# memory it saves; a stage that does not fit in memory goes to Spark's local disk either
# way.
_QUERY_CONF = {"spark.sql.inMemoryColumnarStorage.compressed": "false"}

# A DuckDB bind parameter outside quoted literals, quoted identifiers and comments.
_MARKER = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/"""
                     r"|\$([A-Za-z_][A-Za-z0-9_]*)", re.DOTALL)


def spark_parameters(query: str, params: Mapping[str, object]) -> tuple[str, dict[str, object]]:
    """``query`` with DuckDB's ``$name`` markers as Spark's ``:name``, and the parameters
    it uses. Quoted literals are left alone; a marker without a value is an error."""
    used: set[str] = set()

    def swap(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return match.group(0)
        used.add(name)
        return ":" + name

    translated = _MARKER.sub(swap, query)
    missing = sorted(used - set(params))
    if missing:
        raise KeyError(f"SQL parameter(s) without a value: {', '.join(missing)}")
    return translated, {name: params[name] for name in sorted(used)}


def _skip_space(query: str, i: int) -> int:
    """The first position at or after ``i`` that is not whitespace or a comment."""
    while i < len(query):
        if query[i].isspace():
            i += 1
        elif query.startswith("--", i):
            end = query.find("\n", i)
            i = len(query) if end < 0 else end + 1
        elif query.startswith("/*", i):
            end = query.find("*/", i + 2)
            i = len(query) if end < 0 else end + 2
        else:
            return i
    return i


def _closing_paren(query: str, i: int) -> int:
    """The position of the parenthesis closing the one at ``i`` (quoted text and comments
    skipped)."""
    depth = 0
    while i < len(query):
        c = query[i]
        if c in "'\"":
            end = query.find(c, i + 1)
            while end >= 0 and query.startswith(c * 2, end):  # '' and "" are escapes
                end = query.find(c, end + 2)
            if end < 0:
                break
            i = end + 1
            continue
        if query.startswith("--", i) or query.startswith("/*", i):
            i = _skip_space(query, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise SparkEngineError("unbalanced parentheses in a bounding query")


_CTE_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s+AS\s*\(", re.IGNORECASE)
_WITH = re.compile(r"WITH\s", re.IGNORECASE)


def split_ctes(query: str) -> tuple[list[tuple[str, str]], str]:
    """``WITH a AS (...), b AS (...) <statement>`` as ``([("a", ...), ("b", ...)],
    statement)``; ``([], query)`` for a query without a leading ``WITH``."""
    i = _skip_space(query, 0)
    if not _WITH.match(query, i):
        return [], query
    i += 4
    parts: list[tuple[str, str]] = []
    while True:
        i = _skip_space(query, i)
        head = _CTE_NAME.match(query, i)
        if head is None:
            raise SparkEngineError(f"cannot read the WITH clause of a bounding query at "
                                   f"offset {i}")
        open_at = head.end() - 1
        close_at = _closing_paren(query, open_at)
        parts.append((head.group(1), query[open_at + 1:close_at]))
        i = _skip_space(query, close_at + 1)
        if i < len(query) and query[i] == ",":
            i += 1
            continue
        return parts, query[i:]


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def _require_java() -> None:
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise SparkEngineError("DP_ENGINE=spark with a local or cluster master needs Java 17+ "
                           "(java on PATH or JAVA_HOME); or set DP_SPARK_REMOTE to a Spark "
                           "Connect server")


def spark_session(settings: ExecutionSettings) -> SparkSession:
    """The process's SparkSession for ``settings``: an active session if there is one, else
    a Spark Connect session (:func:`dp_ops.settings.spark_remote_url`: the Airflow
    connection in a task, else ``DP_SPARK_REMOTE``), else a new one on ``spark_master``."""
    from pyspark.sql import SparkSession

    # py4j logs every connection at INFO, also from __del__ at interpreter exit, when the
    # log stream may already be closed ("--- Logging error ---" at the end of a test run)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(APP_NAME)
    remote = spark_remote_url(settings)
    if remote:
        require_reachable(remote, settings.spark_connect_timeout)
        builder = builder.remote(remote)
    else:
        _require_java()
        builder = builder.master(settings.spark_master)
        if _is_local(settings.spark_master):
            for key, value in _LOCAL_CONF.items():
                builder = builder.config(key, value)
    with warnings.catch_warnings():
        # pyspark imports its test helpers while starting, which warn about pandas 3; no
        # pandas object reaches Spark here (tables go in as Arrow), so it does not apply.
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                                category=FutureWarning)
        spark = builder.getOrCreate()
    for key, value in _SESSION_CONF.items():
        spark.conf.set(key, value)
    return spark


_SECRET_PARAMETER = re.compile(r"(;token=)[^;]*", re.IGNORECASE)
_USER_INFO = re.compile(r"^(sc://)[^/@]*@")


def masked_url(url: str) -> str:
    """The Spark Connect URL ``url`` fit for a message: its token (and any user info before
    the host) replaced by ``***``."""
    return _USER_INFO.sub(r"\1***@", _SECRET_PARAMETER.sub(r"\1***", url))


def require_reachable(url: str, timeout: float) -> None:
    """Refuse, within ``timeout`` seconds, a Spark Connect server at ``url`` that does not
    accept a connection and complete the gRPC handshake (HTTP/2, and TLS when the URL asks
    for it). Without this the client retries an unreachable server for about ten minutes
    (pyspark's default retry policy) before it reports anything. Raises
    :class:`SparkEngineError` naming the URL with its token masked."""
    import socket
    import time

    import grpc  # type: ignore[import-untyped]  # no stubs; used for its channel state only
    from pyspark.sql.connect.client.core import DefaultChannelBuilder

    shown = masked_url(url)
    remedy = ("start the server or fix the URL (the Airflow connection DP_SPARK_CONN_ID, "
              "else DP_SPARK_REMOTE), then rerun; DP_SPARK_CONNECT_TIMEOUT sets the wait "
              "(docs/spark.md)")
    try:
        channel_builder = DefaultChannelBuilder(url)
        host, _, port = channel_builder.endpoint.rpartition(":")
        address = (host.strip("[]"), int(port))
    except Exception as exc:  # pyspark's own message quotes the URL, token included
        raise SparkEngineError(f"the Spark Connect URL {shown} is not valid "
                               f"({type(exc).__name__}): {remedy}") from None
    deadline = time.monotonic() + timeout
    try:
        socket.create_connection(address, timeout=timeout).close()
    except OSError as exc:
        state = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise SparkEngineError(f"the Spark Connect server {shown} cannot be reached within "
                               f"{timeout:g} s ({state}): {remedy}") from None
    channel = channel_builder.toChannel()
    try:
        grpc.channel_ready_future(channel).result(
            timeout=max(deadline - time.monotonic(), 0.1))
    except grpc.FutureTimeoutError:
        raise SparkEngineError(f"the Spark Connect server {shown} accepted a connection but "
                               f"completed no gRPC handshake within {timeout:g} s (not a "
                               f"Spark Connect server, or TLS expected on one side only): "
                               f"{remedy}") from None
    finally:
        channel.close()


def _file_uri(path: Path) -> str:
    # Explicit file: so that a cluster whose default filesystem is HDFS still reads and
    # writes the shared mount (see the module docstring). Not Path.as_uri(): Hadoop would
    # keep its %-escapes literally.
    return "file://" + str(path.resolve())


def _register_ancestors(spark: SparkSession, ancestors: pd.DataFrame) -> None:
    """The public region tree, numbered and typed as DuckDB registers it
    (:func:`dp_ops.engine.base.ancestors_table`: an Arrow table, so no Python worker
    processes, and it works over Spark Connect too)."""
    spark.createDataFrame(ancestors_table(ancestors)).createOrReplaceTempView(ANCESTORS_VIEW)


@contextmanager
def _runtime_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """``conf`` set on the session while the block runs, the previous values back after
    (a setting that was not set is unset again)."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


class _TempViews:
    """The temporary views (and persisted frames) one query creates, dropped when the block
    ends, however it ends: frames unpersisted first (over Spark Connect, unpersist analyses
    the plan again, which needs the views it reads), then every view named."""

    def __init__(self, spark: SparkSession, names: Sequence[str] = ()) -> None:
        self.spark = spark
        self.names = list(names)
        self.persisted: list[Any] = []

    def register(self, name: str, frame: Any, *, persist: bool = False) -> None:
        if persist:
            frame = frame.persist()
            self.persisted.append(frame)
        frame.createOrReplaceTempView(name)
        self.names.append(name)

    def __enter__(self) -> _TempViews:
        return self

    def __exit__(self, *exc: object) -> None:
        for frame in reversed(self.persisted):
            frame.unpersist()
        for name in self.names:
            self.spark.catalog.dropTempView(name)


@contextmanager
def _temp_dir_beside(target: Path) -> Iterator[Path]:
    make_dirs(target.parent)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-spark-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_one_parquet(frame: Any, target: Path) -> None:
    """Write the Spark DataFrame ``frame`` to ``target`` as one Parquet file, atomically:
    Spark writes into a hidden directory beside ``target``, whose single part file is then
    renamed onto it (the worker renames; it never opens the file). Row order is the
    frame's (``coalesce``, not ``repartition``, keeps a sorted order)."""
    with _temp_dir_beside(target) as tmp:
        out = tmp / "out"
        frame.coalesce(1).write.mode("error").parquet(_file_uri(out))
        parts = sorted(out.glob("part-*.parquet"))
        if len(parts) != 1:
            raise SparkEngineError(f"Spark wrote {len(parts)} Parquet part files under "
                                   f"{out}, expected exactly one")
        os.chmod(parts[0], file_mode(target))
        os.replace(parts[0], target)


def copy_query_to_parquet(settings: ExecutionSettings, query: str,
                          params: Mapping[str, object], ancestors: pd.DataFrame,
                          target: Path, *, clean_file: Path | None = None,
                          stages: Sequence[tuple[str, str]] = ()) -> None:
    """Run the DuckDB-dialect ``query`` on Spark and write its result to ``target`` as one
    Parquet file, atomically (the Spark counterpart of
    :func:`dp_ops.engine.files.atomic_copy_to_parquet`).

    The query sees ``ancestors`` as the view ``ancestors`` and, if given, the Parquet file
    ``clean_file`` as the view ``clean_rows``. Spark writes into a hidden directory beside
    ``target``; its single part file is then renamed onto ``target``, so readers see the
    old file or the whole new one, never a partial one. Row order is the query's
    ``ORDER BY``; column types are the query's casts, as in DuckDB's file.

    ``stages`` (a query's common table expressions, :func:`split_ctes`) become temporary
    views first, in order; one that later stages or the query read more than once is
    persisted (uncompressed; in memory, then on Spark's local disk) while the query runs.
    Spark does not materialize a CTE: it computes it again at every reference (the
    mobility query would read the clean file once per reference).
    """
    spark = spark_session(settings)
    sql, args = spark_parameters(query, params)
    with _runtime_conf(spark, _QUERY_CONF), _TempViews(spark, [ANCESTORS_VIEW]) as views:
        _register_ancestors(spark, ancestors)
        if clean_file is not None:
            # basePath = the file's own directory: no partition column from date=... dirs,
            # like DuckDB's hive_partitioning=false.
            clean_dir = _file_uri(clean_file.parent)
            views.register(CLEAN_VIEW, spark.read.option("basePath", clean_dir)
                           .parquet(_file_uri(clean_file)))
        for k, (name, body) in enumerate(stages):
            later = " ".join(b for _, b in stages[k + 1:]) + " " + query
            stage_sql, stage_args = spark_parameters(body, params)
            views.register(name, spark.sql(stage_sql, args=stage_args),
                           persist=len(re.findall(rf"\b{re.escape(name)}\b", later)) > 1)
        write_one_parquet(spark.sql(sql, args=args), target)


class SparkEngine:
    """:class:`dp_ops.engine.base.Engine` on Spark: the same SQL over a Spark view of the
    clean file (``shard_stays.sql`` parses hex in Spark's dialect), with DuckDB's ``$name``
    parameters turned into Spark's ``:name``."""

    name = "spark"

    def __init__(self, settings: ExecutionSettings) -> None:
        self.settings = settings

    def file_columns(self, path: Path) -> list[tuple[str, ColumnType]]:
        return spark_ingest.file_columns(spark_session(self.settings), _file_uri(path), path)

    def judge_to_parquet(self, root: DataRoot, job: Judging) -> dict[str, int]:
        """See :class:`dp_ops.engine.base.Engine` and :mod:`dp_ops.engine.spark_ingest`.
        The judged rows are written once, in parallel, to a private directory under
        ``work/tmp``; the counts, the clean rows and the quarantine are read from there."""
        spark = spark_session(self.settings)
        with _TempViews(spark, [spark_ingest.RAW_VIEW, spark_ingest.FILES_VIEW,
                                spark_ingest.JUDGED_VIEW, *job.lookups]):
            spark_ingest.register_lookups(spark, job)
            spark_ingest.register_raw(spark, job, _file_uri)
            sql, args = spark_parameters(spark_ingest.judging_sql(job),
                                         spark_ingest.judging_params(job))
            # under work/tmp (private): nothing appears in the clean area until it is whole
            with _temp_dir_beside(root.root / "work" / "tmp" / "judged") as tmp:
                judged_uri = _file_uri(tmp / "judged")
                try:
                    spark.sql(sql, args=args).write.mode("error").parquet(judged_uri)
                except Exception as exc:  # noqa: BLE001  (a corrupt data page, say)
                    raise spark_ingest.unreadable_file(spark, job, _file_uri,
                                                       spark_parameters, exc) from exc
                judged = spark.read.parquet(judged_uri)
                counts = spark_ingest.outcome_counts(judged)
                write_one_parquet(judged.where("reason IS NULL")
                                  .select(*job.clean_columns), job.clean)
                if set(counts) - {"clean"}:
                    write_one_parquet(spark_ingest.quarantined(spark, judged), job.quarantine)
                else:
                    job.quarantine.unlink(missing_ok=True)  # no stale quarantine stays
            return counts

    def bound_to_parquet(self, root: DataRoot, clean: Path, target: Path,
                         ancestors: pd.DataFrame, bounding: BoundingSql,
                         params: dict[str, object], shard: int | None) -> None:
        relation, params = shard_relation(CLEAN_VIEW, params, self.settings, shard, "spark")
        # the report's cell-sums query for Spark (else its per-user query), its CTEs as
        # views, each computed once (see copy_query_to_parquet)
        stages, statement = split_ctes(bounding.cell_sums_rows(relation, self.name))
        copy_query_to_parquet(self.settings, aggregate_sql(statement), params, ancestors,
                              target, clean_file=clean, stages=stages)
