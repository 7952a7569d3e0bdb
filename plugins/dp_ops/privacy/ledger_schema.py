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

A chain entry is computed from the values this process inserted (:func:`row_values`, one
normalisation by column type on SQLite and PostgreSQL alike), never from what the database
hands back: :func:`append` reads the row back and refuses (:class:`LedgerTampered`, the
transaction rolled back) when it differs, since only a trigger or a rule can make it differ.

The database refuses changes as a first line: on SQLite, triggers abort every UPDATE and
DELETE; on PostgreSQL, the pipeline's role is granted SELECT and INSERT only
(:func:`grant_pipeline_role`) and a trigger refuses UPDATE, DELETE and TRUNCATE even to the
owner role. The chain is the second line: it catches what someone able to drop a trigger
did afterwards. The schema itself is code that runs inside the pipeline's transactions, so
:func:`schema_differences` compares the whole of it with what this module creates (every
trigger, view, index and table on SQLite; every trigger with its function and enabled
state, rule and row-level security policy of the ledger's tables on PostgreSQL) and names
anything extra, missing or different; every write transaction and every verification
refuses such a ledger.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dp_ops.errors import LedgerTampered

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


def _as_float(value: Any) -> Any:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else value


def _as_int(value: Any) -> Any:
    return int(value.__index__()) if hasattr(value, "__index__") and not isinstance(
        value, bool) else value


def _as_str(value: Any) -> Any:
    return str(value) if isinstance(value, str) else value


def _as_is(value: Any) -> Any:
    return value


def column_value(column: sa.Column[Any]) -> Callable[[Any], Any]:
    """How a value of ``column`` is hashed: a float column's number as a float, an integer
    column's as an int, a text column's as a str (what both backends hand back for what
    was sent); anything else (None, a value of the wrong type) is left as it is, so that
    it shows as different."""
    kind = column.type
    if isinstance(kind, sa.Float):
        return _as_float
    if isinstance(kind, sa.Integer):
        return _as_int
    if isinstance(kind, sa.String):
        return _as_str
    return _as_is


@functools.cache
def _columns(tbl: str) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    table, _ = CHAINED[tbl]
    return tuple((c.name, column_value(c)) for c in table.columns)


def row_values(tbl: str, values: Mapping[Any, Any]) -> dict[str, Any]:
    """Every column of chained table ``tbl`` from ``values`` (a row read back, or what is
    inserted), normalised by :func:`column_value`: the content a row's hash is taken of.
    The one normalisation of the chain, for what is sent, read back and verified."""
    return {name: norm(values[name]) for name, norm in _columns(tbl)}


def _sent(table: sa.Table, values: Mapping[str, Any], id_column: str,
          row_id: int) -> dict[str, Any]:
    """What an INSERT of ``values`` stores when nothing rewrites it: Python-side scalar
    defaults filled in, the id the database assigned."""
    defaults = {c.name: c.default.arg for c in table.columns  # type: ignore[attr-defined]
                if c.default is not None and c.default.is_scalar}
    return {**defaults, **values, id_column: row_id}


def _differing_columns(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str]:
    return [name for name, value in sent.items()
            if type(stored[name]) is not type(value) or stored[name] != value]


def append(conn: Connection, tbl: str, values: Mapping[str, Any], key: bytes) -> int:
    """Insert a row into chained table ``tbl`` and its chain entry (linked under ``key``);
    return the row id. Call inside a write transaction that holds the ledger's lock.

    The entry is computed from what this process sent, and the row read back must be
    exactly that: a trigger or a rule that rewrote or dropped it makes the database's row
    differ, and :class:`LedgerTampered` is raised (the caller's transaction rolls back, so
    nothing of it is recorded)."""
    table, id_column = CHAINED[tbl]
    unknown = sorted(set(values) - set(table.columns.keys()))
    if unknown:
        raise ValueError(f"{tbl}: no column(s) {', '.join(unknown)}")
    result = conn.execute(table.insert().values(**values))
    if id_column in values:
        row_id = int(values[id_column])
    else:
        pk = result.inserted_primary_key
        row_id = -1 if pk is None or pk[0] is None else int(pk[0])
    sent = row_values(tbl, _sent(table, values, id_column, row_id))
    stored = conn.execute(sa.select(table).where(table.c[id_column] == row_id)).first()
    if stored is None:
        wrong = f"{tbl}: the row inserted is not there when read back"
    else:
        columns = _differing_columns(sent, row_values(tbl, stored._mapping))
        wrong = (f"{tbl} row {row_id}: column(s) {', '.join(columns)} read back differ "
                 "from what this process inserted") if columns else ""
    if wrong:
        raise LedgerTampered(
            f"{wrong}: the ledger database has been tampered with (a trigger or rule "
            "rewrites or drops what is written). Nothing was recorded (the transaction was "
            "rolled back). `python -m dp_ops ledger --verify` names what differs from the "
            "schema dp_ops creates; restore the ledger from a backup that verifies "
            "(OPERATIONS.md, 'The ledger fails verification')")
    last = conn.execute(sa.select(ledger_chain.c.seq, ledger_chain.c.chain_sha256)
                        .order_by(ledger_chain.c.seq.desc()).limit(1)).first()
    seq, prev = (1, GENESIS) if last is None else (int(last.seq) + 1, last.chain_sha256)
    row_hash = row_sha256(tbl, sent)
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
        columns = _columns(tbl)
        at = [name for name, _ in columns].index(id_column)
        # select(table) returns the columns in the table's order: normalise by position
        rows[tbl] = {int(t[at]): {name: norm(v) for (name, norm), v in
                                  zip(columns, t, strict=True)}
                     for t in conn.execute(sa.select(table))}
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

@dataclass(frozen=True)
class Guard:
    """One append-only trigger: the table it guards, its name and the DDL that creates it."""

    table: str
    name: str
    ddl: str


def _sqlite_triggers(tables: Iterable[str] = APPEND_ONLY) -> Iterable[Guard]:
    for tbl in tables:
        for op in ("UPDATE", "DELETE"):
            name = f"{tbl}_no_{op.lower()}"
            yield Guard(tbl, name, (
                f"CREATE TRIGGER IF NOT EXISTS {name} BEFORE {op} ON {tbl} BEGIN "
                f"SELECT RAISE(ABORT, 'the ledger is append-only: {op} of {tbl} refused'); "
                "END"))


# (%% : the driver's placeholder syntax; PostgreSQL receives a single %)
PG_FUNCTION = """
CREATE OR REPLACE FUNCTION dp_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the ledger is append-only: %% of %% refused', TG_OP, TG_TABLE_NAME;
END $$
"""


# The events of a trigger in the order PostgreSQL prints them (pg_get_triggerdef: INSERT,
# DELETE, UPDATE), so that the DDL is also the definition the schema check expects.
def _pg_triggers(tables: Iterable[str] = APPEND_ONLY) -> Iterable[Guard]:
    for tbl in tables:
        yield Guard(tbl, f"{tbl}_append_only",
                    f"CREATE TRIGGER {tbl}_append_only BEFORE DELETE OR UPDATE ON {tbl} "
                    "FOR EACH ROW EXECUTE FUNCTION dp_ledger_append_only()")
        yield Guard(tbl, f"{tbl}_no_truncate",
                    f"CREATE TRIGGER {tbl}_no_truncate BEFORE TRUNCATE ON {tbl} "
                    "FOR EACH STATEMENT EXECUTE FUNCTION dp_ledger_append_only()")


# The migration-version table is written by Alembic when a ledger is created (one INSERT)
# and upgraded (an UPDATE to a later revision, zero-padded so that text order is revision
# order); anything else (a deleted row, a second row, a version set back) is refused.
_VERSION_REFUSED = "the ledger migration version only moves forward: {op} refused"


def _sqlite_version_triggers() -> Iterable[Guard]:
    t = VERSION_TABLE
    for name, event, when, op in (
            (f"{t}_no_delete", "DELETE", "", "DELETE"),
            (f"{t}_forward_only", "UPDATE", "WHEN NEW.version_num <= OLD.version_num ",
             "UPDATE to an earlier or the same revision"),
            (f"{t}_one_row", "INSERT", f"WHEN (SELECT count(*) FROM {t}) > 0 ",
             "INSERT of a second row")):
        message = _VERSION_REFUSED.format(op=op)
        yield Guard(t, name, (f"CREATE TRIGGER IF NOT EXISTS {name} BEFORE {event} ON {t} "
                              f"{when}BEGIN SELECT RAISE(ABORT, '{message}'); END"))


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
# the trigger functions by name (the schema check compares their bodies)
PG_FUNCTIONS = {"dp_ledger_append_only": PG_FUNCTION,
                "dp_ledger_version_guard": PG_VERSION_FUNCTION}


def _pg_version_triggers() -> Iterable[Guard]:
    t = VERSION_TABLE
    yield Guard(t, f"{t}_guard",
                f"CREATE TRIGGER {t}_guard BEFORE INSERT OR DELETE OR UPDATE ON {t} "
                "FOR EACH ROW EXECUTE FUNCTION dp_ledger_version_guard()")
    yield Guard(t, f"{t}_no_truncate",
                f"CREATE TRIGGER {t}_no_truncate BEFORE TRUNCATE ON {t} "
                "FOR EACH STATEMENT EXECUTE FUNCTION dp_ledger_append_only()")


def install_version_guards(conn: Connection) -> None:
    """Guard the migration-version table (idempotent; migration 0002). Needs its owner."""
    if conn.dialect.name == "sqlite":
        for guard in _sqlite_version_triggers():
            conn.exec_driver_sql(guard.ddl)
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql(PG_FUNCTION)
        conn.exec_driver_sql(PG_VERSION_FUNCTION)
        have = _pg_trigger_names(conn)
        for guard in _pg_version_triggers():
            if guard.name not in have:
                conn.exec_driver_sql(guard.ddl)


def _pg_trigger_names(conn: Connection) -> set[str]:
    return set(conn.exec_driver_sql(
        "SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
        "WHERE c.relnamespace = current_schema()::regnamespace").scalars())


def install_guards(conn: Connection) -> None:
    """Create the append-only triggers of every ledger table the database has (idempotent).
    Needs the tables' owner. Tables a later migration adds are left to it: migration 0001
    calls this before they exist, and their migration calls it again once they do
    (:func:`schema_differences` names any table left unguarded)."""
    dialect = conn.dialect.name
    present = set(sa.inspect(conn).get_table_names())
    tables = [tbl for tbl in APPEND_ONLY if tbl in present]
    if dialect == "sqlite":
        for guard in _sqlite_triggers(tables):
            conn.exec_driver_sql(guard.ddl)
    elif dialect == "postgresql":
        conn.exec_driver_sql(PG_FUNCTION)
        have = _pg_trigger_names(conn)
        for guard in _pg_triggers(tables):
            if guard.name not in have:
                conn.exec_driver_sql(guard.ddl)


# -- the whole schema, compared with the one this module creates ----------------------------

# Alembic's version table as Alembic creates it (alembic.runtime.migration), so that the
# schema a ledger must have is built here without running Alembic (which logs its set-up);
# tests/unit/privacy/test_ledger_schema_attacks.py checks that the migrations make exactly it
version_table = sa.Table(
    VERSION_TABLE,
    sa.MetaData(),
    sa.Column("version_num", sa.String(32), nullable=False),
    sa.PrimaryKeyConstraint("version_num", name=f"{VERSION_TABLE}_pkc"),
)

SCHEMA_TAMPERED = ("the ledger's schema is not the one dp_ops creates (a trigger, view, "
                   "index, table, rule or policy was added, changed, disabled or dropped: "
                   "the ledger database has been tampered with)")


def _squeeze(sql: str | None) -> str | None:
    """SQL with every run of white space made one space (the only difference allowed)."""
    return None if sql is None else " ".join(sql.split())


SqliteObjects = dict[tuple[str, str], tuple[str, str | None]]


def _sqlite_objects(conn: Connection) -> SqliteObjects:
    """Every row of ``sqlite_master`` (but the optimiser's statistics tables) as
    (type, name) -> (table, SQL): tables, indexes (an automatic one has no SQL), triggers,
    views."""
    return {(kind, name): (tbl, _squeeze(sql)) for kind, name, tbl, sql in conn.exec_driver_sql(
        "SELECT type, name, tbl_name, sql FROM sqlite_master") if not name.startswith(
            "sqlite_stat")}


@functools.cache
def _sqlite_expected() -> SqliteObjects:
    """What a SQLite ledger at the newest migration holds: the tables of this module, the
    version table and every guard, created here in an empty in-memory database."""
    engine = sa.create_engine("sqlite://")
    try:
        with engine.begin() as conn:
            metadata.create_all(conn)
            version_table.create(conn)
            install_guards(conn)
            install_version_guards(conn)
            return _sqlite_objects(conn)
    finally:
        engine.dispose()


def prepare_expected_schema() -> None:
    """Build once the schema a SQLite ledger must have (what every check compares with);
    no ledger is read. See ``ledger_migrations.prepare_checks``."""
    _sqlite_expected()


def _compared(expected: Mapping[tuple[str, str], Any], have: Mapping[tuple[str, str], Any],
              where: Callable[[tuple[str, str]], str]) -> list[str]:
    out = []
    for key in sorted(set(expected) | set(have)):
        if key not in have:
            out.append(f"{key[0]} {key[1]} is missing")
        elif key not in expected:
            out.append(f"{key[0]} {key[1]}{where(key)} is not one dp_ops creates")
        elif have[key] != expected[key]:
            out.append(f"{key[0]} {key[1]}{where(key)} differs from the one dp_ops creates")
    return out


def _sqlite_differences(conn: Connection) -> list[str]:
    have = _sqlite_objects(conn)
    return _compared(_sqlite_expected(), have, lambda key: f" on {have[key][0]}"
                     if have[key][0] != key[1] else "")


def _pg_function_body(ddl: str) -> str:
    """What PostgreSQL keeps of the function ``ddl`` creates (``prosrc``): the text
    between the dollar quotes, the driver's ``%%`` as ``%``."""
    return ddl.split("$$")[1].replace("%%", "%")


_PG_TABLES = (*APPEND_ONLY, VERSION_TABLE)
_ENABLED = {"D": "disabled", "R": "set to fire on replicas only", "A": "set to fire always"}


def _pg_differences(conn: Connection) -> list[str]:
    tables: sa.BindParameter[list[str]] = sa.bindparam("tables", value=list(_PG_TABLES),
                                                       expanding=True)
    out: list[str] = []
    found = {name: (kind, rls, forced) for name, kind, rls, forced in conn.execute(sa.text(
        "SELECT relname, relkind, relrowsecurity, relforcerowsecurity FROM pg_class "
        "WHERE relnamespace = current_schema()::regnamespace AND relname IN :tables"
    ).bindparams(tables))}
    for tbl in _PG_TABLES:
        if tbl not in found:
            out.append(f"table {tbl} is missing")
            continue
        kind, rls, forced = found[tbl]
        if kind != "r":
            out.append(f"{tbl} is not a plain table (relkind {kind!r})")
        if rls or forced:
            out.append(f"row-level security is enabled on table {tbl}")
    expected = {(g.table, g.name): _squeeze(g.ddl)
                for g in (*_pg_triggers(), *_pg_version_triggers())}
    have: dict[tuple[str, str], str | None] = {}
    functions: dict[str, list[str]] = {}  # a function that differs, and who runs it
    for tbl, name, enabled, definition, function, language, body in conn.execute(sa.text(
            "SELECT c.relname, t.tgname, t.tgenabled, pg_get_triggerdef(t.oid, true), "
            "p.proname, l.lanname, p.prosrc FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid "
            "JOIN pg_language l ON l.oid = p.prolang "
            "WHERE c.relnamespace = current_schema()::regnamespace AND c.relname IN :tables "
            "AND NOT t.tgisinternal ORDER BY c.relname, t.tgname").bindparams(tables)):
        have[(tbl, name)] = _squeeze(definition)
        if (tbl, name) in expected and enabled != "O":
            out.append(f"trigger {name} on {tbl} is {_ENABLED.get(enabled, enabled)}")
        if function in PG_FUNCTIONS and (language != "plpgsql" or _squeeze(body) != _squeeze(
                _pg_function_body(PG_FUNCTIONS[function]))):
            functions.setdefault(function, []).append(name)
    out += [f"function {function} (run by trigger(s) {', '.join(names)}) differs from the "
            "one dp_ops creates" for function, names in sorted(functions.items())]
    on = {n: tbl for tbl, n in have}
    out += _compared({("trigger", n): d for (_, n), d in expected.items()},
                     {("trigger", n): d for (_, n), d in have.items()},
                     lambda key: f" on {on[key[1]]}")
    for what, query in (
            ("rule", "SELECT c.relname, r.rulename FROM pg_rewrite r JOIN pg_class c ON "
                     "c.oid = r.ev_class"),
            ("row-level security policy", "SELECT c.relname, p.polname FROM pg_policy p "
                                          "JOIN pg_class c ON c.oid = p.polrelid")):
        for tbl, name in conn.execute(sa.text(
                f"{query} WHERE c.relnamespace = current_schema()::regnamespace AND "
                "c.relname IN :tables ORDER BY 1, 2").bindparams(tables)):
            out.append(f"{what} {name} on {tbl} is not one dp_ops creates")
    return out


def schema_differences(conn: Connection) -> list[str]:
    """Everything by which the ledger's schema differs from the one this module creates at
    the newest migration, each named (empty when none). SQLite: every trigger, view, index
    and table of the file, by its exact SQL (white space aside). PostgreSQL: the ledger's
    tables, every trigger on them by its definition, its function's body and its enabled
    state, every rule and row-level security policy on them, and whether row-level security
    is on. The triggers of a ledger run inside the pipeline's own transactions: a schema
    this module did not create is code someone else wrote."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        return _sqlite_differences(conn)
    if dialect == "postgresql":
        return _pg_differences(conn)
    return [f"a {dialect} ledger's schema cannot be checked (SQLite and PostgreSQL only)"]


def require_schema(conn: Connection) -> None:
    """:class:`LedgerTampered` unless :func:`schema_differences` finds nothing (every write
    transaction of the ledger calls this under its lock, before it writes)."""
    wrong = schema_differences(conn)
    if wrong:
        raise LedgerTampered(
            f"{SCHEMA_TAMPERED}: {'; '.join(wrong)}. Nothing was written. Restore the "
            "ledger from a backup that `python -m dp_ops ledger --verify` accepts "
            "(OPERATIONS.md, 'The ledger fails verification')")


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
