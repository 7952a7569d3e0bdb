"""The ledger's schema under Alembic: every change of its tables is a migration in
``dp_ops/privacy/migrations/versions``, applied in the transaction that holds the ledger's
write lock (:meth:`dp_ops.privacy.ledger.Ledger`, ``python -m dp_ops ledger init``).

Revision ``0001`` is the schema every ledger had before there were migrations (the
hash-chained, append-only tables of ``ledger_schema``). Such a ledger has those tables but
no version table: :func:`upgrade` stamps it ``0001`` and then upgrades it like any other.
The version is kept in ``ledger_alembic_version``, apart from any ``alembic_version`` of
another application sharing the database. Migrations only go forward: the ledger is
append-only, and so is its schema.
"""

from __future__ import annotations

import functools
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from dp_ops.privacy.ledger_schema import VERSION_TABLE, prepare_expected_schema

FIRST = "0001"
# the tables of revision 0001, which a ledger from before the migrations has (later
# revisions add tables such a ledger lacks until it is upgraded)
FIRST_TABLES = frozenset({"ledger_meta", "budget_spend", "noise_store", "report_policy",
                          "derived_state", "ledger_chain"})
MIGRATIONS = Path(__file__).with_name("migrations")


def _config(conn: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if conn is not None:
        cfg.attributes["connection"] = conn
    return cfg


@functools.cache
def head() -> str:
    """The newest revision this version of dp_ops knows (read once per process: every
    ledger opened compares with it)."""
    rev = ScriptDirectory.from_config(_config()).get_current_head()
    if rev is None:
        raise RuntimeError(f"no ledger migrations under {MIGRATIONS}")
    return rev


def current(conn: Connection) -> str | None:
    """The ledger's revision, or None when it has no version table (empty, or written
    before the migrations)."""
    # a plain read (MigrationContext would log its set-up at INFO in every task log)
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return None
    rows = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(rows) > 1:
        raise RuntimeError(f"{VERSION_TABLE} holds {len(rows)} versions; expected one")
    return str(rows[0]) if rows else None


def upgrade(conn: Connection) -> str:
    """Bring the ledger on ``conn`` to :func:`head` (an empty database gets every table;
    a ledger from before the migrations is stamped ``0001`` first). Needs the owner role
    on PostgreSQL. Returns the revision it was at (``"none"`` for an empty database)."""
    before = current(conn)
    cfg = _config(conn)
    if before is None and FIRST_TABLES <= set(sa.inspect(conn).get_table_names()):
        command.stamp(cfg, FIRST)
        before = FIRST
    command.upgrade(cfg, "head")
    return before or "none"


def prepare_checks() -> None:
    """Compute once what every opening and every check of a ledger compares with: the
    newest schema migration and the schema a SQLite ledger must have. A process that forks
    task processes calls this first (``airflow_local_settings.py``), so that no task builds
    them again; no ledger is read."""
    head()
    prepare_expected_schema()
