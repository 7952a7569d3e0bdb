"""The ledger's tables, its hash chain and the database's own append-only guards
(docs/design.md, Privacy budget ledger; docs/deploy.md for the PostgreSQL roles).

Every table here is insert-only. Each inserted row is also an entry of ``ledger_chain``:
entry ``seq`` (1, 2, 3, ... with no gap) names the table and row id, the sha256 of the
row's canonical content (:func:`row_sha256`) and ``chain_sha256``, which commits to the
previous entry's ``chain_sha256``. So an edited row no longer matches its entry, a deleted
row leaves an entry pointing at nothing, a deleted entry leaves a gap or a broken link, and
a row inserted behind the ledger's back has no entry: :func:`verify_chain` names the first
of these. Entries are appended under the ledger's write lock, in the transaction that
inserts the row.

Each link is an HMAC-SHA256 under the ledger key (:mod:`dp_ops.privacy.ledger_key`), not a
plain sha256: someone who can write the database but lacks the key cannot recompute the
links after an edit, so the chain catches every edit, not only those made by someone who
did not bother to recompute it. A ledger whose first link is a plain sha256 was written
before links were keyed; it is refused (it cannot be verified against anything secret).

The database refuses changes as a first line: on SQLite, triggers abort every UPDATE and
DELETE; on PostgreSQL, the pipeline's role is granted SELECT and INSERT only
(:func:`grant_pipeline_role`) and a trigger refuses UPDATE, DELETE and TRUNCATE even to the
owner role. The chain is the second line: it catches what someone able to drop a trigger
did afterwards.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

SCHEMA_VERSION = 2
GENESIS = "0" * 64
# Alembic's version table of the ledger (privacy/ledger_migrations.py), apart from any
# `alembic_version` of another application in the same database
VERSION_TABLE = "ledger_alembic_version"

metadata = sa.MetaData()

# id columns use AUTOINCREMENT on SQLite (sqlite_autoincrement): an id is never handed out
# twice, even after its row was deleted. PostgreSQL's sequences never reuse values anyway.
ledger_meta = sa.Table(
    "ledger_meta",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ledger_id", sa.String(36), nullable=False),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("created_at", sa.String(32), nullable=False),
    sqlite_autoincrement=True,
)

budget_spend = sa.Table(
    "budget_spend",
    metadata,
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
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("created_at", sa.String(32), nullable=False),
    sa.UniqueConstraint("report", "day", "level", "metric", "region_scope", "generation",
                        name="uq_budget_spend_slot_generation"),
    sqlite_autoincrement=True,
)

# The stored noisy values of a spend: their file's sha256 and cell count, recorded once
# when the file is stored (one row per spend). Every read verifies the file against it.
noise_store = sa.Table(
    "noise_store",
    metadata,
    sa.Column("spend_id", sa.Integer, sa.ForeignKey("budget_spend.id"), primary_key=True),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("cells", sa.Integer, nullable=False),
    sa.Column("created_at", sa.String(32), nullable=False),
)

# A report's privacy policy: its per-user-day cap and the terms its spends are made of
# (the epsilon of each ledger metric group, the method-update fraction), as a canonical
# JSON object. The first spend of a report records it; the latest row is in force; a new
# row is written only by an explicit command with a reason (Ledger.set_policy).
report_policy = sa.Table(
    "report_policy",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("report", sa.String(64), nullable=False),
    sa.Column("cap", sa.Float, nullable=False),
    sa.Column("terms", sa.Text, nullable=False),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("created_at", sa.String(32), nullable=False),
    sqlite_autoincrement=True,
)

# State derived from stored noise that later releases rest on (the frozen baseline, the
# symptoms scaling factors, each method update's factors): the sha256 of each version of
# its file. The latest row per (report, name) is the only version a reader accepts.
derived_state = sa.Table(
    "derived_state",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("report", sa.String(64), nullable=False),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("replaces", sa.String(64), nullable=False),
    sa.Column("created_at", sa.String(32), nullable=False),
    sqlite_autoincrement=True,
)

# Who approved an extra spend (a re-noise, a method update) of a run, and what exactly:
# the sha256 of the canonical request (``request``, its text: report, kind, dates, region,
# reason, repeat flag, method version and update parameters). A reservation of those kinds
# needs a row for its run and its request (Ledger.reserve); the approver is never the
# requester. ``via`` says who vouched for the names: Airflow's human-in-the-loop response,
# or an administrator at the command line. Migration 0003.
spend_approval = sa.Table(
    "spend_approval",
    metadata,
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
    sqlite_autoincrement=True,
)

ledger_chain = sa.Table(
    "ledger_chain",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("tbl", sa.String(32), nullable=False),
    sa.Column("row_id", sa.Integer, nullable=False),
    sa.Column("row_sha256", sa.String(64), nullable=False),
    sa.Column("chain_sha256", sa.String(64), nullable=False),
    sa.UniqueConstraint("tbl", "row_id", name="uq_ledger_chain_row"),
)

# the chained tables and the column that identifies a row of each
CHAINED: dict[str, tuple[sa.Table, str]] = {
    "ledger_meta": (ledger_meta, "id"),
    "budget_spend": (budget_spend, "id"),
    "noise_store": (noise_store, "spend_id"),
    "report_policy": (report_policy, "id"),
    "derived_state": (derived_state, "id"),
    "spend_approval": (spend_approval, "id"),
}
APPEND_ONLY = (*CHAINED, "ledger_chain")


# json.dumps with these options builds an encoder at every call; one, built once
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                              allow_nan=False)


def canonical(row: Mapping[str, Any]) -> str:
    """One text per row content: sorted keys, floats by repr (exact round trip)."""
    return _CANONICAL.encode(dict(row))


def row_sha256(tbl: str, row: Mapping[str, Any]) -> str:
    return hashlib.sha256(f"{tbl}\n{canonical(row)}".encode()).hexdigest()


def link_sha256(key: bytes, prev: str, seq: int, tbl: str, row_id: int,
                row_hash: str) -> str:
    """Entry ``seq``'s link: HMAC-SHA256 under the ledger key of the previous link and the
    entry (the column keeps its name, ``chain_sha256``)."""
    return hmac.new(key, f"{prev}|{seq}|{tbl}|{row_id}|{row_hash}".encode(),
                    hashlib.sha256).hexdigest()


def _unkeyed_link(prev: str, seq: int, tbl: str, row_id: int, row_hash: str) -> str:
    """How links were computed before they were keyed (only to name such a ledger)."""
    return hashlib.sha256(f"{prev}|{seq}|{tbl}|{row_id}|{row_hash}".encode()).hexdigest()


def row_dict(row: Any) -> dict[str, Any]:
    return _as_dict(row._mapping.keys(), tuple(row))


def _as_dict(keys: Iterable[str], values: Iterable[Any]) -> dict[str, Any]:
    return {k: (float(v) if isinstance(v, float) else v) for k, v in zip(keys, values,
                                                                           strict=True)}


def append(conn: Connection, tbl: str, values: Mapping[str, Any], key: bytes) -> int:
    """Insert a row into chained table ``tbl`` and its chain entry (linked under ``key``);
    return the row id. Call inside a write transaction that holds the ledger's lock."""
    table, id_column = CHAINED[tbl]
    result = conn.execute(table.insert().values(**values))
    if id_column in values:
        row_id = int(values[id_column])
    else:
        pk = result.inserted_primary_key
        assert pk is not None
        row_id = int(pk[0])
    # hash what the database holds, read back, not what we sent (types are normalised)
    stored = conn.execute(sa.select(table).where(table.c[id_column] == row_id)).one()
    last = conn.execute(sa.select(ledger_chain.c.seq, ledger_chain.c.chain_sha256)
                        .order_by(ledger_chain.c.seq.desc()).limit(1)).first()
    seq, prev = (1, GENESIS) if last is None else (int(last.seq) + 1, last.chain_sha256)
    row_hash = row_sha256(tbl, row_dict(stored))
    conn.execute(ledger_chain.insert().values(
        seq=seq, tbl=tbl, row_id=row_id, row_sha256=row_hash,
        chain_sha256=link_sha256(key, prev, seq, tbl, row_id, row_hash)))
    return row_id


