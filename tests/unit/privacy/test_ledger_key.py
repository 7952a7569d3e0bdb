"""The ledger key (dp_ops.privacy.ledger_key; issue 31): the chain's links are MACs under a
key that is neither in the data root nor in the database, so a process without it can
neither write a link nor pass a rewritten chain off as intact. On SQLite and PostgreSQL.
No test here is statistical."""

from __future__ import annotations

import stat
from datetime import date
from pathlib import Path

import pytest
import sqlalchemy as sa
from support.spend_requests import spend_request

from dp_ops.errors import LedgerKeyMissing
from dp_ops.privacy import ledger_key
from dp_ops.privacy.ledger import Ledger, Slot
from dp_ops.privacy.ledger_schema import VERSION_TABLE

OTHER = "ab" * 32


def _spend(led: Ledger) -> None:
    led.reserve([spend_request(Slot("mobility", date(2020, 3, 1), 1, "places"), 0.1)],
                run_id="r", kind="noise", cap=2.0, method_version="v1")


def test_a_process_with_another_key_is_refused_before_writing(
        ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    led = Ledger(ledger_url)
    _spend(led)
    head = led.head()
    led.dispose()
    monkeypatch.setenv(ledger_key.KEY_ENV, OTHER)
    other = Ledger(ledger_url)
    try:
        with pytest.raises(LedgerKeyMissing, match="does not verify under this process's "
                                                   "ledger key"):
            _spend(other)
        check = other.verify()
        assert not check.ok and "chain entry 1" in str(check.problem)
        assert other.head() == head  # nothing was written
    finally:
        other.dispose()


def test_no_key_anywhere_is_refused_and_named(ledger_url: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    Ledger(ledger_url).dispose()  # created with the session's key
    monkeypatch.setenv(ledger_key.KEY_FILE_ENV, str(tmp_path / "nowhere" / "ledger.key"))
    led = Ledger(ledger_url)
    try:
        with pytest.raises(LedgerKeyMissing, match="no ledger key: neither DP_LEDGER_KEY nor "
                                                   "the key file"):
            _spend(led)
    finally:
        led.dispose()
    assert not (tmp_path / "nowhere").exists()  # never made up for an existing ledger


def test_a_new_ledger_makes_its_key_file_private(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "config" / "ledger.key"
    monkeypatch.setenv(ledger_key.KEY_FILE_ENV, str(key_file))
    led = Ledger(f"sqlite:///{tmp_path / 'new.sqlite'}")
    try:
        _spend(led)
        assert led.verify().ok
    finally:
        led.dispose()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(ledger_key.parse_key(key_file.read_text(), source="test")) == 32


@pytest.mark.parametrize("text, message", [("zz" * 32, "must be hex digits"),
                                           ("ab" * 8, "has 8 bytes; at least 32")])
def test_a_malformed_key_is_named_without_its_value(text: str, message: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ledger_key.KEY_ENV, text)
    with pytest.raises(LedgerKeyMissing, match=message) as err:
        ledger_key.load_key()
    assert text not in str(err.value) and "DP_LEDGER_KEY" in str(err.value)


def test_the_host_provider_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    key = bytes(range(32))
    ledger_key.use_provider(lambda: key)
    try:
        monkeypatch.setenv(ledger_key.KEY_ENV, OTHER)
        assert ledger_key.load_key() == key
    finally:
        ledger_key.use_provider(None)
    assert ledger_key.load_key() == bytes.fromhex(OTHER)


def test_row14_the_migration_version_row_is_guarded(ledger_url: str) -> None:
    """Issue 31, attack 14: deleting the ``ledger_alembic_version`` row was accepted (the
    one ledger table without a guard). Now the database refuses deleting it, a second row,
    and setting the version back; an upgrade to a later revision stays possible."""
    Ledger(ledger_url).dispose()
    engine = sa.create_engine(ledger_url)
    try:
        for statement in (f"DELETE FROM {VERSION_TABLE}",
                          f"UPDATE {VERSION_TABLE} SET version_num = '0001'",
                          f"INSERT INTO {VERSION_TABLE} (version_num) VALUES ('0003')"):
            with pytest.raises(sa.exc.DBAPIError, match="only moves forward"):
                with engine.begin() as conn:
                    conn.exec_driver_sql(statement)
        with engine.connect() as conn:  # what a future migration's upgrade does: allowed
            with conn.begin() as tx:
                conn.exec_driver_sql(f"UPDATE {VERSION_TABLE} SET version_num = '0099'")
                assert conn.exec_driver_sql(
                    f"SELECT version_num FROM {VERSION_TABLE}").scalar_one() == "0099"
                tx.rollback()  # (this test's ledger stays at the real head)
    finally:
        engine.dispose()
    led = Ledger(ledger_url)
    try:
        assert led.verify().ok
    finally:
        led.dispose()



@pytest.mark.parametrize("link", ["own key", "plain sha256"])
def test_rows_deleted_and_the_chain_recomputed_without_the_key_fail_verification(
        ledger_url: str, link: str) -> None:
    """Issue 31, attacks 4-6 at the ledger's level, on SQLite and PostgreSQL: the owner
    drops (disables) the guards, deletes a re-noise's rows, recomputes every link (with a
    key of their own, or as plain sha256 links) and restores the guards. The chain looks
    whole, but its links are not MACs under the ledger key: verification fails, and the
    next write is refused before anything is written."""
    from support.approvals import reserve_approved
    from support.ledger_attacks import own_key_link, plain_link, recompute_chain

    from dp_ops.privacy.ledger_schema import APPEND_ONLY, install_guards

    led = Ledger(ledger_url)
    _spend(led)
    (renoise,) = reserve_approved(
        led, [spend_request(Slot("mobility", date(2020, 3, 1), 1, "places", "R1"), 0.1)],
        run_id="oncall", kind="renoise", cap=2.0, method_version="v1", reason="fix").spends
    led.record_stored(renoise.id, "f" * 64, 1)
    led.dispose()
    engine = sa.create_engine(ledger_url)
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "sqlite":
                for name in conn.exec_driver_sql(
                        "SELECT name FROM sqlite_master WHERE type = 'trigger'").scalars().all():
                    conn.exec_driver_sql(f"DROP TRIGGER {name}")
            else:
                for tbl in APPEND_ONLY:
                    conn.exec_driver_sql(f"ALTER TABLE {tbl} DISABLE TRIGGER USER")
            conn.exec_driver_sql(f"DELETE FROM noise_store WHERE spend_id = {renoise.id}")
            conn.exec_driver_sql(f"DELETE FROM budget_spend WHERE id = {renoise.id}")
            recompute_chain(conn, own_key_link() if link == "own key" else plain_link)
            if conn.dialect.name == "sqlite":
                install_guards(conn)
                from dp_ops.privacy.ledger_schema import install_version_guards

                install_version_guards(conn)
            else:
                for tbl in APPEND_ONLY:
                    conn.exec_driver_sql(f"ALTER TABLE {tbl} ENABLE TRIGGER USER")
    finally:
        engine.dispose()
    led = Ledger(ledger_url)
    try:
        check = led.verify()
        assert not check.ok and "chain entry 1" in str(check.problem)
        head = led.head()
        with pytest.raises(LedgerKeyMissing, match="does not verify"):
            reserve_approved(
                led, [spend_request(Slot("mobility", date(2020, 3, 1), 1, "places", "R1"),
                                   0.1)], run_id="oncall-2", kind="renoise", cap=2.0,
                method_version="v1", reason="again")
        assert led.head() == head
    finally:
        led.dispose()


def test_the_wrong_key_message_names_the_ledger_the_key_and_what_to_read(
        ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    led = Ledger(ledger_url)
    _spend(led)
    led.dispose()
    monkeypatch.setenv(ledger_key.KEY_ENV, OTHER)
    other = Ledger(ledger_url)
    try:
        with pytest.raises(LedgerKeyMissing) as err:
            other.key()
        assert str(err.value) == (
            f"ledger {other.ledger_id}: its first chain link does not verify under this "
            "process's ledger key (id 81ffde9df020e500): the key is not the one the ledger "
            "was created with, the ledger was written before links were keyed, or its first "
            "entry was rewritten. Nothing was written (OPERATIONS.md, 'The ledger key')")
    finally:
        other.dispose()


def test_a_process_keeps_the_key_it_checked(ledger_url: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is loaded and checked once; a key file replaced while the process runs does
    not change what it signs with. The ledger is opened afresh, as a task opens an existing
    one: its key is loaded on first use (a new ledger holds the key it was made with)."""
    made = Ledger(ledger_url)
    _spend(made)
    made.dispose()
    led = Ledger(ledger_url)
    try:
        key = led.key()
        monkeypatch.setenv(ledger_key.KEY_ENV, OTHER)
        assert led.key() == key
        led.reserve([spend_request(Slot("mobility", date(2020, 3, 2), 1, "places"), 0.1)],
                    run_id="r", kind="noise", cap=2.0, method_version="v1")
        assert led.verify().ok
    finally:
        led.dispose()


def test_sqlite_ledgers_wait_two_minutes_for_a_lock_on_reads_and_writes(
        tmp_path: Path) -> None:
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        for engine in (led.engine, led.read_engine):
            with engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 120000
    finally:
        led.dispose()


def test_a_postgresql_ledger_survives_its_connections_being_dropped(ledger_url: str) -> None:
    """A server restart or an idle timeout drops pooled connections: the next read and
    write reconnect instead of failing (pre-ping)."""
    if not ledger_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only")
    import sqlalchemy as sa

    led = Ledger(ledger_url)
    admin = sa.create_engine(ledger_url)
    try:
        _spend(led)
        assert len(led.spends()) == 1
        pids = []
        for engine in (led.engine, led.read_engine):  # each pool's idle connection
            with engine.connect() as conn:
                pids.append(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar())
        with admin.connect() as conn:
            for pid in pids:
                assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"),
                                    {"p": pid}).scalar()
        assert len(led.spends()) == 1
        led.reserve([spend_request(Slot("mobility", date(2020, 3, 2), 1, "places"), 0.1)],
                    run_id="r", kind="noise", cap=2.0, method_version="v1")
        assert len(led.spends()) == 2
    finally:
        admin.dispose()
        led.dispose()


def test_each_new_ledger_gets_its_own_uuid(tmp_path: Path) -> None:
    """The ledger id names the ledger in every message and in the data root's binding: a
    new ledger draws a fresh UUID, and reopening it reads that id back."""
    import uuid

    ids = []
    for name in ("a", "b"):
        led = Ledger(f"sqlite:///{tmp_path / name}.db")
        ids.append(led.ledger_id)
        led.dispose()
    assert ids[0] != ids[1]
    assert all(str(uuid.UUID(i)) == i and uuid.UUID(i).version == 4 for i in ids)
    again = Ledger(f"sqlite:///{tmp_path / 'a'}.db")
    try:
        assert again.ledger_id == ids[0]
    finally:
        again.dispose()
