"""The ledger guards itself (issue 14, findings 4 and 5), on SQLite and on PostgreSQL:

- the database refuses UPDATE and DELETE (SQLite triggers; on PostgreSQL a trigger, and
  the pipeline's role has SELECT and INSERT only);
- every single-row edit or deletion, of any table, chain included, fails verification,
  naming the row; `python -m dp_ops ledger --verify` exits 1 then, 0 on an intact ledger;
- ids are never reused;
- the cap and epsilons are recorded at first use; a process configured otherwise is
  refused, and changing them is an explicit, recorded command that can never leave a date
  over its cap.

No test here is statistical.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection
from support.approvals import reserve_approved
from support.spend_requests import spend_request

from dp_ops.errors import BadRequest, BudgetExceeded, LedgerSchemaError, PolicyMismatch
from dp_ops.privacy.ledger import ALL_REGIONS, Ledger, Slot, _make_engine
from dp_ops.privacy.ledger_schema import (
    APPEND_ONLY,
    CHAINED,
    grant_pipeline_role,
    install_guards,
    verify_chain,
)

DAY = date(2020, 3, 1)
CAP = 2.0
TERMS = {"epsilon.places": 0.5, "epsilon.workplaces": 0.25, "method_update_fraction": 0.1}
# a policy that names no metric group: the budgets of its spends are not compared
NO_GROUPS = {"method_update_fraction": 0.1}


def slot(metric: str, *, day: date = DAY, region: str = ALL_REGIONS) -> Slot:
    return Slot("mobility", day, 1, metric, region)


def populate(led: Ledger) -> None:
    """A little of everything the pipeline writes: noise, an approved re-noise,
    stored-noise records, derived-state versions and a policy change."""
    res = led.reserve([spend_request(slot("places"), 0.5),
                       spend_request(slot("workplaces"), 0.25)],
                      run_id="daily", kind="noise", cap=CAP, method_version="v1", terms=TERMS)
    for s in res.spends:
        led.record_stored(s.id, f"{s.id:064x}", 10)
    (again,) = reserve_approved(led, [spend_request(slot("places", region="R1"), 0.5)],
                                run_id="oncall", kind="renoise", cap=CAP,
                                method_version="v1", reason="fix", terms=TERMS).spends
    led.record_stored(again.id, "f" * 64, 1)
    led.record_derived("mobility", "baseline", "a" * 64)
    led.record_derived("symptoms", "scaling_factors", "b" * 64)
    led.record_derived("symptoms", "scaling_factors", "c" * 64, replaces="b" * 64)
    led.set_policy("mobility", cap=2.5, reason="room for a method update", run_id="cli")


@pytest.fixture
def used(ledger_url: str) -> Iterator[Ledger]:
    led = Ledger(ledger_url)
    populate(led)
    yield led
    led.dispose()


def _drop_guard(conn: Connection, tbl: str) -> None:
    """Inside a transaction that is rolled back: what an owner could do before tampering."""
    if conn.dialect.name == "sqlite":
        for op in ("update", "delete"):
            conn.exec_driver_sql(f"DROP TRIGGER {tbl}_no_{op}")
    else:
        conn.exec_driver_sql(f"ALTER TABLE {tbl} DISABLE TRIGGER USER")


def _restore_guard(conn: Connection, tbl: str) -> None:
    """Put back what :func:`_drop_guard` took away (the schema is as created again)."""
    if conn.dialect.name == "sqlite":
        install_guards(conn)
    else:
        conn.exec_driver_sql(f"ALTER TABLE {tbl} ENABLE TRIGGER USER")


def _key(tbl: str) -> str:
    return "seq" if tbl == "ledger_chain" else CHAINED[tbl][1]


def _changed(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value + 1000
    if isinstance(value, float):
        return value * 0.5
    return str(value)[:-1] + ("x" if not str(value).endswith("x") else "y")


def test_a_used_ledger_verifies(used: Ledger) -> None:
    check = used.verify()
    assert check.ok, check.problem
    tables = sum(1 for _ in CHAINED)
    assert check.entries >= tables  # every table has rows in it


@pytest.mark.parametrize("tbl", APPEND_ONLY)
def test_the_database_refuses_update_and_delete(used: Ledger, ledger_url: str, tbl: str) -> None:
    """Finding 4: rows could be deleted and edited. Now the database aborts both, even
    for the owner role (the guard is a trigger, not a convention of the code)."""
    engine = _make_engine(ledger_url)
    try:
        key = _key(tbl)
        for statement in (f"UPDATE {tbl} SET {key} = {key}", f"DELETE FROM {tbl}"):
            with pytest.raises(sa.exc.DBAPIError, match="append-only"):
                with engine.begin() as conn:
                    conn.exec_driver_sql(statement)
    finally:
        engine.dispose()
    assert used.verify().ok


def test_the_database_refuses_a_second_spend_of_a_slot_generation(ledger_url: str) -> None:
    """UNIQUE (report, day, level, metric, region_scope, generation) of budget_spend: a copy
    of a spend's row (a new id, the same slot and generation) inserted behind the ledger's
    back is refused by the database itself, not only kept out by the ledger's write lock
    (which keeps every test through the API green without the constraint). The same row one
    generation on is accepted: the refusal is the constraint's, not the guards' (they refuse
    UPDATE and DELETE only) nor another column's."""
    led = Ledger(ledger_url)
    try:
        led.reserve([spend_request(slot("places"), 0.5)], run_id="daily", kind="noise", cap=CAP,
                    method_version="v1", terms=TERMS)
    finally:
        led.dispose()
    engine = _make_engine(ledger_url)
    try:
        with engine.connect() as conn:
            (row,) = [dict(r._mapping) for r in conn.exec_driver_sql("SELECT * FROM budget_spend")]
        copy = {col: value for col, value in row.items() if col != "id"}
        insert = sa.text(f"INSERT INTO budget_spend ({', '.join(copy)}) "
                         f"VALUES ({', '.join(':' + col for col in copy)})")
        with engine.connect() as conn:  # rolled back when it closes
            conn.execute(insert, {**copy, "generation": row["generation"] + 1})
        refused = (r"UNIQUE constraint failed: budget_spend\.report, budget_spend\.day, "
                   r"budget_spend\.level, budget_spend\.metric, budget_spend\.region_scope, "
                   r"budget_spend\.generation"  # SQLite
                   r'|duplicate key value violates unique constraint '
                   r'"uq_budget_spend_slot_generation"')  # PostgreSQL
        with pytest.raises(sa.exc.IntegrityError, match=refused):
            with engine.begin() as conn:
                conn.execute(insert, copy)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM budget_spend").scalar_one() == 1
    finally:
        engine.dispose()


