"""Issue 31: the second review's attacks by someone who can write the data root (and so
the default SQLite ledger file in it; with a PostgreSQL ledger, who holds its owner role)
but does not hold the ledger key. Each starts from a copy of a data root holding a
symptoms release and of its ledger, tries the attack through the real CLI in a child
process, and checks that it ends in a refusal with nothing spent by the attack and nothing
wrong published (``latest`` unchanged, or the new release built from what the ledger
recorded). Every test runs twice: with the SQLite ledger in the data root, and with a
PostgreSQL ledger (a database of its own per test, ``tests/support/ledger_homes.py``).

Rows of the issue's table covered here: 1 (planted noise file), 2 (edited per-day report
rows), 3 (a new ledger under a forged identity), 4 and 6 (rows deleted or noise replaced,
chain recomputed), 5 (an edited manifest), 7 (an older ledger restored beside newer
releases). Row 14 (the migration-version table) is in
``tests/unit/privacy/test_ledger_integrity.py``; rows 10-13 in
``tests/unit/test_attacks_view_prune.py``. Issue 48, route 3 (a trigger in the ledger
forging the next noise records, with planted pending files) is the last test. No test here
is statistical.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from support.cached_roots import GeneratedRoots, build_previous
from support.ledger_attacks import own_key_link, plain_link, tamper
from support.ledger_homes import BACKENDS, Home, create_database
from support.pipeline_helpers import LAST_BEFORE, latest, ok, run_day

from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.regions import read_regions
from dp_ops.reports.symptoms.period import state_file
from dp_ops.steps.ledger_binding import HEAD_FILE, IDENTITY_FILE
from dp_ops.steps.noising import file_digest

# with the other modules starting from ``previous`` (tests/integration/conftest.py), on one
# worker under pytest -n: the SQLite history is built once for them all
pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.xdist_group("previous")]

REPORT = "symptoms"
PUBLISHED = LAST_BEFORE[REPORT]  # the last day of the release the copies start from
NEXT = PUBLISHED + timedelta(days=1)


@pytest.fixture(scope="module", params=BACKENDS)
def base_home(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
              generated_roots: GeneratedRoots) -> Iterator[Home]:
    """A data root with a symptoms release and its ledger, per backend: with SQLite the
    session's ``previous`` (the crash and race tests' history), with PostgreSQL one built
    here with its ledger in a database of its own."""
    if request.param == "sqlite":
        yield Home(request.getfixturevalue("previous")[REPORT])
        return
    home = Home(Path("unused"), create_database())
    try:
        root = build_previous(tmp_path_factory, generated_roots, (REPORT,),
                              extra_env=home.env)[REPORT]
        yield Home(root, home.database)
    finally:
        home.dispose()


@pytest.fixture
def home(base_home: Home, tmp_path: Path) -> Iterator[Home]:
    """This test's copy of ``base_home``: the data root and the ledger."""
    copy = base_home.copy(tmp_path / "root")
    try:
        yield copy
    finally:
        copy.dispose()


def _ledger(home: Home) -> Ledger:
    return Ledger(home.ledger_url)


def _spends(home: Home) -> list[tuple[int, str, str]]:
    ledger = _ledger(home)
    try:
        return [(s.id, s.slot.day.isoformat(), s.kind) for s in ledger.spends()]
    finally:
        ledger.dispose()


def _refused(res: object, *needles: str) -> None:
    import subprocess

    assert isinstance(res, subprocess.CompletedProcess)
    assert res.returncode != 0, f"not refused:\n{res.stdout[-1500:]}\n{res.stderr[-1500:]}"
    text = res.stdout + res.stderr
    for needle in needles:
        assert needle in text, f"{needle!r} not in:\n{text[-3000:]}"


def _region(root: Path) -> str:
    regions = read_regions(DataRoot(root).regions_csv)
    return str(regions.loc[regions["level"] == 2, "region_id"].iloc[0])


def _rewrite_head(home: Home) -> None:
    """Point the data root's high-water mark at the tampered ledger's head, as an attacker
    would (they can read the head; they cannot compute the record's MAC)."""
    engine = sa.create_engine(home.ledger_url)
    try:
        with engine.connect() as conn:
            seq, chain = conn.exec_driver_sql(
                "SELECT seq, chain_sha256 FROM ledger_chain ORDER BY seq DESC LIMIT 1").one()
    finally:
        engine.dispose()
    mark = json.loads((home.root / HEAD_FILE).read_text())
    (home.root / HEAD_FILE).write_text(json.dumps({**mark, "seq": seq, "chain_sha256": chain}))


