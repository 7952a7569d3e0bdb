"""The frozen baseline and the data root's ledger identity (issue 14, findings 3 and 6).

One small data root: the baseline window's bounded cells (constructed, large counts) and a
published-period day, noised through the real noise step and frozen through the real
baseline step, with its ledger inside; built once and copied per test. Nothing here is
statistical: the assertions are about refusals and what was (not) written.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dp_demo.geography import demo_regions
from support.report_steps import MOBILITY_STEPS as steps

from dp_ops.engine.files import write_parquet_atomic
from dp_ops.errors import DerivedStateTampered, LedgerMismatch
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.regions import write_regions
from dp_ops.reports.mobility.baseline import build_baseline_once, read_baseline
from dp_ops.reports.mobility.config import GROUP_CELLS, MobilityConfig
from dp_ops.reports.mobility.report import report_day
from dp_ops.steps.derived import store_recorded
from dp_ops.steps.ledger_binding import IDENTITY_FILE
from dp_ops.steps.noise_request import NoiseRequest

CFG = MobilityConfig()
PUBLIC_DAY = date(2020, 3, 2)


def _bounded(root: DataRoot, regions: pd.DataFrame, day: date) -> None:
    metrics = [m for cells in GROUP_CELLS.values() for m in cells]
    cells = regions[["level", "region_id"]].merge(pd.DataFrame({"metric": metrics}),
                                                  how="cross")
    cells["value"] = np.int64(20_000 + 100 * day.weekday())
    cells["level"] = cells["level"].astype(np.int32)
    write_parquet_atomic(pa.Table.from_pandas(cells, preserve_index=False),
                         root.bounded_file("mobility", day))


@pytest.fixture(scope="module")
def window_noised(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every window day and the public day noised; the baseline not frozen yet."""
    base = tmp_path_factory.mktemp("derived") / "data"
    root = DataRoot(base)
    regions = demo_regions()
    write_regions(regions, root.regions_csv)
    url = f"sqlite:///{base / 'ledger.sqlite'}"
    for day in [*CFG.baseline_dates, PUBLIC_DAY]:
        _bounded(root, regions, day)
        steps.noise(root, CFG, NoiseRequest(day=day, run_id="daily"), ledger_url=url)
    return base