def test_every_single_row_edit_or_deletion_fails_verification(used: Ledger,
                                                              ledger_url: str) -> None:
    """Any one row of any table changed in any one column, or deleted: verification fails
    and names a chain entry or row. Each tamper happens in a transaction (guards dropped
    first, as an owner could) that is rolled back, so they are tried one at a time."""
    engine = _make_engine(ledger_url)
    tried = caught = 0
    try:
        with engine.connect() as conn:
            rows = {tbl: [dict(r._mapping) for r in conn.exec_driver_sql(f"SELECT * FROM {tbl}")]
                    for tbl in APPEND_ONLY}
        for tbl, table_rows in rows.items():
            key = _key(tbl)
            for row in table_rows:
                edits: list[tuple[str, dict[str, Any]]] = [
                    (f"UPDATE {tbl} SET {col} = :v WHERE {key} = :k",
                     {"v": _changed(value), "k": row[key]})
                    for col, value in row.items()]
                edits.append((f"DELETE FROM {tbl} WHERE {key} = :k", {"k": row[key]}))
                for statement, params in edits:
                    with engine.connect() as conn:
                        trans = conn.begin()
                        try:
                            _drop_guard(conn, tbl)
                            try:
                                conn.execute(sa.text(statement), params)
                            except sa.exc.IntegrityError as exc:
                                assert "append-only" not in str(exc)
                                continue  # the database itself refuses this edit (a key)
                            tried += 1
                            check = verify_chain(conn, used.key())
                            assert not check.ok, f"{statement} {params} went unnoticed"
                            assert check.problem
                            caught += 1
                        finally:
                            trans.rollback()
    finally:
        engine.dispose()
    assert tried == caught and tried > 60
    assert used.verify().ok  # every tamper was rolled back


