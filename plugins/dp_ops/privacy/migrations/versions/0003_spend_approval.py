"""Approvals of extra spends are recorded, not implied (issue 31, point 4): the chained,
append-only table ``spend_approval`` and its guards. A ``renoise`` or ``method_update``
reservation needs a row of it for its run and its exact request.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from dp_ops.privacy.ledger_schema import install_guards

    op.create_table(
        "spend_approval",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("report", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("request_sha256", sa.String(64), nullable=False),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("requester", sa.String(100), nullable=False),
        sa.Column("approver", sa.String(100), nullable=False),
        sa.Column("via", sa.String(32), nullable=False),
        sa.Column("decided_at", sa.String(32), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sqlite_autoincrement=True)
    # its append-only triggers (those of the older tables exist: idempotent)
    install_guards(op.get_bind())


def downgrade() -> None:
    raise NotImplementedError("the ledger is append-only: its schema is never downgraded")
