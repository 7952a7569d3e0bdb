"""The example consumer's check of an announced release (dp_ops.airflow.consumer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dp_ops.airflow.consumer import check_announced_releases
from dp_ops.errors import PublishRefused
from dp_ops.steps.release import sha256_file


@pytest.fixture
def announced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    monkeypatch.setenv("DP_DATA_ROOT", str(tmp_path))
    release = tmp_path / "published" / "mobility" / "releases" / "2020-03-31-0123456789ab"
    release.mkdir(parents=True)
    (release / "manifest.json").write_text(json.dumps({"last_date": "2020-03-31"}))
    return {"release_id": release.name, "last_date": "2020-03-31",
            "manifest_sha256": sha256_file(release / "manifest.json"),
            "epsilon_per_user_day_max": 8.58}


def test_an_announced_release_is_verified(announced: dict[str, object]) -> None:
    (line,) = check_announced_releases("mobility", [announced])
    assert "2020-03-31-0123456789ab" in line and "verified" in line


@pytest.mark.parametrize("change, match", [
    ({"manifest_sha256": "0" * 64}, "sha256 differs"),
    ({"release_id": "2020-04-01-ffffffffffff"}, "is not published"),
    ({"release_id": "../../../etc"}, "is not published"),
])
def test_a_wrong_announcement_is_refused(announced: dict[str, object],
                                         change: dict[str, str], match: str) -> None:
    with pytest.raises(PublishRefused, match=match):
        check_announced_releases("mobility", [{**announced, **change}])