def _verify_cli(ledger_url: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DP_LEDGER_URL": ledger_url, "DP_DATA_ROOT": str(root)}
    return subprocess.run([sys.executable, "-m", "dp_ops", "ledger", "--verify"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("tamper", ["edit", "delete"])
def test_ledger_verify_cli_names_the_first_bad_row(used: Ledger, ledger_url: str,
                                                   tmp_path: Path, tamper: str) -> None:
    ok = _verify_cli(ledger_url, tmp_path / "data")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "OK" in ok.stdout and used.ledger_id in ok.stdout
    spend = used.spends("mobility")[1]
    engine = _make_engine(ledger_url)
    try:
        with engine.begin() as conn:  # committed, as a tamperer with the owner's rights
            _drop_guard(conn, "budget_spend" if tamper == "edit" else "noise_store")
            if tamper == "edit":
                conn.execute(sa.text("UPDATE budget_spend SET epsilon = 0.0001 WHERE id = :i"),
                             {"i": spend.id})
            else:
                conn.execute(sa.text("DELETE FROM noise_store WHERE spend_id = :i"),
                             {"i": spend.id})
    finally:
        engine.dispose()
    bad = _verify_cli(ledger_url, tmp_path / "data")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    where = f"budget_spend {spend.id}" if tamper == "edit" else f"noise_store {spend.id}"
    assert where in bad.stdout
    assert ("edited" if tamper == "edit" else "deleted") in bad.stdout


def test_ids_are_never_reused(used: Ledger, ledger_url: str) -> None:
    """Finding 4: SQLite reused the id of a deleted spend, so a new re-noise served the
    deleted one's noise file. Ids now come from AUTOINCREMENT (SQLite) or a sequence."""
    last = used.spends()[-1].id
    engine = _make_engine(ledger_url)
    try:
        with engine.begin() as conn:
            _drop_guard(conn, "budget_spend")
            _drop_guard(conn, "noise_store")
            conn.execute(sa.text("DELETE FROM noise_store WHERE spend_id = :i"), {"i": last})
            conn.execute(sa.text("DELETE FROM budget_spend WHERE id = :i"), {"i": last})
            # (a ledger with a guard missing takes no write at all)
            _restore_guard(conn, "budget_spend")
            _restore_guard(conn, "noise_store")
    finally:
        engine.dispose()
    res = reserve_approved(used, [spend_request(slot("places", region="R2"), 0.5)],
                           run_id="oncall-2", kind="renoise", cap=2.5, method_version="v1",
                           reason="again", terms=TERMS)
    assert min(res.new_ids) > last
    assert not used.verify().ok  # and the deletion itself is on record


# -- the pipeline's role on PostgreSQL ---------------------------------------------------------


def test_the_pipeline_role_reads_and_appends_only(pg_schema: tuple[str, str],
                                                 app_url: str) -> None:
    """Finding 4: the ledger role could DELETE. Granted as docs/deploy.md says (SELECT and
    INSERT), it can spend and record, and UPDATE, DELETE, TRUNCATE and DDL all fail."""
    owner_url, _ = pg_schema
    role = sa.make_url(app_url).username
    assert role
    # without the owner's `ledger init`, the pipeline role cannot create the schema
    with pytest.raises(LedgerSchemaError, match="ledger init"):
        Ledger(app_url)
    owner = Ledger(owner_url)
    with owner.engine.begin() as conn:
        grant_pipeline_role(conn, role)
    owner.dispose()
    app = Ledger(app_url)
    try:
        populate(app)
        assert app.verify().ok
        engine = sa.create_engine(app_url)
        try:
            for statement in ("UPDATE budget_spend SET epsilon = 0.0001",
                              "DELETE FROM budget_spend", "DELETE FROM ledger_chain",
                              "TRUNCATE noise_store",
                              "ALTER TABLE budget_spend DISABLE TRIGGER USER",
                              "DROP TRIGGER budget_spend_append_only ON budget_spend"):
                with pytest.raises(sa.exc.ProgrammingError,
                                   match="permission denied|must be owner"):
                    with engine.begin() as conn:
                        conn.exec_driver_sql(statement)
        finally:
            engine.dispose()
        assert app.verify().ok
    finally:
        app.dispose()


def _no_ddl_message(url: str, state: str) -> str:
    return (f"the ledger at {sa.make_url(url).render_as_string(hide_password=True)} {state} "
            "and this role may not create or change its schema: run `python -m dp_ops ledger "
            "init` as the ledger's owner role (the compose stack's airflow-init does at every "
            "start; docs/deploy.md)")


def test_a_role_that_may_not_create_the_schema_is_told_what_to_run(
        pg_schema: tuple[str, str], app_url: str) -> None:
    """An empty schema, and a ledger at an older migration, opened by the pipeline's role
    (no DDL): refused with the state it found and the command for the owner."""
    from alembic import command

    from dp_ops.privacy import ledger_migrations

    with pytest.raises(LedgerSchemaError) as empty:
        Ledger(app_url)
    assert str(empty.value) == _no_ddl_message(app_url, "has no schema")
    owner_url, _ = pg_schema
    role = sa.make_url(app_url).username
    engine = sa.create_engine(owner_url)
    try:
        with engine.begin() as conn:  # the first migration only, granted as deploy.md says
            command.upgrade(ledger_migrations._config(conn), "0001")
            ident = conn.dialect.identifier_preparer.quote(str(role))
            conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA {pg_schema[1]} TO {ident}")
            conn.exec_driver_sql(f"GRANT SELECT ON ALL TABLES IN SCHEMA {pg_schema[1]} "
                                 f"TO {ident}")
    finally:
        engine.dispose()
    with pytest.raises(LedgerSchemaError) as old:
        Ledger(app_url)
    assert str(old.value) == _no_ddl_message(
        app_url, f"is at schema migration 0001, this version needs "
                 f"{ledger_migrations.head()},")


def test_an_upgrade_failing_for_another_reason_is_not_called_a_permission_problem(
        ledger_url: str) -> None:
    """Only "permission denied" (or no schema selected) becomes the ledger-init message;
    any other database error of the upgrade (here a table in the way) is raised as it is."""
    if not ledger_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only: SQLite reports a table in the way as another error")
    engine = sa.create_engine(ledger_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE noise_store (x integer)")
    finally:
        engine.dispose()
    with pytest.raises(sa.exc.ProgrammingError, match="already exists"):
        Ledger(ledger_url)


# -- the recorded policy (finding 5) -------------------------------------------------------------


def _noise(led: Ledger, metric: str, eps: float, *, cap: float = CAP,
           terms: dict[str, float] | None = None, day: date = DAY) -> None:
    led.reserve([spend_request(slot(metric, day=day), eps)], run_id="r", kind="noise", cap=cap,
                method_version="v1", terms=TERMS if terms is None else terms)


def test_the_first_spend_records_the_policy_and_a_different_one_is_refused(
        ledger_url: str) -> None:
    """Finding 5: `cap_override: 100` spent past the cap. Now the first spend records cap
    and terms; another configured cap or epsilon is refused before anything is written,
    and the message says what differs."""
    led = Ledger(ledger_url)
    try:
        _noise(led, "places", 0.5)
        policy = led.policy("mobility")
        assert policy is not None and policy.cap == CAP and policy.terms == TERMS
        before = led.spends()
        with pytest.raises(PolicyMismatch, match=r"cap: recorded 2\.0, configured 100"):
            _noise(led, "workplaces", 0.5, cap=100.0)
        with pytest.raises(PolicyMismatch, match=r"epsilon\.places: recorded 0\.5, configured 5"):
            _noise(led, "workplaces", 0.5, terms={**TERMS, "epsilon.places": 5.0})
        assert led.spends() == before
        # other reports have a policy of their own
        led.reserve([spend_request(Slot("symptoms", DAY, 1, "a"), 0.5)], run_id="r",
                    kind="noise", cap=9.0, method_version="v1")
    finally:
        led.dispose()


def test_set_policy_is_explicit_recorded_and_never_leaves_a_date_over_the_cap(
        ledger_url: str) -> None:
    led = Ledger(ledger_url)
    try:
        _noise(led, "places", 1.5, terms=NO_GROUPS)
        with pytest.raises(BadRequest, match="reason"):
            led.set_policy("mobility", cap=3.0, reason=" ", run_id="cli")
        with pytest.raises(BudgetExceeded, match=r"already spent 1\.5"):
            led.set_policy("mobility", cap=1.0, reason="lower", run_id="cli")
        with pytest.raises(BadRequest, match="not a term"):
            led.set_policy("mobility", terms={"epsilon.nope": 1.0}, reason="x", run_id="cli")
        led.set_policy("mobility", cap=3.0, reason="room for a re-noise", run_id="cli")
        with pytest.raises(PolicyMismatch):  # the old configuration no longer matches
            _noise(led, "workplaces", 0.5, terms=NO_GROUPS)
        _noise(led, "workplaces", 1.5, cap=3.0, terms=NO_GROUPS)  # the new one does
        with pytest.raises(BudgetExceeded):  # and the cap is 3.0
            _noise(led, "parks", 0.01, cap=3.0, terms=NO_GROUPS)
        history = led.policies()
        assert [p.cap for p in history] == [CAP, 3.0]
        assert history[-1].reason == "room for a re-noise"
        assert led.verify().ok
    finally:
        led.dispose()


def test_set_cap_cli_records_with_a_reason(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    led = Ledger(url)
    _noise(led, "places", 0.5)
    led.dispose()
    env = {**os.environ, "DP_LEDGER_URL": url, "DP_DATA_ROOT": str(tmp_path / "data")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dp_ops", "ledger", *args], env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    assert cli("set-cap", "mobility", "3").returncode == 2  # --reason is required
    done = cli("set-cap", "mobility", "3", "--reason", "one more re-noise a day")
    assert done.returncode == 0, done.stderr
    assert "cap: recorded 2.0, now 3.0" in done.stdout
    shown = cli("policy")
    assert "cap=3.0" in shown.stdout and "one more re-noise a day" in shown.stdout
    eps = cli("set-epsilon", "mobility", "epsilon.places", "0.25", "--reason", "less noise")
    assert eps.returncode == 0, eps.stderr
    led = Ledger(url)
    try:
        policy = led.policy("mobility")
        assert policy is not None and policy.terms["epsilon.places"] == 0.25
    finally:
        led.dispose()


def test_verify_reads_one_snapshot_while_others_write(ledger_url: str) -> None:
    """A publish verifies the ledger while other runs spend and store (seen in the demo
    before the fix: a row written between reading the tables and reading the chain looked
    deleted). A writer thread appends 150 spends and records; every verify meanwhile must
    pass. Not statistical: a correct snapshot never fails; a torn read fails often.

    The two threads are made to overlap: every 10 spends the writer waits until the reader
    has started another verify, then writes on while that verify runs. Without the
    handshake a busy machine can let the writer hold SQLite's lock for all 150 spends and
    the reader verify only once, after them (seen in CI), which tests nothing."""
    import threading

    Ledger(ledger_url).dispose()  # create the schema first
    done = threading.Event()
    started = threading.Condition()
    verifies_started = 0
    errors: list[BaseException] = []

    def wait_for_verify(n: int) -> None:
        with started:
            if not started.wait_for(lambda: verifies_started >= n, timeout=120):
                raise TimeoutError(f"verify {n} did not start within 120 s")

    def write() -> None:
        led = Ledger(ledger_url)
        try:
            for i in range(150):
                if i % 10 == 0:
                    wait_for_verify(i // 10 + 1)
                (s,) = led.reserve([spend_request(slot(f"m{i}"), 0.01)], run_id="w",
                                   kind="noise", cap=CAP, method_version="v1").spends
                led.record_stored(s.id, f"{i:064x}", 1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            led.dispose()
            done.set()

    thread = threading.Thread(target=write)
    reader = Ledger(ledger_url)
    problems = []
    checks = 0
    try:
        thread.start()
        while not done.is_set():
            with started:
                verifies_started += 1
                started.notify_all()
            check = reader.verify()
            checks += 1
            if not check.ok:
                problems.append(check.problem)
        thread.join()
    finally:
        reader.dispose()
    assert not errors and not problems, (errors, problems[:3])
    assert checks >= 15  # one verify started in each of the 15 blocks of 10 spends


def test_verify_names_each_kind_of_tampering_exactly(used: Ledger, ledger_url: str) -> None:
    """One tamper at a time (guards dropped, rolled back): the exact problem verification
    reports, and how many chain entries it read before stopping."""
    from dp_ops.privacy.ledger_schema import GENESIS, _unkeyed_link

    engine = _make_engine(ledger_url)
    try:
        with engine.connect() as conn:
            chain = [tuple(r) for r in conn.exec_driver_sql(
                "SELECT seq, tbl, row_id, row_sha256, chain_sha256 FROM ledger_chain "
                "ORDER BY seq")]
            whole = verify_chain(conn, used.key())
        assert (whole.entries, whole.head, whole.problem) == (len(chain), chain[-1][4], None)
        seq1, tbl1, id1, row1, _ = chain[0]
        _, tbl2, id2, _, _ = chain[1]
        key1 = CHAINED[tbl1][1]
        plain = _unkeyed_link(GENESIS, 1, tbl1, id1, row1)
        cases = [
            ("ledger_chain", "DELETE FROM ledger_chain WHERE seq = 2", 2,
             "chain entry 2 is missing (the next is 3): an entry was deleted"),
            ("ledger_chain", "UPDATE ledger_chain SET tbl = 'nowhere' WHERE seq = 1", 1,
             f"chain entry 1 (nowhere {id1}): names no ledger table"),
            ("ledger_chain", f"UPDATE ledger_chain SET chain_sha256 = '{plain}' WHERE seq = 1", 1,
             f"chain entry 1 ({tbl1} {id1}): its link is a plain sha256, not a MAC under a "
             "ledger key: the ledger was written before links were keyed and cannot be "
             "verified against anything secret. Keep it for the record and start a new ledger "
             "with a new data root"),
            ("ledger_chain", f"UPDATE ledger_chain SET chain_sha256 = '{'0' * 64}' WHERE seq = 1",
             1, f"chain entry 1 ({tbl1} {id1}): its link does not verify under this process's "
             "ledger key: the key is not the one this ledger was created with (DP_LEDGER_KEY, "
             "DP_LEDGER_KEY_FILE or the dp_ledger_key connection), or the chain was rewritten"),
            ("ledger_chain", f"UPDATE ledger_chain SET chain_sha256 = '{'0' * 64}' WHERE seq = 2",
             2, f"chain entry 2 ({tbl2} {id2}): its link does not commit to the entry before "
             "it under the ledger key: the chain was edited"),
            (tbl1, f"DELETE FROM {tbl1} WHERE {key1} = {id1}", 1,
             f"chain entry 1 ({tbl1} {id1}): the row is missing: it was deleted"),
            (tbl1, f"UPDATE {tbl1} SET created_at = 'x' WHERE {key1} = {id1}", 1,
             f"chain entry 1 ({tbl1} {id1}): the row differs from what was recorded when it "
             "was written: it was edited"),
            ("ledger_chain", f"DELETE FROM ledger_chain WHERE seq = {len(chain)}", len(chain) - 1,
             f"{chain[-1][1]} {chain[-1][2]}: the row has no chain entry: it was inserted "
             "behind the ledger's back, or its entry was deleted"),
        ]
        for tbl, statement, entries, problem in cases:
            with engine.connect() as conn:
                trans = conn.begin()
                try:
                    _drop_guard(conn, tbl)
                    conn.exec_driver_sql(statement)
                    check = verify_chain(conn, used.key())
                    assert (check.entries, check.problem) == (entries, problem), statement
                finally:
                    trans.rollback()
    finally:
        engine.dispose()


def _budget_spend_guards_gone(dialect: str) -> list[str]:
    """How :func:`schema_differences` names the guards of budget_spend dropped (SQLite) or
    disabled (PostgreSQL) by :func:`_drop_guard`."""
    if dialect == "sqlite":
        return ["trigger budget_spend_no_delete is missing",
                "trigger budget_spend_no_update is missing"]
    return ["trigger budget_spend_append_only on budget_spend is disabled",
            "trigger budget_spend_no_truncate on budget_spend is disabled"]


def test_schema_differences_names_a_dropped_or_disabled_trigger(used: Ledger,
                                                                ledger_url: str) -> None:
    from dp_ops.privacy.ledger_schema import schema_differences

    engine = _make_engine(ledger_url)
    try:
        with engine.connect() as conn:
            assert schema_differences(conn) == []
            dialect = conn.dialect.name
            conn.rollback()
            trans = conn.begin()
            try:
                _drop_guard(conn, "budget_spend")
                gone = schema_differences(conn)
            finally:
                trans.rollback()
    finally:
        engine.dispose()
    assert gone == _budget_spend_guards_gone(dialect)


def test_a_derived_file_replaced_behind_the_ledgers_back_is_refused(used: Ledger,
                                                                    ledger_url: str) -> None:
    from dp_ops.errors import DerivedStateConflict

    with pytest.raises(DerivedStateConflict) as err:
        used.record_derived("symptoms", "scaling_factors", "d" * 64, replaces="b" * 64)
    assert str(err.value) == (
        f"symptoms/scaling_factors: the ledger's current version is sha256 {'c' * 64}, not "
        f"{'b' * 64}; a derived file is never replaced behind the ledger's back")
    engine = _make_engine(ledger_url)
    try:
        with engine.connect() as conn:
            assert [tuple(r) for r in conn.exec_driver_sql(
                "SELECT sha256, replaces FROM derived_state WHERE name = 'scaling_factors' "
                "ORDER BY id")] == [("b" * 64, ""), ("c" * 64, "b" * 64)]
    finally:
        engine.dispose()


def test_verify_names_every_missing_or_disabled_guard(ledger_url: str) -> None:
    """A chain that checks on a ledger whose guards were dropped (SQLite) or disabled
    (PostgreSQL) does not verify: the problem names each trigger gone, exactly, and the
    entries and head are the intact chain's. A write is refused, nothing written."""
    from dp_ops.errors import LedgerTampered
    from dp_ops.privacy.ledger_schema import SCHEMA_TAMPERED

    led = Ledger(ledger_url)
    try:
        led.reserve([spend_request(slot("places"), 0.5)], run_id="daily", kind="noise",
                    cap=CAP, method_version="v1", terms=TERMS)
        intact = led.verify()
        assert intact.ok, intact.problem
        engine = _make_engine(ledger_url)
        try:
            with engine.begin() as conn:
                dialect = conn.dialect.name
                _drop_guard(conn, "budget_spend")
        finally:
            engine.dispose()
        check = led.verify()
        with pytest.raises(LedgerTampered, match="Nothing was written"):
            led.record_derived("mobility", "baseline", "a" * 64)
        assert led.head() == (intact.entries, intact.head)
    finally:
        led.dispose()
    assert (check.entries, check.head, check.problem) == (
        intact.entries, intact.head,
        f"{SCHEMA_TAMPERED}: {'; '.join(_budget_spend_guards_gone(dialect))}")


def test_stored_noise_is_recorded_once_and_never_replaced(ledger_url: str) -> None:
    """The same record again is a no-op (nothing written); another sha256, another cell
    count or both are refused with the full text, and nothing is written."""
    from dp_ops.errors import NoiseRecordConflict

    led = Ledger(ledger_url)
    try:
        (spend,) = led.reserve([spend_request(slot("places"), 0.5)], run_id="daily",
                               kind="noise", cap=CAP, method_version="v1",
                               terms=TERMS).spends
        led.record_stored(spend.id, "a" * 64, 10)
        head = led.head()
        led.record_stored(spend.id, "a" * 64, 10)
        assert led.head() == head
        for sha256, cells in (("b" * 64, 10), ("a" * 64, 11), ("b" * 64, 11)):
            with pytest.raises(NoiseRecordConflict) as err:
                led.record_stored(spend.id, sha256, cells)
            assert str(err.value) == (
                f"ledger spend {spend.id}: its stored noise was recorded with sha256 "
                f"{'a' * 64} (10 cells), not {sha256} ({cells} cells); noise is drawn once "
                "and never replaced")
        assert led.head() == head
        assert [(s.stored_sha256, s.stored_cells) for s in led.spends()] == [("a" * 64, 10)]
    finally:
        led.dispose()


@pytest.mark.parametrize("sha256", ["A" * 64, "g" * 64, "X" * 64, "a" * 63 + "-", "a" * 63,
                                    "a" * 65, "", "b" * 80])
def test_a_recorded_sha256_is_64_lowercase_hex_digits(ledger_url: str, sha256: str) -> None:
    """Stored noise and derived files are recorded under exactly 64 lowercase hex digits;
    anything else (upper case, other letters, too short or long) is refused, showing at
    most its first 70 characters, before anything is written."""
    led = Ledger(ledger_url)
    try:
        (spend,) = led.reserve([spend_request(slot("places"), 0.5)], run_id="daily",
                               kind="noise", cap=CAP, method_version="v1",
                               terms=TERMS).spends
        head = led.head()
        message = f"sha256={sha256[:70]!r}: expected 64 lowercase hex digits"
        for record in (lambda: led.record_stored(spend.id, sha256, 1),
                       lambda: led.record_derived("mobility", "baseline", sha256)):
            with pytest.raises(ValueError) as err:
                record()
            assert str(err.value) == message
        assert led.head() == head
    finally:
        led.dispose()


def test_installing_the_guards_again_keeps_a_disabled_trigger_named(
        pg_schema: tuple[str, str]) -> None:
    """PostgreSQL: every guard exists under its exact name. A trigger an owner disabled
    still exists, so installing the guards again (a migration) creates none twice (the name
    is taken: that would fail) and leaves it disabled: schema_differences names it."""
    from dp_ops.privacy.ledger_schema import (
        VERSION_TABLE,
        _pg_trigger_names,
        _pg_triggers,
        _pg_version_triggers,
        install_guards,
        install_version_guards,
        schema_differences,
    )

    url, _ = pg_schema
    Ledger(url).dispose()
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            names = sorted(g.name for g in (*_pg_triggers(), *_pg_version_triggers()))
            assert set(names) <= _pg_trigger_names(conn)  # (and the foreign key's own)
            assert names == sorted(
                [f"{t}_{g}" for t in APPEND_ONLY for g in ("append_only", "no_truncate")]
                + [f"{VERSION_TABLE}_guard", f"{VERSION_TABLE}_no_truncate"])
            for tbl in ("budget_spend", VERSION_TABLE):
                conn.exec_driver_sql(f"ALTER TABLE {tbl} DISABLE TRIGGER USER")
            install_guards(conn)
            install_version_guards(conn)
            assert set(names) <= _pg_trigger_names(conn)  # (and the foreign key's own)
            assert schema_differences(conn) == [
                f"trigger {name} on {tbl} is disabled" for tbl, name in (
                    ("budget_spend", "budget_spend_append_only"),
                    ("budget_spend", "budget_spend_no_truncate"),
                    (VERSION_TABLE, f"{VERSION_TABLE}_guard"),
                    (VERSION_TABLE, f"{VERSION_TABLE}_no_truncate"))]
    finally:
        engine.dispose()
