"""The engine tests' shared Spark session."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local[1] SparkSession for the whole test session (starting one takes seconds);
    skipped without Java."""
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("Java not found (no java on PATH, no JAVA_HOME): the Spark engine "
                    "needs Java 17+")
    from dp_ops.engine.spark import spark_session
    from dp_ops.settings import ExecutionSettings

    # the driver JVM lives for seconds: C1 alone compiles its hot code soon enough, and the
    # C2 compiler and parallel GC threads would only take CPU from the other test workers
    # (the engine's own settings are left alone: production runs live long)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options "
                  "'-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell")
        session = spark_session(ExecutionSettings(engine="spark", spark_master="local[1]"))
    # the tests' inputs are tiny: one shuffle partition saves most of a query's tasks, and
    # interpreted plans skip compiling Java for rows that run in no time (the integration
    # tier's Spark tests run the engine's own settings on a generated day)
    session.conf.set("spark.sql.shuffle.partitions", "1")
    session.conf.set("spark.sql.codegen.wholeStage", "false")
    session.conf.set("spark.sql.codegen.factoryMode", "NO_CODEGEN")
    session.conf.set("spark.sql.adaptive.enabled", "false")
    yield session
    session.stop()
