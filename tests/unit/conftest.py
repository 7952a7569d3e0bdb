"""The ledger the unit tests work on: ``ledger`` is an empty ledger at ``ledger_url``,
disposed afterwards. Here ``ledger_url`` is a SQLite file under the test's ``tmp_path``;
tests/unit/privacy/conftest.py overrides it with both backends (SQLite and PostgreSQL) for
the ledger's own tests. A module that needs records in the ledger before each test
overrides ``ledger`` with a fixture of the same name that requests this one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dp_ops.privacy.ledger import Ledger


@pytest.fixture
def sqlite_ledger_url(tmp_path: Path) -> str:
    """A SQLite ledger file under the test's ``tmp_path`` (created on first use)."""
    return f"sqlite:///{tmp_path / 'ledger.sqlite'}"


@pytest.fixture
def ledger_url(sqlite_ledger_url: str) -> str:
    return sqlite_ledger_url


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    led = Ledger(ledger_url)
    yield led
    led.dispose()
