"""The privacy-budget ledger as an Airflow connection: :class:`LedgerHook`.

The tasks find the ledger through the connection ``dp_ledger`` when it exists (its
password masked in every log), else through ``DP_LEDGER_URL`` or the data root's default
SQLite file, as the command line does. The connection type ``dp_ledger`` (registered by
this package's provider info) takes the database's host, port, schema (the database
name), login and password, with the SQLAlchemy driver in the extra field
(``{"driver": "postgresql+psycopg"}``, the default); the generic ``postgres`` and
``sqlite`` types are read the same way (``sqlite``: the file path as host or schema).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from dp_ops.errors import BadRequest

# Airflow connection types and the SQLAlchemy driver each maps to
DRIVERS = {"dp_ledger": "postgresql+psycopg", "postgres": "postgresql+psycopg",
           "postgresql": "postgresql+psycopg", "sqlite": "sqlite"}


class LedgerHook(BaseHook):
    """The ledger's SQLAlchemy URL from an Airflow connection.

    :param ledger_conn_id: the connection (default ``dp_ledger``).
    """

    conn_name_attr = "ledger_conn_id"
    default_conn_name = "dp_ledger"
    conn_type = "dp_ledger"
    hook_name = "DP privacy-budget ledger"

    def __init__(self, ledger_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ledger_conn_id = ledger_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form: a database server's fields, the driver in the extra."""
        return {"hidden_fields": [],
                "relabeling": {"schema": "Database"},
                "placeholders": {"extra": '{"driver": "postgresql+psycopg"}',
                                 "host": "ledger-db.internal", "schema": "dp_ledger",
                                 "login": "dp_ledger"}}

    def get_url(self) -> str | None:
        """The URL, or None when the connection does not exist (then ``DP_LEDGER_URL`` or
        the default applies). An unknown connection type is a ``BadRequest`` naming it."""
        from airflow.sdk.exceptions import AirflowNotFoundException
        from airflow.sdk.log import mask_secret

        try:
            conn = self.get_connection(self.ledger_conn_id)
        except AirflowNotFoundException:
            return None
        if conn.password:
            mask_secret(conn.password)
        url = connection_url(self.ledger_conn_id, conn.conn_type, host=conn.host,
                             port=conn.port, schema=conn.schema, login=conn.login,
                             password=conn.password, extra=conn.extra_dejson)
        mask_secret(url)
        return url


def connection_url(conn_id: str, conn_type: str | None, *, host: str | None,
                   port: int | None, schema: str | None, login: str | None,
                   password: str | None, extra: dict[str, Any]) -> str:
    """The SQLAlchemy URL a connection's fields describe (:class:`LedgerHook`)."""
    import sqlalchemy as sa

    kind = str(conn_type or "").lower()
    driver = DRIVERS.get(kind)
    if driver is None:
        raise BadRequest(f"connection {conn_id}: conn_type={conn_type!r}, expected one of "
                         f"{sorted(DRIVERS)}")
    query = {k: str(v) for k, v in extra.items()}
    if kind == "dp_ledger":
        driver = query.pop("driver", driver)
    if driver == "sqlite":
        return f"sqlite:///{host or schema}"
    url = sa.URL.create(driver, username=login or None, password=password or None,
                        host=host or None, port=port or None, database=schema or None,
                        query=query)
    return url.render_as_string(hide_password=False)