@dataclass(frozen=True)
class ChainCheck:
    """The outcome of :func:`verify_chain`: ``problem`` is None when every row checks."""

    entries: int
    head: str
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.problem is None


def verify_chain(conn: Connection, key: bytes) -> ChainCheck:
    """Recompute the chain under ``key`` from the first entry; name the first entry or row
    that fails."""
    rows: dict[str, dict[int, dict[str, Any]]] = {}
    for tbl, (table, id_column) in CHAINED.items():
        result = conn.execute(sa.select(table))
        keys = list(result.keys())
        at = keys.index(id_column)
        rows[tbl] = {int(t[at]): _as_dict(keys, t) for t in result}
    seen: set[tuple[str, int]] = set()
    prev = GENESIS
    expected_seq = 1
    count = 0
    chain = sa.select(ledger_chain.c.seq, ledger_chain.c.tbl, ledger_chain.c.row_id,
                      ledger_chain.c.row_sha256, ledger_chain.c.chain_sha256)
    for seq, tbl, row_id, row_hash, chain_hash in conn.execute(
            chain.order_by(ledger_chain.c.seq)):
        count += 1
        if seq != expected_seq:
            return ChainCheck(count, prev, f"chain entry {expected_seq} is missing (the next "
                              f"is {seq}): an entry was deleted")
        problem = None
        if tbl not in CHAINED:
            problem = "names no ledger table"
        elif not hmac.compare_digest(chain_hash, link_sha256(key, prev, seq, tbl, row_id,
                                                             row_hash)):
            if seq == 1 and chain_hash == _unkeyed_link(prev, seq, tbl, row_id, row_hash):
                problem = ("its link is a plain sha256, not a MAC under a ledger key: the "
                           "ledger was written before links were keyed and cannot be "
                           "verified against anything secret. Keep it for the record and "
                           "start a new ledger with a new data root")
            elif seq == 1:
                problem = ("its link does not verify under this process's ledger key: the "
                           "key is not the one this ledger was created with (DP_LEDGER_KEY, "
                           "DP_LEDGER_KEY_FILE or the dp_ledger_key connection), or the "
                           "chain was rewritten")
            else:
                problem = ("its link does not commit to the entry before it under the "
                           "ledger key: the chain was edited")
        elif (row := rows[tbl].get(row_id)) is None:
            problem = "the row is missing: it was deleted"
        elif row_sha256(tbl, row) != row_hash:
            problem = ("the row differs from what was recorded when it was written: it was "
                       "edited")
        if problem is not None:
            return ChainCheck(count, prev, f"chain entry {seq} ({tbl} {row_id}): {problem}")
        seen.add((tbl, row_id))
        prev = chain_hash
        expected_seq += 1
    for tbl, by_id in rows.items():
        for row_id in sorted(by_id):
            if (tbl, row_id) not in seen:
                return ChainCheck(count, prev, f"{tbl} {row_id}: the row has no chain entry: "
                                  "it was inserted behind the ledger's back, or its entry "
                                  "was deleted")
    return ChainCheck(count, prev, None)


