"""Where the Spark engine finds its Spark Connect server: the Airflow connection
(``DP_SPARK_CONN_ID``, default ``spark_connect_default``) when a task runs and it exists,
else ``DP_SPARK_REMOTE``; a connection named explicitly must exist. The lookup itself is
the Airflow adapters' (``dp_ops.airflow.runtime.spark_remote_from_connection``, which the
Connect-server backfill in tests/integration/test_spark_connect_backfill.py uses); here a
stand-in provider plays the connection store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dp_ops.errors import ConfigError
from dp_ops.settings import (
    ExecutionSettings,
    load_execution_settings,
    spark_remote_url,
    use_spark_remote_provider,
)

CONNECTIONS = {"spark_connect_default": "sc://connect.internal:15002/",
               "spark_big": "sc://big.internal:15002/;token=x"}


@pytest.fixture()
def connections() -> Iterator[None]:
    use_spark_remote_provider(CONNECTIONS.get)
    yield
    use_spark_remote_provider(None)


def test_without_airflow_the_environment_variable_is_used() -> None:
    settings = load_execution_settings({"DP_ENGINE": "spark",
                                        "DP_SPARK_REMOTE": "sc://cli:15002"})
    assert spark_remote_url(settings) == "sc://cli:15002"
    assert spark_remote_url(ExecutionSettings(engine="spark")) is None  # local master


def test_in_a_task_the_connection_wins(connections: None) -> None:
    settings = ExecutionSettings(engine="spark", spark_remote="sc://cli:15002")
    assert spark_remote_url(settings) == CONNECTIONS["spark_connect_default"]
    named = load_execution_settings({"DP_SPARK_CONN_ID": "spark_big"})
    assert spark_remote_url(named) == CONNECTIONS["spark_big"]


def test_without_the_default_connection_the_variable_is_the_fallback() -> None:
    use_spark_remote_provider({}.get)
    try:
        settings = ExecutionSettings(engine="spark", spark_remote="sc://cli:15002")
        assert spark_remote_url(settings) == "sc://cli:15002"
    finally:
        use_spark_remote_provider(None)


def test_a_named_connection_that_does_not_exist_is_refused(connections: None) -> None:
    settings = ExecutionSettings(engine="spark", spark_conn_id="spark_typo",
                                 spark_remote="sc://cli:15002")
    with pytest.raises(ConfigError, match="DP_SPARK_CONN_ID='spark_typo': no such Airflow"):
        spark_remote_url(settings)