@pytest.fixture(scope="module")
def template(window_noised: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("frozen") / "data"
    shutil.copytree(window_noised, base)
    build_baseline_once(DataRoot(base), CFG, ledger_url=f"sqlite:///{base / 'ledger.sqlite'}")
    return base


@pytest.mark.slow
def test_runs_freezing_together_compute_the_baseline_once(
        window_noised: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The baseline sensors of a backfill's runs reach the freeze together: one computes
    it, the others wait for it and find its file (each used to compute it, then lose)."""
    import threading
    import time

    from dp_ops.reports.mobility import baseline as module

    base = tmp_path / "data"
    shutil.copytree(window_noised, base)
    root, url = DataRoot(base), f"sqlite:///{base / 'ledger.sqlite'}"
    computed = []
    real = module._window_baseline

    def slow(*args: object) -> pd.DataFrame:
        computed.append(1)
        time.sleep(0.5)  # the others arrive meanwhile
        return real(*args)

    monkeypatch.setattr(module, "_window_baseline", slow)
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(
        build_baseline_once(root, CFG, ledger_url=url).summary)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(computed) == 1
    assert sorted(r.split(" ")[0] for r in results) in (
        ["found", "found", "froze"], ["baseline", "found", "froze"],
        ["baseline", "baseline", "froze"])


@pytest.fixture
def env(template: Path, tmp_path: Path) -> tuple[DataRoot, str]:
    base = tmp_path / "data"
    shutil.copytree(template, base)
    return DataRoot(base), f"sqlite:///{base / 'ledger.sqlite'}"


def _spends(url: str) -> int:
    ledger = Ledger(url)
    try:
        return len(ledger.spends())
    finally:
        ledger.dispose()


def test_the_frozen_baseline_is_recorded_and_verified(env: tuple[DataRoot, str]) -> None:
    root, url = env
    report_day(root, CFG, PUBLIC_DAY, ledger_url=url)
    assert root.report_file("mobility", PUBLIC_DAY).is_file()
    ledger = Ledger(url)
    try:
        assert ledger.derived_sha256("mobility", "baseline")
        assert len(read_baseline(root, ledger)) > 0
    finally:
        ledger.dispose()


def test_a_halved_baseline_is_refused(env: tuple[DataRoot, str]) -> None:
    """Finding 6: halving the frozen baseline was published silently. Every read verifies
    it against the sha256 recorded when it was frozen: the report step refuses."""
    root, url = env
    path = root.baseline_file("mobility")
    baseline = pq.read_table(path).to_pandas()
    baseline["baseline"] = baseline["baseline"] / 2
    write_parquet_atomic(pa.Table.from_pandas(baseline, preserve_index=False), path)
    with pytest.raises(DerivedStateTampered, match="baseline.parquet has sha256"):
        report_day(root, CFG, PUBLIC_DAY, ledger_url=url)
    assert not root.report_file("mobility", PUBLIC_DAY).exists()
    # and it is not "repaired" by freezing again
    with pytest.raises(DerivedStateTampered):
        build_baseline_once(root, CFG, ledger_url=url)


def test_a_deleted_baseline_is_never_rebuilt_silently(env: tuple[DataRoot, str]) -> None:
    root, url = env
    root.baseline_file("mobility").unlink()
    with pytest.raises(DerivedStateTampered, match="is missing"):
        build_baseline_once(root, CFG, ledger_url=url)
    with pytest.raises(DerivedStateTampered, match="is missing"):
        report_day(root, CFG, PUBLIC_DAY, ledger_url=url)


def test_a_crash_between_record_and_move_is_finished_on_the_next_read(
        env: tuple[DataRoot, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The sha256 is recorded before the file becomes visible; a process killed between
    the two leaves the pending file, which the next reader moves into place."""
    root, url = env
    ledger = Ledger(url)
    try:
        table = pa.table({"x": [1, 2, 3]})
        target = root.root / "baseline" / "mobility" / "other.parquet"

        def killed(*_a: object) -> None:  # fault injection: dies right after the record
            raise SystemExit("killed")

        monkeypatch.setattr("dp_ops.steps.derived.os.link", killed)
        with pytest.raises(SystemExit):
            store_recorded(ledger, "mobility", "other", table, target, frozen=True)
        monkeypatch.undo()
        # the pending file is gone with the dead process's cleanup in this simulation,
        # so write it back as a real crash would have left it (named with the MAC of
        # the recorded sha256)
        from dp_ops.engine.files import pending_path
        from dp_ops.steps.pending import pending_tag

        recorded = ledger.derived_sha256("mobility", "other")
        assert recorded is not None
        pending = pending_path(target, pending_tag(target, "derived_state/mobility/other",
                                                   recorded))
        pq.write_table(table, pending)
        assert not target.exists()
        assert store_recorded(ledger, "mobility", "other", table, target, frozen=True) is False
        assert target.is_file() and pq.read_table(target).equals(table)
    finally:
        ledger.dispose()


def test_another_ledger_is_refused(env: tuple[DataRoot, str], tmp_path: Path) -> None:
    """Finding 3: the same data root with a fresh DP_LEDGER_URL drew fresh noise. The data
    root records its ledger's id at first use; another ledger is refused before anything
    is read, drawn or spent."""
    root, url = env
    fresh = f"sqlite:///{tmp_path / 'fresh.sqlite'}"
    files = sorted(root.noise_dir("mobility", PUBLIC_DAY).glob("*.parquet"))
    with pytest.raises(LedgerMismatch, match="was first used with ledger"):
        steps.noise(root, CFG, NoiseRequest(day=PUBLIC_DAY, run_id="daily"), ledger_url=fresh)
    with pytest.raises(LedgerMismatch):
        report_day(root, CFG, PUBLIC_DAY, ledger_url=fresh)
    assert _spends(fresh) == 0
    assert sorted(root.noise_dir("mobility", PUBLIC_DAY).glob("*.parquet")) == files
    # deleting the identity record does not help: the data root holds stored noise
    (root.root / IDENTITY_FILE).unlink()
    with pytest.raises(LedgerMismatch, match="holds stored noise or releases"):
        steps.noise(root, CFG, NoiseRequest(day=PUBLIC_DAY + timedelta(days=1),
                                                  run_id="daily"), ledger_url=fresh)
    assert _spends(fresh) == 0
    assert _spends(url) > 0


def test_a_restored_older_ledger_is_refused(env: tuple[DataRoot, str]) -> None:
    """A backup of the same ledger has the same id and an intact, shorter chain. Restored
    under a data root that has seen later entries, it would not know their spends and would
    hand out their ids again (whose noise files the data root holds). The data root's
    high-water mark refuses it, and `ledger --verify` fails naming why."""
    root, url = env
    path = root.root / "ledger.sqlite"
    backup = root.root.parent / "backup.sqlite"
    with sqlite3.connect(path) as src, sqlite3.connect(backup) as dst:
        src.backup(dst)
    day = PUBLIC_DAY + timedelta(days=1)
    _bounded(root, demo_regions(), day)
    steps.noise(root, CFG, NoiseRequest(day=day, run_id="daily"),
                                              ledger_url=url)  # later entries
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copy(backup, path)
    with pytest.raises(LedgerMismatch, match="older than the data root"):
        steps.noise(root, CFG, NoiseRequest(day=day, run_id="daily-2"), ledger_url=url)
    with pytest.raises(LedgerMismatch, match="older than the data root"):
        report_day(root, CFG, PUBLIC_DAY, ledger_url=url)
    env_vars = {**os.environ, "DP_LEDGER_URL": url, "DP_DATA_ROOT": str(root.root)}
    res = subprocess.run([sys.executable, "-m", "dp_ops", "ledger", "--verify"], env=env_vars,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 1 and "older than the data root" in res.stdout
