"""What the example consumer DAG does with a release announcement (dags/
mobility_release_consumer_example.py): check that the release the event names is the one
published, byte for byte, before anything downstream uses it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dp_ops.errors import PublishRefused


def check_announced_releases(report: str, extras: Iterable[Mapping[str, Any]]) -> list[str]:
    """For each event's extra: the release directory it names exists and its manifest has
    the announced sha256. Returns one line per release; raises naming the first mismatch."""
    from dp_ops import settings
    from dp_ops.steps.release import sha256_file

    root = settings.data_root()
    lines = []
    for extra in extras:
        release_id = str(extra.get("release_id", ""))
        manifest = root.published_dir(report) / "releases" / release_id / "manifest.json"
        if not release_id or "/" in release_id or not manifest.is_file():
            raise PublishRefused(f"announced {report} release {release_id[:40]!r} is not "
                                 f"published under {root.published_dir(report)}")
        if sha256_file(manifest) != extra.get("manifest_sha256"):
            raise PublishRefused(f"{manifest}: sha256 differs from the announced "
                                 f"{str(extra.get('manifest_sha256'))[:64]}")
        lines.append(f"{report} release {release_id} (to {extra.get('last_date')}, epsilon "
                     f"per user-day max {extra.get('epsilon_per_user_day_max')}) verified")
    return lines
