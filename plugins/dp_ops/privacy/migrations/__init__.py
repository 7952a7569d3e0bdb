"""Alembic migrations of the ledger's schema (dp_ops.privacy.ledger_migrations runs them)."""
