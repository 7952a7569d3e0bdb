"""The ledger's connection type: :class:`LedgerHook` builds the SQLAlchemy URL from a
``dp_ledger`` connection's fields (and from the generic ``postgres`` and ``sqlite``
types), its password masked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dp_ops.airflow.hooks.ledger import LedgerHook, connection_url
from dp_ops.errors import BadRequest

ENV = "AIRFLOW_CONN_DP_LEDGER"


def test_a_dp_ledger_connection_names_its_driver_in_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk._shared.secrets_masker.secrets_masker import redact

    monkeypatch.setenv(ENV, json.dumps({
        "conn_type": "dp_ledger", "host": "db.internal", "port": 5433, "schema": "ledger",
        "login": "dp_ledger", "password": "p@ss/word",
        "extra": {"driver": "postgresql+psycopg", "sslmode": "require"}}))
    url = LedgerHook().get_url()
    assert url == ("postgresql+psycopg://dp_ledger:p%40ss%2Fword@db.internal:5433/ledger"
                   "?sslmode=require")
    assert "p@ss/word" not in str(redact("password p@ss/word"))


def test_without_a_driver_a_dp_ledger_connection_is_postgresql() -> None:
    assert connection_url("c", "dp_ledger", host="h", port=None, schema="d", login="u",
                          password=None, extra={}) == "postgresql+psycopg://u@h/d"


def test_a_sqlite_ledger_is_a_file_path(tmp_path: Path) -> None:
    assert connection_url("c", "sqlite", host=str(tmp_path / "l.sqlite"), port=None,
                          schema=None, login=None, password=None, extra={}) == \
        f"sqlite:///{tmp_path}/l.sqlite"
    assert connection_url("c", "dp_ledger", host=str(tmp_path / "l.sqlite"), port=None,
                          schema=None, login=None, password=None,
                          extra={"driver": "sqlite"}) == f"sqlite:///{tmp_path}/l.sqlite"


def test_another_connection_id_and_a_missing_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_OTHER_LEDGER", "postgres://u:p@h:5432/d")
    assert LedgerHook().get_url() is None
    assert LedgerHook("other_ledger").get_url() == "postgresql+psycopg://u:p@h:5432/d"


def test_an_unknown_type_is_refused_naming_it() -> None:
    with pytest.raises(BadRequest, match=r"connection c: conn_type='mysql', expected one of"):
        connection_url("c", "mysql", host="h", port=None, schema=None, login=None,
                       password=None, extra={})
