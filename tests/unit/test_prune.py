"""``dp-ops prune`` (issue 14, finding 9: nothing ever pruned work/ or quarantine/)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dp_ops import cli
from dp_ops.layout import DataRoot
from dp_ops.prune import prune

DAY = 86400


def _partition(root: Path, area: str, day: str, age_days: float) -> Path:
    part = root / area / f"date={day}"
    part.mkdir(parents=True)
    f = part / "data.parquet"
    f.write_bytes(b"x" * 100)
    stamp = time.time() - age_days * DAY
    os.utime(f, (stamp, stamp))
    return part


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    _partition(root, "work/clean/location_history", "2020-01-01", 40)
    _partition(root, "work/bounded/mobility", "2020-01-01", 40)
    _partition(root, "quarantine/location_history", "2020-01-01", 40)
    _partition(root, "work/bounded/mobility", "2020-03-01", 2)
    _partition(root, "noise/mobility", "2020-01-01", 400)   # never pruned
    _partition(root, "raw/location_history", "2020-01-01", 400)  # never pruned
    return root


def test_a_dry_run_lists_and_removes_nothing(data_root: Path) -> None:
    found = prune(DataRoot(data_root), 30)
    assert sorted(str(c.path.relative_to(data_root)) for c in found) == [
        "quarantine/location_history/date=2020-01-01",
        "work/bounded/mobility/date=2020-01-01",
        "work/clean/location_history/date=2020-01-01"]
    assert all(c.path.exists() for c in found)


def test_apply_removes_only_old_private_partitions(data_root: Path) -> None:
    prune(DataRoot(data_root), 30, apply=True)
    assert not (data_root / "work/bounded/mobility/date=2020-01-01").exists()
    assert not (data_root / "quarantine/location_history/date=2020-01-01").exists()
    assert (data_root / "work/bounded/mobility/date=2020-03-01").exists()
    assert (data_root / "noise/mobility/date=2020-01-01").exists()
    assert (data_root / "raw/location_history/date=2020-01-01").exists()


def test_the_command_is_a_dry_run_by_default(data_root: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DP_DATA_ROOT", str(data_root))
    assert cli.main(["prune"]) == 0
    out = capsys.readouterr().out
    assert "would remove (dry run" in out and "3 partition(s)" in out
    assert (data_root / "work/clean/location_history/date=2020-01-01").exists()
    assert cli.main(["prune", "--retention-days", "1", "--apply"]) == 0
    assert "removed 4 partition(s)" in capsys.readouterr().out
    assert not (data_root / "work/bounded/mobility/date=2020-03-01").exists()
