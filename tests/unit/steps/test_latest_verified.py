"""``latest`` is verified before publish trusts it (issue 14, finding 6: a ``latest``
symlink to a fake release with last date 9999-12-31 made every later publish a silent
no-op, exit 0, after the day's budget was spent)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dp_ops.errors import PublishRefused
from dp_ops.layout import DataRoot
from dp_ops.steps.release import current_release, sha256_file

REPORT = "mobility"


def _release(root: DataRoot, release_id: str, last_date: str = "2020-03-01") -> Path:
    d = root.published_dir(REPORT) / "releases" / release_id
    d.mkdir(parents=True)
    (d / "data.csv").write_text("a,b\n1,2\n")
    files = {"data.csv": {"sha256": sha256_file(d / "data.csv"), "bytes": 8}}
    (d / "manifest.json").write_text(json.dumps(
        {"release_id": release_id, "last_date": last_date, "files": files}))
    return d


def _point(root: DataRoot, target: Path) -> None:
    latest = root.latest_release(REPORT)
    if latest.is_symlink():
        latest.unlink()
    os.symlink(os.path.relpath(target, latest.parent), latest)


def test_a_verified_release_is_read_and_none_before_the_first(tmp_path: Path) -> None:
    root = DataRoot(tmp_path / "data")
    assert current_release(root, REPORT) is None
    _point(root, _release(root, "2020-03-01-aaaaaaaaaaaa"))
    current = current_release(root, REPORT)
    assert current is not None and current["last_date"] == "2020-03-01"


def test_a_latest_pointing_outside_releases_is_refused(tmp_path: Path) -> None:
    root = DataRoot(tmp_path / "data")
    fake = tmp_path / "elsewhere" / "9999-12-31-ffffffffffff"
    fake.mkdir(parents=True)
    (fake / "manifest.json").write_text(json.dumps(
        {"release_id": fake.name, "last_date": "9999-12-31", "files": {}}))
    root.published_dir(REPORT).mkdir(parents=True)
    _point(root, fake)
    with pytest.raises(PublishRefused, match="points outside"):
        current_release(root, REPORT)


@pytest.mark.parametrize("tamper", ["edit a file", "rename the release", "empty manifest",
                                    "not a symlink"])
def test_an_edited_or_forged_release_is_refused(tmp_path: Path, tamper: str) -> None:
    root = DataRoot(tmp_path / "data")
    good = _release(root, "2020-03-01-aaaaaaaaaaaa")
    _point(root, good)
    if tamper == "edit a file":
        (good / "data.csv").write_text("a,b\n1,3\n")
    elif tamper == "rename the release":
        forged = good.parent / "9999-12-31-ffffffffffff"
        good.rename(forged)
        _point(root, forged)
    elif tamper == "empty manifest":
        (good / "manifest.json").write_text(json.dumps(
            {"release_id": good.name, "last_date": "9999-12-31", "files": {}}))
    else:
        root.latest_release(REPORT).unlink()
        root.latest_release(REPORT).mkdir()
    with pytest.raises(PublishRefused, match="OPERATIONS.md"):
        current_release(root, REPORT)
