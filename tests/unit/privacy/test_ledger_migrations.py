"""The ledger's schema under Alembic (dp_ops.privacy.ledger_migrations), on SQLite and
PostgreSQL: an empty database upgraded to head is exactly the models, and a ledger written
before the migrations (today's schema, no version table) is stamped and kept as it was."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from support.spend_requests import spend_request

from dp_ops.privacy import ledger_key, ledger_migrations
from dp_ops.privacy.ledger import Ledger
from dp_ops.privacy.ledger_schema import (
    append,
    install_guards,
    metadata,
    schema_differences,
)


def _diff(conn: sa.Connection) -> list[Any]:
    context = MigrationContext.configure(
        conn, opts={"version_table": ledger_migrations.VERSION_TABLE})
    return list(compare_metadata(context, metadata))


def test_upgrade_from_empty_equals_the_models(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)  # an empty database: every migration runs
    try:
        with ledger.engine.connect() as conn:
            assert ledger_migrations.current(conn) == ledger_migrations.head()
            assert _diff(conn) == []
            assert schema_differences(conn) == []
        assert ledger.verify().ok
    finally:
        ledger.dispose()


def _create_first_tables(conn: sa.Connection) -> None:
    """What `Ledger`'s create_all made before Alembic: the tables of revision 0001 (later
    revisions add tables, e.g. 0003's spend_approval)."""
    metadata.create_all(conn, tables=[metadata.tables[t]
                                      for t in sorted(ledger_migrations.FIRST_TABLES)])


def test_a_ledger_from_before_the_migrations_is_stamped_and_kept(ledger_url: str) -> None:
    """What `Ledger` did before Alembic: create_all, the guards, the first chained row."""
    engine = sa.create_engine(ledger_url)
    with engine.begin() as conn:
        _create_first_tables(conn)
        install_guards(conn)
        append(conn, "ledger_meta", {"ledger_id": "0f0e0d0c-0000-4000-8000-000000000001",
                                     "schema_version": 2, "created_at": "2026-11-01T00:00:00Z"},
               ledger_key.load_key(create=True))
        assert ledger_migrations.current(conn) is None
    engine.dispose()
    ledger = Ledger(ledger_url)
    try:
        assert ledger.ledger_id == "0f0e0d0c-0000-4000-8000-000000000001"
        with ledger.engine.connect() as conn:
            assert ledger_migrations.current(conn) == ledger_migrations.head()
            assert _diff(conn) == []
        check = ledger.verify()
        assert check.ok, check
        assert ledger.head()[0] == 1  # the one chain entry, nothing rewritten
    finally:
        ledger.dispose()


def test_the_migrations_make_todays_schema() -> None:
    """0001 creates the tables of a ledger from before the migrations, 0002 adds triggers
    only, 0003 the approvals (a later change needs a new revision)."""
    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        ledger_migrations.upgrade(conn)
        tables = set(sa.inspect(conn).get_table_names())
    assert tables == set(metadata.tables) | {ledger_migrations.VERSION_TABLE}
    assert tables - ledger_migrations.FIRST_TABLES == {"spend_approval",
                                                        ledger_migrations.VERSION_TABLE}
    assert ledger_migrations.head() == "0003"


def test_a_ledger_at_0002_gets_the_approvals_table_and_its_guards(ledger_url: str) -> None:
    """A ledger written by the previous version (at 0002, with spends) is upgraded to 0003
    in place: spend_approval and its append-only guards appear, the chain is kept."""
    from alembic import command

    engine = sa.create_engine(ledger_url)
    with engine.begin() as conn:
        command.upgrade(ledger_migrations._config(conn), "0002")
        append(conn, "ledger_meta", {"ledger_id": "0f0e0d0c-0000-4000-8000-000000000003",
                                     "schema_version": 2, "created_at": "2026-12-05T00:00:00Z"},
               ledger_key.load_key(create=True))
        assert "spend_approval" not in sa.inspect(conn).get_table_names()
    engine.dispose()
    ledger = Ledger(ledger_url)
    try:
        with ledger.engine.connect() as conn:
            assert ledger_migrations.current(conn) == "0003"
            assert _diff(conn) == [] and schema_differences(conn) == []
        assert ledger.verify().ok and ledger.head()[0] == 1
    finally:
        ledger.dispose()


def test_migrations_never_go_backwards() -> None:
    from alembic import command

    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        ledger_migrations.upgrade(conn)
        with pytest.raises(NotImplementedError, match="append-only"):
            command.downgrade(ledger_migrations._config(conn), "base")


