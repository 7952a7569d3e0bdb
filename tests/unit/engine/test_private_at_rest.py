"""Private areas are 0700/0600 whatever the umask; public outputs 0644 (issue 14,
finding 9: under umask 022, work/bounded, work/clean and quarantine/ were 0644 in 0755
directories)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from dp_ops.engine.files import (
    atomic_copy_to_parquet,
    is_private,
    store_first_wins,
    write_json_atomic,
    write_parquet_atomic,
)


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_private_areas_are_recognised_from_the_path(tmp_path: Path) -> None:
    root = tmp_path / "work" / "data"   # a data root under a directory called "work"
    assert is_private(root / "work" / "clean" / "location_history" / "date=2020-01-01" / "x")
    assert is_private(root / "work" / "bounded" / "mobility" / "date=2020-01-01" / "a")
    assert is_private(root / "work" / "tmp" / "spill")
    assert is_private(root / "quarantine" / "search_activity" / "date=2020-01-01" / "r")
    assert is_private(root / "noise" / "symptoms" / "date=2020-01-01" / "n")
    # a report or source the rule has never heard of is private too: the rule lists none
    assert is_private(root / "noise" / "visits" / "date=2020-01-01" / "n")
    assert is_private(root / "noise" / "visits")
    assert is_private(root / "quarantine" / "card_payments" / "date=2020-01-01" / "r")
    assert not is_private(root / "noise")  # the area itself holds only report directories
    for public in ("published/mobility/releases/r/file.csv", "report/mobility/x.parquet",
                   "baseline/mobility/baseline.parquet", "reference/regions.csv"):
        assert not is_private(root / public), public


def test_private_files_are_0600_in_0700_directories(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    clean = root / "work" / "clean" / "location_history" / "date=2020-01-01" / "part.parquet"
    con = duckdb.connect()
    try:
        atomic_copy_to_parquet(con, "SELECT 1 AS x", clean)
    finally:
        con.close()
    write_json_atomic(clean.parent / "ingest_report.json", {"rows": 1})
    table = pa.table({"x": [1]})
    noise = root / "noise" / "mobility" / "date=2020-01-01" / "spend-1.parquet"
    assert store_first_wins(table, noise)
    for f in (clean, clean.parent / "ingest_report.json", noise):
        assert mode(f) == 0o600, f
    for d in (root / "work", root / "work" / "clean", clean.parent, root / "noise",
              noise.parent):
        assert mode(d) == 0o700, d
    assert mode(root) == 0o755  # the data root itself is left as it was


def test_public_files_stay_readable(tmp_path: Path) -> None:
    target = tmp_path / "data" / "published" / "mobility" / "releases" / "r" / "x.parquet"
    write_parquet_atomic(pa.table({"x": [1]}), target)
    write_json_atomic(target.parent / "manifest.json", {})
    baseline = tmp_path / "data" / "baseline" / "mobility" / "baseline.parquet"
    assert store_first_wins(pa.table({"x": [1]}), baseline)
    for f in (target, target.parent / "manifest.json", baseline):
        assert mode(f) == 0o644, f
    assert mode(target.parent) == 0o755


def test_an_existing_private_area_is_tightened(tmp_path: Path) -> None:
    """A data root written by an older version (0755 work/) is fixed on the next write."""
    old = tmp_path / "data" / "work" / "bounded"
    old.mkdir(parents=True)
    os.chmod(old.parent, 0o755)
    write_parquet_atomic(pa.table({"x": [1]}), old / "mobility" / "date=2020-01-01" / "a.p")
    assert mode(old.parent) == 0o700 and mode(old) == 0o700


def test_the_default_ledger_file_is_private(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from dp_ops.layout import DataRoot, ledger_url
    from dp_ops.privacy.ledger import Ledger

    monkeypatch.delenv("DP_LEDGER_URL", raising=False)
    root = DataRoot(tmp_path / "data")
    root.root.mkdir()
    ledger = Ledger(ledger_url(root))
    try:
        assert ledger.spends() == []
    finally:
        ledger.dispose()
    for f in root.root.glob("ledger.sqlite*"):
        assert mode(f) == 0o600, f
    os.chmod(root.root / "ledger.sqlite", 0o644)  # an older data root
    ledger_url(root)
    assert mode(root.root / "ledger.sqlite") == 0o600
