"""What an attacker who can write the SQLite ledger file (it lives in the data root by
default), or who holds the PostgreSQL ledger's owner role, but does not hold the ledger key
can do to it: drop (disable) the append-only triggers, edit or delete rows, recompute the
whole chain (with a key of their own, or as plain sha256 links as before links were keyed),
put the triggers back. Issue 31, attacks 4-6."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dp_ops.privacy.ledger_schema import (
    APPEND_ONLY,
    CHAINED,
    GENESIS,
    VERSION_TABLE,
    install_guards,
    install_version_guards,
    ledger_chain,
    link_sha256,
    row_sha256,
    row_values,
)


def _drop_guards(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        for name in conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'trigger'").scalars().all():
            conn.exec_driver_sql(f"DROP TRIGGER {name}")
        return
    for tbl in (*APPEND_ONLY, VERSION_TABLE):
        conn.exec_driver_sql(f"ALTER TABLE {tbl} DISABLE TRIGGER USER")


def _restore_guards(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        install_guards(conn)
        install_version_guards(conn)
        return
    for tbl in (*APPEND_ONLY, VERSION_TABLE):
        conn.exec_driver_sql(f"ALTER TABLE {tbl} ENABLE TRIGGER USER")


def recompute_chain(conn: Connection, link: Callable[[str, int, str, int, str], str]) -> None:
    """Rebuild ``ledger_chain`` from the rows as they are now, in the old entry order
    (entries of deleted rows dropped), linked by ``link``."""
    entries = conn.execute(sa.select(ledger_chain.c.tbl, ledger_chain.c.row_id)
                           .order_by(ledger_chain.c.seq)).all()
    conn.execute(ledger_chain.delete())
    prev, seq = GENESIS, 0
    for tbl, row_id in entries:
        table, id_column = CHAINED[tbl]
        row = conn.execute(sa.select(table).where(table.c[id_column] == row_id)).first()
        if row is None:
            continue
        seq += 1
        row_hash = row_sha256(tbl, row_values(tbl, row._mapping))
        chain = link(prev, seq, tbl, int(row_id), row_hash)
        conn.execute(ledger_chain.insert().values(seq=seq, tbl=tbl, row_id=int(row_id),
                                                  row_sha256=row_hash, chain_sha256=chain))
        prev = chain


def plain_link(prev: str, seq: int, tbl: str, row_id: int, row_hash: str) -> str:
    return hashlib.sha256(f"{prev}|{seq}|{tbl}|{row_id}|{row_hash}".encode()).hexdigest()


def own_key_link() -> Callable[[str, int, str, int, str], str]:
    """Links under a key the attacker made up (they cannot read the real one)."""
    key = secrets.token_bytes(32)
    return lambda *parts: link_sha256(key, *parts)  # type: ignore[arg-type]


def tamper(ledger_url: str, edit: Callable[[Connection], Any],
           link: Callable[[str, int, str, int, str], str] | None = None) -> None:
    """Drop (on PostgreSQL: disable) the guards, ``edit``, recompute the chain with ``link``
    (default: a key of the attacker's own), restore the guards; one transaction."""
    engine = sa.create_engine(ledger_url)
    try:
        with engine.begin() as conn:
            _drop_guards(conn)
            edit(conn)
            recompute_chain(conn, link or own_key_link())
            _restore_guards(conn)
    finally:
        engine.dispose()


__all__ = ["APPEND_ONLY", "VERSION_TABLE", "plain_link", "own_key_link", "recompute_chain",
           "tamper"]