def test_the_pipeline_role_waits_for_the_owners_migration(pg_schema: tuple[str, str],
                                                         app_url: str) -> None:
    """A ledger from before the migrations, opened by the pipeline's role (which may not
    change the schema): refused, naming the migration and `ledger init`; the owner's
    `Ledger` migrates it, and then the pipeline's role reads it."""
    from dp_ops.errors import LedgerSchemaError
    from dp_ops.privacy.ledger_schema import grant_pipeline_role

    owner_url, _ = pg_schema
    engine = sa.create_engine(owner_url)
    with engine.begin() as conn:
        _create_first_tables(conn)
        install_guards(conn)
        append(conn, "ledger_meta", {"ledger_id": "0f0e0d0c-0000-4000-8000-000000000002",
                                     "schema_version": 2, "created_at": "2026-11-01T00:00:00Z"},
               ledger_key.load_key(create=True))
        role = sa.make_url(app_url).username
        conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA "{pg_schema[1]}" TO "{role}"')
        for tbl in ledger_migrations.FIRST_TABLES:
            conn.exec_driver_sql(f'GRANT SELECT, INSERT ON {tbl} TO "{role}"')
    engine.dispose()
    with pytest.raises(LedgerSchemaError,
                       match=r"is at schema migration none \(written before them\), this "
                             r"version needs 0003.*ledger init"):
        Ledger(app_url)
    owner = Ledger(owner_url)
    with owner.engine.begin() as conn:
        grant_pipeline_role(conn, str(role))
    owner.dispose()
    app = Ledger(app_url)
    try:
        assert app.ledger_id == "0f0e0d0c-0000-4000-8000-000000000002" and app.verify().ok
    finally:
        app.dispose()


def test_roles_are_refused_on_sqlite(tmp_path: Any) -> None:
    from dp_ops.privacy.ledger_schema import grant_pipeline_role

    engine = sa.create_engine(f"sqlite:///{tmp_path}/x.sqlite")
    try:
        with engine.connect() as conn, pytest.raises(ValueError) as err:
            grant_pipeline_role(conn, "pipeline")
    finally:
        engine.dispose()
    assert str(err.value) == "roles are a PostgreSQL matter; SQLite has none"


def still_running_under_the_write_lock(url: str, work: Callable[[], None], *,
                                       wait_s: float) -> bool:
    """Start ``work`` in a thread while another connection holds the ledger's write lock
    (SQLite's BEGIN IMMEDIATE, PostgreSQL's advisory lock), release the lock after
    ``wait_s`` and let ``work`` finish: whether it was still running (waiting) then."""
    import threading

    from dp_ops.privacy import ledger as ledger_module

    holder = sa.create_engine(url)
    try:
        with holder.connect() as conn:
            if url.startswith("sqlite"):
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                conn.execute(sa.text("BEGIN"))
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"),
                             {"k": ledger_module._PG_LOCK_KEY})
            worker = threading.Thread(target=work, daemon=True)
            worker.start()
            worker.join(timeout=wait_s)
            running = worker.is_alive()
            conn.exec_driver_sql("ROLLBACK")
        worker.join(timeout=150)
    finally:
        holder.dispose()
    return running


def test_opening_an_up_to_date_ledger_takes_no_write_lock(ledger_url: str) -> None:
    """A task that opens the ledger while another holds its write lock (a long reserve)
    does not queue behind it: the schema check of an up-to-date ledger only reads."""
    Ledger(ledger_url).dispose()  # created and migrated
    opened: list[str] = []

    def open_ledger() -> None:
        led = Ledger(ledger_url)
        opened.append(led.ledger_id)
        led.dispose()

    blocked = still_running_under_the_write_lock(ledger_url, open_ledger, wait_s=20)
    assert not blocked, "opening the ledger waited for the write lock"
    assert len(opened) == 1


def test_a_write_waits_for_the_write_lock(ledger_url: str) -> None:
    """Writers are serialised: a reserve started while another connection holds the write
    lock (SQLite's BEGIN IMMEDIATE, PostgreSQL's advisory lock) waits for it, then spends."""
    from datetime import date

    from dp_ops.privacy.ledger import Slot

    led = Ledger(ledger_url)
    done: list[int] = []

    def spend() -> None:
        res = led.reserve([spend_request(Slot("mobility", date(2020, 3, 1), 1, "places"), 0.1)],
                          run_id="r", kind="noise", cap=2.0, method_version="v1")
        done.append(len(res.spends))

    try:
        waited = still_running_under_the_write_lock(ledger_url, spend, wait_s=1.0)
    finally:
        led.dispose()
    assert waited, "the reserve did not wait for the write lock"
    assert done == [1]


def test_a_ledger_from_before_the_hash_chain_is_refused(tmp_path: Any) -> None:
    from dp_ops.errors import LedgerSchemaError

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE budget_spend (id INTEGER PRIMARY KEY)")
    engine.dispose()
    with pytest.raises(LedgerSchemaError) as err:
        Ledger(url)
    assert str(err.value) == (
        f"the ledger at {url} was written by a version without the hash chain and cannot "
        "be verified; keep it for the record and start a new ledger with a new data root")
