"""The migration-version table gets the guards every other ledger table has: its row is
never deleted, a second row is never inserted, and the version only moves forward (an
Alembic upgrade's UPDATE to a later revision is the one change allowed).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from dp_ops.privacy.ledger_schema import install_version_guards

    install_version_guards(op.get_bind())


def downgrade() -> None:
    raise NotImplementedError("the ledger is append-only: its schema is never downgraded")