# -- the database's guards ---------------------------------------------------------------

def _sqlite_triggers(tables: Iterable[str] = APPEND_ONLY) -> Iterable[tuple[str, str]]:
    for tbl in tables:
        for op in ("UPDATE", "DELETE"):
            name = f"{tbl}_no_{op.lower()}"
            yield name, (f"CREATE TRIGGER IF NOT EXISTS {name} BEFORE {op} ON {tbl} BEGIN "
                         f"SELECT RAISE(ABORT, 'the ledger is append-only: {op} of {tbl} "
                         "refused'); END")


# (%% : the driver's placeholder syntax; PostgreSQL receives a single %)
PG_FUNCTION = """
CREATE OR REPLACE FUNCTION dp_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the ledger is append-only: %% of %% refused', TG_OP, TG_TABLE_NAME;
END $$
"""


def _pg_triggers(tables: Iterable[str] = APPEND_ONLY) -> Iterable[tuple[str, str]]:
    for tbl in tables:
        yield (f"{tbl}_append_only",
               f"CREATE TRIGGER {tbl}_append_only BEFORE UPDATE OR DELETE ON {tbl} "
               "FOR EACH ROW EXECUTE FUNCTION dp_ledger_append_only()")
        yield (f"{tbl}_no_truncate",
               f"CREATE TRIGGER {tbl}_no_truncate BEFORE TRUNCATE ON {tbl} "
               "FOR EACH STATEMENT EXECUTE FUNCTION dp_ledger_append_only()")


# The migration-version table is written by Alembic when a ledger is created (one INSERT)
# and upgraded (an UPDATE to a later revision, zero-padded so that text order is revision
# order); anything else (a deleted row, a second row, a version set back) is refused.
_VERSION_REFUSED = "the ledger migration version only moves forward: {op} refused"


def _sqlite_version_triggers() -> Iterable[tuple[str, str]]:
    t = VERSION_TABLE
    for name, event, when, op in (
            (f"{t}_no_delete", "DELETE", "", "DELETE"),
            (f"{t}_forward_only", "UPDATE", "WHEN NEW.version_num <= OLD.version_num ",
             "UPDATE to an earlier or the same revision"),
            (f"{t}_one_row", "INSERT", f"WHEN (SELECT count(*) FROM {t}) > 0 ",
             "INSERT of a second row")):
        message = _VERSION_REFUSED.format(op=op)
        yield name, (f"CREATE TRIGGER IF NOT EXISTS {name} BEFORE {event} ON {t} {when}BEGIN "
                     f"SELECT RAISE(ABORT, '{message}'); END")


PG_VERSION_FUNCTION = f"""
CREATE OR REPLACE FUNCTION dp_ledger_version_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  existing integer;
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.version_num > OLD.version_num THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'INSERT' THEN
    EXECUTE format('SELECT count(*) FROM %%I.%%I', TG_TABLE_SCHEMA, TG_TABLE_NAME)
      INTO existing;
    IF existing = 0 THEN
      RETURN NEW;
    END IF;
  END IF;
  RAISE EXCEPTION '{_VERSION_REFUSED.format(op="%%")}', TG_OP;
END $$
"""


