"""The ledger's two backends, for every ledger test: SQLite (a file under tmp_path) and,
when ``DP_TEST_POSTGRES_URL`` holds a SQLAlchemy URL of a PostgreSQL database, PostgreSQL,
each test in a schema of its own, created and dropped around it. ``make test`` sets the
variable (scripts/with_test_postgres.sh starts a throwaway server); without it the
PostgreSQL cases are skipped, except under CI, where the script refuses to run without a
server."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from support.ci import in_ci

PG_ENV = "DP_TEST_POSTGRES_URL"
# a second role of the same database with no rights of its own (the role tests grant it
# what the pipeline's role gets); scripts/with_test_postgres.sh sets it
PG_APP_ENV = "DP_TEST_POSTGRES_APP_URL"


def in_schema(url: str, schema: str) -> str:
    with_path = sa.make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
    return with_path.render_as_string(hide_password=False)


@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    """(owner URL, schema name) of a fresh schema, dropped afterwards."""
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(f"set {PG_ENV} to run the ledger tests on PostgreSQL")
    schema = f"ledger_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        yield in_schema(base, schema), schema
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, sqlite_ledger_url: str) -> Iterator[str]:
    """The ledger of the ledger's own tests (``ledger``, tests/unit/conftest.py), once on
    each backend."""
    if request.param == "sqlite":
        yield sqlite_ledger_url
        return
    url, _ = request.getfixturevalue("pg_schema")
    yield url


@pytest.fixture
def app_url(pg_schema: tuple[str, str]) -> str:
    """The second role's URL (the pipeline's role in the role tests), in the same schema."""
    base = os.environ.get(PG_APP_ENV)
    if not base:
        if in_ci():
            pytest.fail(f"{PG_APP_ENV} is not set under CI: the role tests must run")
        pytest.skip(f"set {PG_APP_ENV} (a second role) to run the role tests")
    return in_schema(base, pg_schema[1])
