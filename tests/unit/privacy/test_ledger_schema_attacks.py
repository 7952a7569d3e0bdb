"""Issue 48, route 3: the ledger's schema is code that runs inside the pipeline's own
transactions, and the pipeline MACed the row it read back. An attacker who can write the
ledger (the default SQLite file lives in the data root; on PostgreSQL, the owner role) but
holds no ledger key planted a trigger that rewrote a new ``noise_store`` row (its sha256)
before the chain entry was computed from it, so the forged record verified; guards were
checked by name only, so a same-named guard that never fires, or an extra ``BEFORE
INSERT`` trigger beside the real ones, passed ``ledger --verify``.

Now the chain entry is computed from what the process sent and a row read back otherwise
is refused (the transaction rolled back), and every write and every verification compares
the whole schema with the one dp_ops creates, naming what is extra, missing or different.
Each attack below ends in a refusal with nothing recorded. No test here is statistical.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dp_ops.errors import LedgerTampered
from dp_ops.privacy import ledger_migrations
from dp_ops.privacy.ledger import Ledger
from dp_ops.privacy.ledger_schema import append, verify_chain

GOOD = "a" * 64  # the sha256 the pipeline records
FORGED = "0" * 64  # the one a planted trigger writes instead (of a file of true sums)
TAMPERED = "the ledger database has been tampered with"


def _spend(led: Ledger) -> int:
    """A spend row, appended as the ledger does (without its reservation checks)."""
    with led.engine.begin() as conn:
        return append(conn, "budget_spend", {
            "report": "mobility", "day": "2020-03-01", "level": 1, "metric": "places",
            "region_scope": "*", "generation": 0, "epsilon": 0.5, "kind": "noise",
            "method_version": "v1", "run_id": "daily", "reason": "",
            "created_at": "2026-12-06T00:00:00+00:00"}, led.key())


@pytest.fixture
def led(ledger_url: str) -> Iterator[Ledger]:
    ledger = Ledger(ledger_url)
    try:
        yield ledger
    finally:
        ledger.dispose()


def _plant(url: str, *statements: str) -> None:
    """Run ``statements`` as the attacker (the owner of the file or the tables), committed."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def _stored(url: str) -> list[tuple[int, str]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(
                "SELECT spend_id, sha256 FROM noise_store ORDER BY spend_id")]
    finally:
        engine.dispose()


