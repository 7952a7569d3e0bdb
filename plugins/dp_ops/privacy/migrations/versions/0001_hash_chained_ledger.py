"""The hash-chained, append-only ledger: the schema of every ledger written before the
ledger had migrations (dp_ops 2026-11, ``ledger_meta.schema_version`` 2). A ledger
created then has these tables and no version table; it is stamped with this revision.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_SQLITE = {"sqlite_autoincrement": True}


def upgrade() -> None:
    from dp_ops.privacy.ledger_schema import install_guards

    op.create_table(
        "ledger_meta",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("ledger_id", sa.String(36), nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        **_SQLITE)
    op.create_table(
        "budget_spend",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("report", sa.String(64), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("region_scope", sa.String(128), nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("epsilon", sa.Float, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("method_version", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.UniqueConstraint("report", "day", "level", "metric", "region_scope", "generation",
                            name="uq_budget_spend_slot_generation"),
        **_SQLITE)
    op.create_table(
        "noise_store",
        sa.Column("spend_id", sa.Integer, sa.ForeignKey("budget_spend.id"), primary_key=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("cells", sa.Integer, nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False))
    op.create_table(
        "report_policy",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("report", sa.String(64), nullable=False),
        sa.Column("cap", sa.Float, nullable=False),
        sa.Column("terms", sa.Text, nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        **_SQLITE)
    op.create_table(
        "derived_state",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("report", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("replaces", sa.String(64), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        **_SQLITE)
    op.create_table(
        "ledger_chain",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("tbl", sa.String(32), nullable=False),
        sa.Column("row_id", sa.Integer, nullable=False),
        sa.Column("row_sha256", sa.String(64), nullable=False),
        sa.Column("chain_sha256", sa.String(64), nullable=False),
        sa.UniqueConstraint("tbl", "row_id", name="uq_ledger_chain_row"))
    # the database's append-only guards (triggers; on PostgreSQL also the function)
    install_guards(op.get_bind())


def downgrade() -> None:
    raise NotImplementedError("the ledger is append-only: its schema is never downgraded")