def test_row1_a_planted_noise_file_is_replaced_by_a_draw(home: Home) -> None:
    """Zeros planted at the paths of the next spends (ids are predictable) were adopted as
    that day's noise, publishing the true sums. Now a file with no ledger record is never
    adopted: the draw replaces it, and what is published is what the ledger recorded."""
    root = home.root
    next_id = max(i for i, _, _ in _spends(home)) + 1
    # the next day's spends cover the same slots in the same order as the last day's: a
    # copy of each of its noise files with every value 0 has exactly the right domain
    ledger = _ledger(home)
    try:
        template = [s for s in ledger.spends(REPORT, PUBLISHED) if s.kind == "noise"]
    finally:
        ledger.dispose()
    noise_dir = DataRoot(root).noise_dir(REPORT, NEXT)
    noise_dir.mkdir(parents=True, exist_ok=True)
    planted: dict[Path, str] = {}
    for offset, spend in enumerate(template):
        table = pq.read_table(DataRoot(root).noise_dir(REPORT, PUBLISHED)
                              / f"spend-{spend.id:09d}.parquet")
        zeros = pa.array([0] * len(table), pa.int64())
        table = table.set_column(table.schema.get_field_index("noisy_value"), "noisy_value",
                                 zeros)
        table = table.set_column(table.schema.get_field_index("spend_id"), "spend_id",
                                 pa.array([next_id + offset] * len(table), pa.int64()))
        path = noise_dir / f"spend-{next_id + offset:09d}.parquet"
        pq.write_table(table, path)
        planted[path] = file_digest(path)[0]
    ok(run_day(root, REPORT, NEXT, "--run-id", "next", extra_env=home.env))
    ledger = _ledger(home)
    try:
        spends = ledger.spends(REPORT, NEXT)
        assert spends and all(s.stored_sha256 is not None for s in spends)
        for s in spends:
            path = noise_dir / f"spend-{s.id:09d}.parquet"
            assert file_digest(path)[0] == s.stored_sha256 != planted.get(path)
        assert ledger.verify().ok
    finally:
        ledger.dispose()
    assert json.loads((latest(root, REPORT) / "manifest.json").read_text())[
        "last_date"] == NEXT.isoformat()


def test_row2_edited_report_rows_are_refused(home: Home) -> None:
    """A published day's per-day rows replaced (here: every noisy A doubled, as true
    values would be) were published as they were. Now the gate reads each day's rows as
    the ledger recorded them and refuses the edited file, naming it; latest stays."""
    root = home.root
    before = latest(root, REPORT)
    path = DataRoot(root).report_file(REPORT, PUBLISHED)
    rows = pq.read_table(path).to_pandas()
    rows["a_noisy"] = rows["a_noisy"] * 2
    pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), path)
    # the gate's period summary (a MAC'd cache keyed by the recorded sha256s) would never
    # read the edited file again: remove it, as an attacker would, to force a full read
    state_file(DataRoot(root)).unlink()
    spent_before = _spends(home)
    res = run_day(root, REPORT, NEXT, "--run-id", "next", extra_env=home.env)
    _refused(res, f"date={PUBLISHED}", "recorded when the pipeline wrote it")
    assert latest(root, REPORT) == before
    # the only spends since are the next day's normal run (the attack made none)
    new = [s for s in _spends(home) if s not in spent_before]
    assert {(day, kind) for _, day, kind in new} == {(NEXT.isoformat(), "noise")}


def test_row3_a_new_ledger_under_a_forged_identity_is_refused(home: Home) -> None:
    """A new, empty ledger (the SQLite file deleted; on PostgreSQL every table dropped by
    the owner), the identity record rewritten with its id and the high-water mark deleted:
    a published day was noised afresh. Now the identity record's MAC does not verify (the
    attacker lacks the key), and a data root holding releases must hold a mark: refused
    before anything is spent."""
    root = home.root
    before = latest(root, REPORT)
    home.wipe_ledger()
    fresh = _ledger(home)  # a new ledger: a new id
    fresh_id = fresh.ledger_id
    fresh.dispose()
    identity = json.loads((root / IDENTITY_FILE).read_text())
    (root / IDENTITY_FILE).write_text(json.dumps({**identity, "ledger_id": fresh_id}))
    (root / HEAD_FILE).unlink()
    res = run_day(root, REPORT, PUBLISHED, "--run-id", "again", extra_env=home.env)
    _refused(res, "MAC does not verify")
    assert _spends(home) == []
    assert latest(root, REPORT) == before