def _verify_cli(url: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DP_LEDGER_URL": url, "DP_DATA_ROOT": str(root)}
    return subprocess.run([sys.executable, "-m", "dp_ops", "ledger", "--verify"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def _rewriting_trigger(dialect: str, *, guard_name: bool) -> list[str]:
    """A trigger that rewrites a new noise_store row's sha256. SQLite: after the insert,
    with the row's UPDATE guard replaced by a same-named one that never fires
    (``guard_name``: the rewriting trigger itself takes the guard's name). PostgreSQL: an
    owner's BEFORE INSERT trigger that rewrites NEW (no guard in its way)."""
    if dialect == "postgresql":
        return ["CREATE FUNCTION noise_store_audit() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN NEW.sha256 := '{FORGED}'; RETURN NEW; END $$",
                "CREATE TRIGGER noise_store_audit BEFORE INSERT ON noise_store "
                "FOR EACH ROW EXECUTE FUNCTION noise_store_audit()"]
    rewrite = (f"AFTER INSERT ON noise_store BEGIN UPDATE noise_store SET sha256 = "
               f"'{FORGED}' WHERE spend_id = NEW.spend_id; END")
    if guard_name:
        return ["DROP TRIGGER noise_store_no_update",
                f"CREATE TRIGGER noise_store_no_update {rewrite}"]
    return ["DROP TRIGGER noise_store_no_update",
            "CREATE TRIGGER noise_store_no_update BEFORE UPDATE ON noise_store WHEN 0 BEGIN "
            "SELECT RAISE(ABORT, 'the ledger is append-only: UPDATE of noise_store "
            "refused'); END",
            f"CREATE TRIGGER noise_store_audit {rewrite}"]


@pytest.mark.parametrize("guard_name", [False, True], ids=["extra trigger", "guard's name"])
def test_route3_a_trigger_rewriting_a_new_noise_store_row_is_refused(
        led: Ledger, ledger_url: str, guard_name: bool) -> None:
    """The next store of a spend's noise, with a rewriting trigger planted: refused before
    anything is written, naming the trigger; no noise_store row, the chain unchanged."""
    spend = _spend(led)
    head = led.head()
    dialect = led.engine.dialect.name
    _plant(ledger_url, *_rewriting_trigger(dialect, guard_name=guard_name))
    with pytest.raises(LedgerTampered) as err:
        led.record_stored(spend, GOOD, 10)
    named = "noise_store_no_update" if guard_name and dialect == "sqlite" else "noise_store_audit"
    assert f"trigger {named}" in str(err.value) and TAMPERED in str(err.value)
    assert _stored(ledger_url) == [] and led.head() == head
    assert not led.verify().ok


def test_route3_the_row_read_back_must_be_what_was_inserted(led: Ledger,
                                                           ledger_url: str) -> None:
    """Inside a transaction that (unlike every write of the ledger) does not compare the
    schema first: the chain entry is never computed from a rewritten row. The read-back
    differs in sha256, the append is refused naming table and column, and the rolled-back
    transaction leaves no row and no entry."""
    spend = _spend(led)
    head = led.head()
    _plant(ledger_url, *_rewriting_trigger(led.engine.dialect.name, guard_name=False))
    with pytest.raises(LedgerTampered) as err:
        with led.engine.begin() as conn:
            append(conn, "noise_store", {"spend_id": spend, "sha256": GOOD, "cells": 10,
                                         "created_at": "2026-12-06T00:00:01+00:00"},
                   led.key())
    assert str(err.value).startswith(
        f"noise_store row {spend}: column(s) sha256 read back differ from what this process "
        f"inserted: {TAMPERED} (a trigger or rule rewrites or drops what is written). "
        "Nothing was recorded")
    assert _stored(ledger_url) == [] and led.head() == head


def test_route3_a_row_a_trigger_drops_is_refused(tmp_path: Path) -> None:
    """SQLite: a BEFORE INSERT trigger with RAISE(IGNORE) drops the pipeline's row (and
    could insert its own): the append finds no row and is refused."""
    url = f"sqlite:///{tmp_path}/ledger.sqlite"
    ledger = Ledger(url)
    try:
        head = ledger.head()
        _plant(url, "CREATE TRIGGER derived_state_drop BEFORE INSERT ON derived_state "
                    "BEGIN SELECT RAISE(IGNORE); END")
        with pytest.raises(LedgerTampered) as err:
            with ledger.engine.begin() as conn:
                append(conn, "derived_state", {
                    "report": "mobility", "name": "baseline", "sha256": GOOD, "replaces": "",
                    "created_at": "2026-12-06T00:00:01+00:00"}, ledger.key())
        assert str(err.value).startswith(
            f"derived_state: the row inserted is not there when read back: {TAMPERED}")
        assert ledger.head() == head
    finally:
        ledger.dispose()


def test_route3_an_extra_before_insert_trigger_that_swaps_the_row_is_refused(
        tmp_path: Path) -> None:
    """SQLite, every guard in place: a BEFORE INSERT trigger inserts its own noise_store
    row (a forged sha256) and drops the pipeline's with RAISE(IGNORE); no UPDATE, so no
    guard stops it. Verification names it, the store is refused, nothing is recorded."""
    url = f"sqlite:///{tmp_path}/ledger.sqlite"
    ledger = Ledger(url)
    try:
        spend = _spend(ledger)
        head = ledger.head()
        _plant(url, "CREATE TRIGGER noise_store_swap BEFORE INSERT ON noise_store "
                    f"WHEN NEW.sha256 <> '{FORGED}' BEGIN INSERT INTO noise_store VALUES "
                    f"(NEW.spend_id, '{FORGED}', NEW.cells, NEW.created_at); "
                    "SELECT RAISE(IGNORE); END")
        check = ledger.verify()
        assert not check.ok and str(check.problem).endswith(
            "trigger noise_store_swap on noise_store is not one dp_ops creates")
        with pytest.raises(LedgerTampered, match="noise_store_swap"):
            ledger.record_stored(spend, GOOD, 10)
        assert _stored(url) == [] and ledger.head() == head
    finally:
        ledger.dispose()


def _never_firing_guard(dialect: str) -> tuple[list[str], str]:
    """A guard replaced by one of the same name that never fires, and how it is named."""
    if dialect == "sqlite":
        return (["DROP TRIGGER budget_spend_no_delete",
                 "CREATE TRIGGER budget_spend_no_delete BEFORE DELETE ON budget_spend "
                 "WHEN 0 BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: DELETE of "
                 "budget_spend refused'); END"],
                "trigger budget_spend_no_delete on budget_spend differs from the one dp_ops "
                "creates")
    return (["DROP TRIGGER budget_spend_append_only ON budget_spend",
             "CREATE TRIGGER budget_spend_append_only BEFORE INSERT ON budget_spend "
             "FOR EACH ROW WHEN (false) EXECUTE FUNCTION dp_ledger_append_only()"],
            "trigger budget_spend_append_only on budget_spend differs from the one dp_ops "
            "creates")


def test_route3_a_same_named_guard_that_never_fires_is_named(led: Ledger, ledger_url: str,
                                                            tmp_path: Path) -> None:
    """A guard dropped and created again under its own name, never firing: ``--verify``
    and the next write refuse, naming it; the rows can then be deleted, but nothing of
    the refused write is recorded."""
    spend = _spend(led)
    head = led.head()
    statements, named = _never_firing_guard(led.engine.dialect.name)
    _plant(ledger_url, *statements)
    check = led.verify()
    assert not check.ok and named in str(check.problem), check.problem
    cli = _verify_cli(ledger_url, tmp_path / "data")
    assert cli.returncode == 1 and named in cli.stdout, cli.stdout + cli.stderr
    with pytest.raises(LedgerTampered, match=named):
        led.record_stored(spend, GOOD, 10)
    assert _stored(ledger_url) == [] and led.head() == head


_PG_ATTACKS: dict[str, tuple[list[str], list[str]]] = {
    "rewriting trigger": (
        [f"CREATE FUNCTION rewrite() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
         f"NEW.sha256 := '{FORGED}'; RETURN NEW; END $$",
         "CREATE TRIGGER derived_state_rewrite BEFORE INSERT ON derived_state "
         "FOR EACH ROW EXECUTE FUNCTION rewrite()"],
        ["trigger derived_state_rewrite on derived_state is not one dp_ops creates"]),
    "disabled guard": (
        ["ALTER TABLE derived_state DISABLE TRIGGER derived_state_append_only"],
        ["trigger derived_state_append_only on derived_state is disabled"]),
    "guard function": (
        ["CREATE OR REPLACE FUNCTION dp_ledger_version_guard() RETURNS trigger "
         "LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$"],
        ["function dp_ledger_version_guard (run by trigger(s) "
         "ledger_alembic_version_guard) differs from the one dp_ops creates"]),
    "rule": (
        ["CREATE RULE derived_state_drop AS ON INSERT TO derived_state DO INSTEAD NOTHING"],
        ["rule derived_state_drop on derived_state is not one dp_ops creates"]),
    "policy": (
        ["ALTER TABLE budget_spend ENABLE ROW LEVEL SECURITY",
         "CREATE POLICY hide_renoise ON budget_spend FOR SELECT USING (kind <> 'renoise')"],
        ["row-level security is enabled on table budget_spend",
         "row-level security policy hide_renoise on budget_spend is not one dp_ops "
         "creates"]),
}


@pytest.mark.parametrize("attack", sorted(_PG_ATTACKS))
def test_route3_postgresql_owner_objects_are_named_and_refused(
        pg_schema: tuple[str, str], attack: str) -> None:
    """PostgreSQL, as the owner role: a BEFORE INSERT trigger that rewrites NEW, a disabled
    guard, a guard function that no longer refuses, a rule, a row-level security policy.
    The next write is refused, nothing written; verification names exactly what differs."""
    url, _ = pg_schema
    ledger = Ledger(url)
    try:
        head = ledger.head()
        statements, named = _PG_ATTACKS[attack]
        _plant(url, *statements)
        with pytest.raises(LedgerTampered) as err:
            ledger.record_derived("mobility", "baseline", GOOD)
        assert "; ".join(named) in str(err.value)
        assert ledger.head() == head and ledger.derived_versions("mobility", "baseline") == []
        from dp_ops.privacy.ledger_schema import SCHEMA_TAMPERED

        assert ledger.verify().problem == f"{SCHEMA_TAMPERED}: {'; '.join(named)}"
    finally:
        ledger.dispose()


# A ledger written by the code before this change (e84c18e), every chained table, fixed
# values and key: the head its chain had then. Hashing what is sent must give the same
# entries for the same values, or every existing ledger would stop verifying.
_KEY = bytes(range(32))
_ROWS: list[tuple[str, dict[str, object]]] = [
    ("ledger_meta", {"ledger_id": "0f0e0d0c-0000-4000-8000-00000000abcd", "schema_version": 2,
                     "created_at": "2026-12-01T00:00:00+00:00"}),
    ("report_policy", {"report": "mobility", "cap": 2, "terms": '{"epsilon.places":0.44}',
                       "run_id": "r", "reason": "first use",
                       "created_at": "2026-12-01T00:00:01+00:00"}),
    ("budget_spend", {"report": "mobility", "day": "2020-03-01", "level": 1,
                      "metric": "places", "region_scope": "*", "generation": 0,
                      "epsilon": 0.1 + 0.2, "kind": "noise", "method_version": "v1",
                      "run_id": "r", "reason": "", "created_at": "2026-12-01T00:00:02+00:00"}),
    ("noise_store", {"spend_id": 1, "sha256": "a" * 64, "cells": 12,
                     "created_at": "2026-12-01T00:00:03+00:00"}),
    ("derived_state", {"report": "mobility", "name": "baseline", "sha256": "b" * 64,
                       "replaces": "", "created_at": "2026-12-01T00:00:04+00:00"}),
    ("spend_approval", {"run_id": "r2", "report": "mobility", "kind": "renoise",
                        "request_sha256": "c" * 64, "request": "{}", "requester": "ann",
                        "approver": "bob", "via": "cli",
                        "decided_at": "2026-12-01T00:00:05+00:00",
                        "created_at": "2026-12-01T00:00:05+00:00"}),
]
_HEAD_BEFORE = "b1b68d6a1f23fda70048a435f8826551adb389d60376782656891ff06a031893"


def test_entries_are_those_the_previous_code_wrote(ledger_url: str) -> None:
    """The same values give the same chain as before (an int cap, a float sum, a default
    left to the column all hash as the row read back did), on both backends."""
    engine = sa.create_engine(ledger_url)
    try:
        with engine.begin() as conn:
            ledger_migrations.upgrade(conn)
            for tbl, values in _ROWS:
                append(conn, tbl, values, _KEY)
            check = verify_chain(conn, _KEY)
    finally:
        engine.dispose()
    assert (check.entries, check.head, check.problem) == (len(_ROWS), _HEAD_BEFORE, None)


def _objects(build: Callable[[Connection], object]) -> dict[tuple[str, str], object]:
    from dp_ops.privacy.ledger_schema import _sqlite_objects

    engine = sa.create_engine("sqlite://")
    try:
        with engine.begin() as conn:
            build(conn)
            return dict(_sqlite_objects(conn))
    finally:
        engine.dispose()


def test_the_schema_expected_is_what_the_migrations_create() -> None:
    """The expected SQLite schema is built from this code's tables and guards (without
    running Alembic); the migrations to the newest revision make exactly it, table by
    table, trigger by trigger, index by index."""
    from dp_ops.privacy.ledger_schema import _sqlite_expected

    migrated = _objects(ledger_migrations.upgrade)
    assert migrated == _sqlite_expected()
    kinds = {kind for kind, _ in migrated}
    assert kinds == {"table", "index", "trigger"}
    assert sum(kind == "trigger" for kind, _ in migrated) == 2 * 7 + 3
