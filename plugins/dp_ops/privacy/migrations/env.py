"""Alembic's environment for the ledger: always on the connection dp_ops hands over (in the
transaction that holds the ledger's write lock), never from a URL of its own."""

from __future__ import annotations

from alembic import context

from dp_ops.privacy.ledger_schema import VERSION_TABLE, metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("the ledger's migrations run through dp_ops (python -m dp_ops ledger "
                       "init), which passes its connection; not through the alembic CLI")
context.configure(connection=connection, target_metadata=metadata,
                  version_table=VERSION_TABLE, transactional_ddl=True)
context.run_migrations()