def _pg_version_triggers() -> Iterable[tuple[str, str]]:
    t = VERSION_TABLE
    yield (f"{t}_guard", f"CREATE TRIGGER {t}_guard BEFORE INSERT OR UPDATE OR DELETE ON {t} "
                         "FOR EACH ROW EXECUTE FUNCTION dp_ledger_version_guard()")
    yield (f"{t}_no_truncate", f"CREATE TRIGGER {t}_no_truncate BEFORE TRUNCATE ON {t} "
                               "FOR EACH STATEMENT EXECUTE FUNCTION dp_ledger_append_only()")


def trigger_names(dialect: str) -> list[str]:
    """Every append-only guard of a ledger at the newest migration."""
    if dialect == "sqlite":
        found = [*_sqlite_triggers(), *_sqlite_version_triggers()]
    else:
        found = [*_pg_triggers(), *_pg_version_triggers()]
    return sorted(name for name, _ in found)


def install_version_guards(conn: Connection) -> None:
    """Guard the migration-version table (idempotent; migration 0002). Needs its owner."""
    if conn.dialect.name == "sqlite":
        for _, ddl in _sqlite_version_triggers():
            conn.exec_driver_sql(ddl)
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql(PG_FUNCTION)
        conn.exec_driver_sql(PG_VERSION_FUNCTION)
        have = _pg_trigger_names(conn)
        for name, ddl in _pg_version_triggers():
            if name not in have:
                conn.exec_driver_sql(ddl)


def _pg_trigger_names(conn: Connection, *, enabled_only: bool = False) -> set[str]:
    return set(conn.exec_driver_sql(
        "SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
        "WHERE c.relnamespace = current_schema()::regnamespace"
        + (" AND t.tgenabled <> 'D'" if enabled_only else "")).scalars())


def install_guards(conn: Connection) -> None:
    """Create the append-only triggers of every ledger table the database has (idempotent).
    Needs the tables' owner. Tables a later migration adds are left to it: migration 0001
    calls this before they exist, and their migration calls it again once they do
    (:func:`missing_guards` names any table left unguarded)."""
    dialect = conn.dialect.name
    present = set(sa.inspect(conn).get_table_names())
    tables = [tbl for tbl in APPEND_ONLY if tbl in present]
    if dialect == "sqlite":
        for _, ddl in _sqlite_triggers(tables):
            conn.exec_driver_sql(ddl)
    elif dialect == "postgresql":
        conn.exec_driver_sql(PG_FUNCTION)
        have = _pg_trigger_names(conn)
        for name, ddl in _pg_triggers(tables):
            if name not in have:
                conn.exec_driver_sql(ddl)


def missing_guards(conn: Connection) -> list[str]:
    """The append-only triggers that are not there (or, on PostgreSQL, are disabled)."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        have = set(conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'").scalars())
    elif dialect == "postgresql":
        have = _pg_trigger_names(conn, enabled_only=True)
    else:
        return []
    return [name for name in trigger_names(dialect) if name not in have]


def grant_pipeline_role(conn: Connection, role: str) -> None:
    """PostgreSQL: let ``role`` read and append to the ledger, nothing else. Run as the
    owner role; ``role`` must exist."""
    if conn.dialect.name != "postgresql":
        raise ValueError("roles are a PostgreSQL matter; SQLite has none")
    ident = conn.dialect.identifier_preparer.quote(role)
    conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA {_current_schema(conn)} TO {ident}")
    for tbl in APPEND_ONLY:
        conn.exec_driver_sql(f"REVOKE ALL ON {tbl} FROM {ident}")
        conn.exec_driver_sql(f"GRANT SELECT, INSERT ON {tbl} TO {ident}")
    # the migration version: read (is the ledger at the version this code knows?), never
    # written by the pipeline
    conn.exec_driver_sql(f"REVOKE ALL ON {VERSION_TABLE} FROM {ident}")
    conn.exec_driver_sql(f"GRANT SELECT ON {VERSION_TABLE} TO {ident}")
    for seq in conn.exec_driver_sql(
            "SELECT sequence_name FROM information_schema.sequences "
            "WHERE sequence_schema = current_schema()").scalars():
        conn.exec_driver_sql(f"GRANT USAGE, SELECT ON SEQUENCE "
                             f"{conn.dialect.identifier_preparer.quote(seq)} TO {ident}")


def _current_schema(conn: Connection) -> str:
    name = conn.exec_driver_sql("SELECT current_schema()").scalar_one()
    return str(conn.dialect.identifier_preparer.quote(name))
