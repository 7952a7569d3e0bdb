"""The digest of what a release is built from (``inputs_sha256``), which lets a publish
overtaken by a later release keep it only when that release holds the same inputs."""

from __future__ import annotations

import os
import time
from datetime import date
from pathlib import Path

from dp_ops.layout import DataRoot
from dp_ops.steps.release import holds_current_inputs, inputs_sha256

DAYS = [date(2020, 2, 15), date(2020, 2, 16)]


def _write(root: DataRoot, day: date, text: bytes, *, age: float = 60.0) -> None:
    path = root.report_file("mobility", day)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    when = time.time_ns() - int(age * 1e9)
    os.utime(path, ns=(when, when))


def test_the_digest_follows_every_input(tmp_path: Path) -> None:
    root = DataRoot(tmp_path)
    for day in DAYS:
        _write(root, day, day.isoformat().encode())
    baseline = tmp_path / "baseline.parquet"
    baseline.write_bytes(b"frozen")
    first = inputs_sha256(root, "mobility", DAYS, (baseline,))
    assert inputs_sha256(root, "mobility", DAYS, (baseline,)) == first  # from the cache
    assert inputs_sha256(root, "mobility", DAYS[:1], (baseline,)) != first
    _write(root, DAYS[1], b"re-noised")
    second = inputs_sha256(root, "mobility", DAYS, (baseline,))
    assert second != first
    baseline.write_bytes(b"another baseline")
    assert inputs_sha256(root, "mobility", DAYS, (baseline,)) != second


def test_a_file_changed_within_the_racy_window_is_hashed_again(tmp_path: Path) -> None:
    """Same size, same inode, mtime put back: only the racy rule notices the change."""
    root = DataRoot(tmp_path)
    _write(root, DAYS[0], b"aaaa", age=0.0)
    first = inputs_sha256(root, "mobility", DAYS[:1])
    path = root.report_file("mobility", DAYS[0])
    before = path.stat()
    with open(path, "r+b") as fh:
        fh.write(b"bbbb")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert inputs_sha256(root, "mobility", DAYS[:1]) != first


def test_holds_current_inputs(tmp_path: Path) -> None:
    root = DataRoot(tmp_path)
    for day in DAYS:
        _write(root, day, day.isoformat().encode())
    digest = inputs_sha256(root, "mobility", DAYS)
    manifest = {"first_date": "2020-02-15", "last_date": "2020-02-16",
                "inputs": {"report_days_sha256": digest}}

    def now(days: list[date]) -> str:
        return inputs_sha256(root, "mobility", days)

    assert holds_current_inputs(manifest, now)
    assert not holds_current_inputs(None, now)
    assert not holds_current_inputs({**manifest, "inputs": {}}, now)  # an older release
    root.report_file("mobility", DAYS[1]).unlink()
    assert not holds_current_inputs(manifest, now)  # a missing file: rebuild
