"""Where a test data root's ledger lives: the default SQLite file inside the data root, or a
PostgreSQL database of its own (``DP_LEDGER_URL`` for the CLI children). A home can be
copied with its data root (a PostgreSQL ledger as a new database made from the old one as
a template), backed up and restored, and wiped, so that the pipeline-level attack tests run
the same attacks on both backends.

The PostgreSQL server is the one of ``DP_TEST_POSTGRES_URL`` (``make test`` starts a
throwaway one, scripts/with_test_postgres.sh), whose role must be allowed to create
databases; without it the PostgreSQL cases are skipped, except under CI, where they fail."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from dp_ops.layout import DataRoot
from support.ci import in_ci

PG_ENV = "DP_TEST_POSTGRES_URL"
BACKENDS = ("sqlite", "postgresql")


def pg_base_url() -> str:
    """The test server's URL, or a skip (a failure under CI) naming what is missing."""
    url = os.environ.get(PG_ENV)
    if not url:
        message = f"set {PG_ENV} to run the attack tests on a PostgreSQL ledger"
        if in_ci():
            pytest.fail(f"{message}: CI must run them")
        pytest.skip(message)
    return url


@contextmanager
def _admin() -> Iterator[sa.Connection]:
    """An autocommit connection to the test server's own database (``CREATE DATABASE``
    cannot run inside a transaction)."""
    engine = sa.create_engine(pg_base_url(), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _database_url(name: str) -> str:
    return sa.make_url(pg_base_url()).set(database=name).render_as_string(hide_password=False)


def create_database(template: str | None = None) -> str:
    """A new, empty database (or a copy of ``template``'s), by name."""
    name = f"dp_attack_{uuid.uuid4().hex[:12]}"
    clause = f' TEMPLATE "{template}"' if template else ""
    with _admin() as conn:
        try:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"{clause}')
        except sa.exc.ProgrammingError as exc:
            if "permission denied" not in str(exc):
                raise
            message = (f"the role of {PG_ENV} may not create databases (CREATEDB), which "
                       "the PostgreSQL attack tests need")
            if in_ci():
                pytest.fail(message)
            pytest.skip(message)
    return name


def drop_database(name: str) -> None:
    with _admin() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass(frozen=True)
class Home:
    """A data root and its ledger: ``database`` is None for the SQLite file in the root."""

    root: Path
    database: str | None = None

    @property
    def ledger_url(self) -> str:
        if self.database is None:
            return DataRoot(self.root).default_ledger_url
        return _database_url(self.database)

    @property
    def env(self) -> dict[str, str]:
        """What a CLI child needs to find the ledger."""
        return {} if self.database is None else {"DP_LEDGER_URL": self.ledger_url}

    def copy(self, root: Path) -> Home:
        """The data root copied to ``root``, with a ledger of its own equal to this one."""
        shutil.copytree(self.root, root, symlinks=True)
        if self.database is None:
            return Home(root)
        return Home(root, create_database(template=self.database))

    def backup(self, directory: Path) -> Home:
        """The ledger and the data root's ledger records, saved (to restore them later)."""
        directory.mkdir(parents=True)
        for name in self._root_records():
            shutil.copy2(self.root / name, directory / name)
        return Home(directory, None if self.database is None
                    else create_database(template=self.database))

    def restore(self, backup: Home) -> None:
        """Put ``backup``'s ledger and records back in place of the current ones."""
        if self.database is None:
            for suffix in ("-wal", "-shm"):
                Path(f"{self.root / 'ledger.sqlite'}{suffix}").unlink(missing_ok=True)
        else:
            assert backup.database is not None
            drop_database(self.database)
            with _admin() as conn:
                conn.exec_driver_sql(
                    f'CREATE DATABASE "{self.database}" TEMPLATE "{backup.database}"')
        for name in backup._root_records():
            shutil.copy2(backup.root / name, self.root / name)

    def wipe_ledger(self) -> None:
        """Remove the ledger entirely (the next ``Ledger(url)`` creates a new one)."""
        if self.database is None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.root / 'ledger.sqlite'}{suffix}").unlink(missing_ok=True)
            return
        engine = sa.create_engine(self.ledger_url)
        try:
            with engine.begin() as conn:  # the owner of the database owns its public schema
                conn.exec_driver_sql("DROP SCHEMA public CASCADE")
                conn.exec_driver_sql("CREATE SCHEMA public")
        finally:
            engine.dispose()

    def dispose(self) -> None:
        if self.database is not None:
            drop_database(self.database)

    def _root_records(self) -> list[str]:
        from dp_ops.steps.ledger_binding import HEAD_FILE, IDENTITY_FILE

        names = [IDENTITY_FILE, HEAD_FILE]
        return names + (["ledger.sqlite"] if self.database is None else [])