@pytest.mark.parametrize("link", ["own key", "plain sha256"])
def test_row4_deleted_renoise_rows_and_a_recomputed_chain_are_refused(home: Home,
                                                                      link: str) -> None:
    """A re-noise's rows deleted (its budget back), the chain recomputed, the guards
    restored: a second re-noise was accepted and published. Without the key the chain
    cannot be recomputed so that it verifies: the next run is refused, nothing spent."""
    root = home.root
    region = _region(root)
    ok(run_day(root, REPORT, PUBLISHED, "--region", region, "--renoise", "--reason",
               "raw data corrected", "--run-id", "oncall-1", "--approved-by", "approver",
               extra_env=home.env))
    after_renoise = latest(root, REPORT)

    def delete_renoise(conn: sa.Connection) -> None:
        ids = conn.exec_driver_sql(
            "SELECT id FROM budget_spend WHERE kind = 'renoise'").scalars().all()
        assert ids
        marks = ",".join(map(str, ids))
        conn.exec_driver_sql(f"DELETE FROM noise_store WHERE spend_id IN ({marks})")
        conn.exec_driver_sql(f"DELETE FROM budget_spend WHERE id IN ({marks})")

    tamper(home.ledger_url, delete_renoise,
           own_key_link() if link == "own key" else plain_link)
    _rewrite_head(home)
    spent = _spends(home)
    res = run_day(root, REPORT, PUBLISHED, "--region", region, "--renoise", "--reason",
                  "again", "--run-id", "oncall-2", "--approved-by", "approver",
                  extra_env=home.env)
    _refused(res, "does not verify")
    assert _spends(home) == spent
    assert latest(root, REPORT) == after_renoise


def test_row5_an_edited_manifest_is_refused(home: Home) -> None:
    """The ledger anchor inside a published manifest rewritten (``manifest.json`` itself
    was covered by no checksum): now each manifest's sha256 is recorded in the ledger at
    publish, and every run refuses while a release is not the recorded one."""
    root = home.root
    before = latest(root, REPORT)
    manifest_path = before / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["ledger"]["chain_seq"] = 1
    manifest_path.write_text(json.dumps(manifest, indent=2))
    spent = _spends(home)
    res = run_day(root, REPORT, NEXT, "--run-id", "next", extra_env=home.env)
    _refused(res, "not the one recorded at publish")
    assert _spends(home) == spent  # refused before the day's spend
    assert latest(root, REPORT) == before


def test_row6_zeroed_noise_with_a_rewritten_record_is_refused(home: Home) -> None:
    """Stored noise replaced by zeros, its ``noise_store`` sha256 rewritten to match and
    the chain recomputed: the true sums were published. The chain cannot be recomputed
    without the key: refused, nothing spent, nothing published."""
    root = home.root
    before = latest(root, REPORT)
    ledger = _ledger(home)
    try:
        spends = ledger.spends(REPORT, PUBLISHED)
    finally:
        ledger.dispose()
    zeroed: dict[int, tuple[str, int]] = {}
    for s in spends:
        path = DataRoot(root).noise_dir(REPORT, PUBLISHED) / f"spend-{s.id:09d}.parquet"
        table = pq.read_table(path)
        table = table.set_column(table.schema.get_field_index("noisy_value"), "noisy_value",
                                 pa.array([0] * len(table), pa.int64()))
        pq.write_table(table, path)
        zeroed[s.id] = file_digest(path)

    def rewrite_records(conn: sa.Connection) -> None:
        for spend_id, (sha, cells) in zeroed.items():
            conn.execute(sa.text("UPDATE noise_store SET sha256 = :sha, cells = :cells "
                                 "WHERE spend_id = :id"),
                         {"sha": sha, "cells": cells, "id": spend_id})

    tamper(home.ledger_url, rewrite_records)
    _rewrite_head(home)
    spent = _spends(home)
    res = run_day(root, REPORT, NEXT, "--run-id", "next", extra_env=home.env)
    _refused(res, "does not verify")
    assert _spends(home) == spent
    assert latest(root, REPORT) == before


