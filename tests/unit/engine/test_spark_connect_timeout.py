"""A Spark Connect server that cannot be reached fails the task within
``DP_SPARK_CONNECT_TIMEOUT`` with an error naming the URL, its token masked (issue 48,
route 9: the client used to retry for about ten minutes without a word).

Each test runs the session's start in a thread and gives it the timeout plus a margin:
the old client, which retries, is then reported as still waiting instead of hanging the
test run."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dp_ops.errors import SparkEngineError
from dp_ops.settings import load_execution_settings

TOKEN = "s3cr3t-t0ken-48"
TIMEOUT_S = 2
MARGIN_S = 8  # a loaded CI machine; the client's own retries would take minutes


def _start_session(url: str) -> tuple[BaseException | None, float]:
    """What starting the engine's session against ``url`` raised, and after how long; the
    test fails when it is still waiting after the timeout and the margin."""
    from pyspark.sql import SparkSession

    settings = load_execution_settings({"DP_ENGINE": "spark", "DP_SPARK_REMOTE": url,
                                        "DP_SPARK_CONNECT_TIMEOUT": str(TIMEOUT_S)})
    outcome: list[BaseException | None] = []
    # A local session other tests share (tests/unit/engine/conftest.py) would be returned
    # as the active one; for this test the process has none, as a task process has none.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
        return _run_start(settings, outcome)


def _run_start(settings: Any, outcome: list[BaseException | None]
               ) -> tuple[BaseException | None, float]:
    from dp_ops.engine.spark import spark_session

    def start() -> None:
        try:
            spark_session(settings).stop()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome.append(exc)

    began = time.monotonic()
    worker = threading.Thread(target=start, daemon=True)
    worker.start()
    worker.join(TIMEOUT_S + MARGIN_S)
    elapsed = time.monotonic() - began
    assert outcome, f"the Spark Connect client still waits after {elapsed:.0f} s"
    return outcome[0], elapsed


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts TCP connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


def _assert_named_and_masked(exc: BaseException | None, port: int) -> str:
    assert isinstance(exc, SparkEngineError), repr(exc)
    message = str(exc)
    assert f"sc://127.0.0.1:{port}/;token=***" in message
    assert TOKEN not in message and TOKEN not in repr(exc.__cause__)
    assert "DP_SPARK_CONNECT_TIMEOUT" in message
    return message


def test_a_closed_port_fails_at_once_naming_the_url_without_its_token(
        closed_port: int) -> None:
    exc, elapsed = _start_session(f"sc://127.0.0.1:{closed_port}/;token={TOKEN};user_id=dp")
    message = _assert_named_and_masked(exc, closed_port)
    assert "cannot be reached" in message
    assert elapsed < TIMEOUT_S + MARGIN_S


def test_a_server_that_never_answers_fails_within_the_timeout(silent_port: int) -> None:
    exc, elapsed = _start_session(f"sc://127.0.0.1:{silent_port}/;token={TOKEN}")
    message = _assert_named_and_masked(exc, silent_port)
    assert "no gRPC handshake" in message
    assert TIMEOUT_S - 0.5 <= elapsed < TIMEOUT_S + MARGIN_S


def test_a_malformed_url_is_refused_without_its_token() -> None:
    exc, _ = _start_session(f"sc:///;token={TOKEN}")  # no host
    assert isinstance(exc, SparkEngineError) and TOKEN not in str(exc)
    assert "sc:///;token=***" in str(exc)