def test_row7_an_older_ledger_beside_newer_releases_is_refused(home: Home,
                                                               tmp_path: Path) -> None:
    """A backup of the ledger and the data root's records restored, the newer releases
    kept: fresh noise was drawn for days consumers already held. Now every release in the
    data root must be recorded in the ledger: refused before anything is spent.
    (Restoring the older ``published/`` too is caught only outside the data root, by the
    release asset events, which a CLI run cannot see: tested through Airflow in
    test_symptoms_dag_e2e.py::test_row7_a_whole_rollback_is_refused_by_what_airflow_announced.)"""
    root = home.root
    backup = home.backup(tmp_path / "backup")
    try:
        ok(run_day(root, REPORT, NEXT, "--run-id", "next", extra_env=home.env))
        newer = latest(root, REPORT)
        home.restore(backup)
    finally:
        backup.dispose()
    spent = _spends(home)
    res = run_day(root, REPORT, NEXT, "--run-id", "again", extra_env=home.env)
    _refused(res, "recorded no such release")
    assert _spends(home) == spent
    assert latest(root, REPORT) == newer


def test_route3_a_trigger_forging_the_next_noise_records_publishes_nothing(home: Home) -> None:
    """Issue 48, route 3, end to end, without the key: files of zeros planted as pending
    files of the next day's spends (ids are predictable), and a trigger in the ledger that
    rewrites each new noise_store row's sha256 to a planted file's (on SQLite beside a
    same-named UPDATE guard that never fires; on PostgreSQL an owner's BEFORE INSERT
    trigger). The forged records verified and the planted files were moved into place:
    the day's true sums were published. Now the run is refused before anything is spent,
    naming the trigger; nothing is published and the planted files are never adopted."""
    root = home.root
    before = latest(root, REPORT)
    spent = _spends(home)
    next_id = max(i for i, _, _ in spent) + 1
    ledger = _ledger(home)
    try:
        template = [s for s in ledger.spends(REPORT, PUBLISHED) if s.kind == "noise"]
    finally:
        ledger.dispose()
    noise_dir = DataRoot(root).noise_dir(REPORT, NEXT)
    noise_dir.mkdir(parents=True, exist_ok=True)
    forged: dict[int, str] = {}
    for offset, spend in enumerate(template):
        table = pq.read_table(DataRoot(root).noise_dir(REPORT, PUBLISHED)
                              / f"spend-{spend.id:09d}.parquet")
        table = table.set_column(table.schema.get_field_index("noisy_value"), "noisy_value",
                                 pa.array([0] * len(table), pa.int64()))
        table = table.set_column(table.schema.get_field_index("spend_id"), "spend_id",
                                 pa.array([next_id + offset] * len(table), pa.int64()))
        planted = noise_dir / f".spend-{next_id + offset:09d}.parquet.1-attacker.pending"
        pq.write_table(table, planted)
        forged[next_id + offset] = file_digest(planted)[0]
    case = " ".join(f"WHEN {i} THEN '{sha}'" for i, sha in forged.items())
    engine = sa.create_engine(home.ledger_url)
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("DROP TRIGGER noise_store_no_update")
                conn.exec_driver_sql(
                    "CREATE TRIGGER noise_store_no_update BEFORE UPDATE ON noise_store WHEN 0 "
                    "BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: UPDATE of "
                    "noise_store refused'); END")
                conn.exec_driver_sql(
                    "CREATE TRIGGER noise_store_audit AFTER INSERT ON noise_store BEGIN "
                    f"UPDATE noise_store SET sha256 = CASE NEW.spend_id {case} ELSE sha256 "
                    "END WHERE spend_id = NEW.spend_id; END")
            else:
                conn.exec_driver_sql(
                    "CREATE FUNCTION noise_store_audit() RETURNS trigger LANGUAGE plpgsql AS "
                    f"$$ BEGIN NEW.sha256 := CASE NEW.spend_id {case} ELSE NEW.sha256 END; "
                    "RETURN NEW; END $$")
                conn.exec_driver_sql(
                    "CREATE TRIGGER noise_store_audit BEFORE INSERT ON noise_store "
                    "FOR EACH ROW EXECUTE FUNCTION noise_store_audit()")
    finally:
        engine.dispose()
    res = run_day(root, REPORT, NEXT, "--run-id", "next", extra_env=home.env)
    _refused(res, "noise_store_audit", "tampered with")
    assert _spends(home) == spent
    assert latest(root, REPORT) == before
    assert sorted(p.name for p in noise_dir.iterdir()) == sorted(
        f".spend-{i:09d}.parquet.1-attacker.pending" for i in forged)
