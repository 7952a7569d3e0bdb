"""The data root's records of its ledger (dp_ops.steps.ledger_binding): the identity
recorded at first use, the high-water mark, and the ledger entry each release manifest
names, which `ledger --verify` checks so that a ledger rolled back together with the data
root's own records is still caught by the releases already public."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from support.spend_requests import spend_request

from dp_ops.errors import LedgerMismatch
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger, Slot
from dp_ops.steps.ledger_binding import (
    HEAD_FILE,
    IDENTITY_FILE,
    ledger_anchor,
    open_ledger,
    record_release,
    release_problems,
)
from dp_ops.steps.release import sha256_file


def _spend(led: Ledger, metric: str) -> None:
    led.reserve([spend_request(Slot("mobility", date(2020, 3, 1), 1, metric), 0.1)],
                run_id="r", kind="noise", cap=2.0, method_version="v1")


def _publish_manifest(root: DataRoot, release_id: str, anchor: dict[str, object],
                      led: Ledger | None = None) -> None:
    """A release directory with its manifest; recorded in ``led`` as publish does."""
    path = root.published_dir("mobility") / "releases" / release_id / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"release_id": release_id, "ledger": anchor}))
    if led is not None:
        record_release(led, "mobility", release_id, sha256_file(path))


def test_first_use_records_identity_and_mark_and_both_move_forward(tmp_path: Path) -> None:
    root = DataRoot(tmp_path / "data")
    root.root.mkdir()
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    led = open_ledger(root, url)
    try:
        assert json.loads((root.root / IDENTITY_FILE).read_text())["ledger_id"] == led.ledger_id
        before = json.loads((root.root / HEAD_FILE).read_text())["seq"]
        _spend(led, "a")
        after = json.loads((root.root / HEAD_FILE).read_text())
        assert after["seq"] > before and after["chain_sha256"] == led.head()[1]
    finally:
        led.dispose()
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    with pytest.raises(LedgerMismatch, match="was first used with ledger"):
        open_ledger(root, other)


def test_a_release_anchors_the_ledger_entry_it_was_published_at(tmp_path: Path) -> None:
    root = DataRoot(tmp_path / "data")
    root.root.mkdir()
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    backup = tmp_path / "backup.sqlite"
    led = open_ledger(root, url)
    _spend(led, "a")
    led.dispose()
    (tmp_path / "ledger.sqlite").rename(backup)  # a copy taken now (WAL checkpointed)
    backup.with_name("ledger.sqlite").write_bytes(backup.read_bytes())
    head_backup = (root.root / HEAD_FILE).read_bytes()  # the data root's mark, then
    led = open_ledger(root, url)
    try:
        _spend(led, "b")
        _publish_manifest(root, "r1", ledger_anchor(led), led)
        assert release_problems(root, led) == []
        forged = {**ledger_anchor(led), "chain_sha256": "0" * 64}
        _publish_manifest(root, "r2", forged, led)
        assert len(release_problems(root, led)) == 1
        _publish_manifest(root, "r3", ledger_anchor(led))  # planted: never recorded
        assert "recorded no such release" in release_problems(root, led)[-1]
    finally:
        led.dispose()
    # roll back the ledger and the data root's mark together: release r1 still names an
    # entry the old ledger lacks
    for planted in ("r2", "r3"):
        (root.published_dir("mobility") / "releases" / planted / "manifest.json").unlink()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp_path / 'ledger.sqlite'}{suffix}").unlink(missing_ok=True)
    (tmp_path / "ledger.sqlite").write_bytes(backup.read_bytes())
    (root.root / HEAD_FILE).write_bytes(head_backup)
    env = {**os.environ, "DP_LEDGER_URL": url, "DP_DATA_ROOT": str(root.root)}
    res = subprocess.run([sys.executable, "-m", "dp_ops", "ledger", "--verify"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "release mobility/r1: this ledger recorded no such release" in res.stdout


def test_row7_a_whole_rollback_is_caught_by_what_was_announced(tmp_path: Path) -> None:
    """Issue 31, attack 7: the ledger and the whole data root (published/ included)
    restored from a backup taken before a release: nothing inside the data root remembers
    it. The host's record of each publish (Airflow's release asset events, outside the
    data root) does: every noise step and publish refuses while a release announced from
    this data root is not held by the ledger. Events of other data roots are ignored."""
    from dp_ops.errors import LedgerTampered
    from dp_ops.steps.ledger_binding import (
        announcement_problems,
        require_sound,
        use_announcements,
    )

    root = DataRoot(tmp_path / "data")
    root.root.mkdir()
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    led = open_ledger(root, url)
    _spend(led, "a")
    led.dispose()
    backup = {p.name: p.read_bytes() for p in (tmp_path / "ledger.sqlite",
                                               root.root / IDENTITY_FILE, root.root / HEAD_FILE)}
    led = open_ledger(root, url)
    _spend(led, "b")
    _publish_manifest(root, "r1", ledger_anchor(led), led)
    manifest = root.published_dir("mobility") / "releases" / "r1" / "manifest.json"
    announced = [{"report": "mobility", "release_id": "r1",
                  "manifest_sha256": sha256_file(manifest),
                  "data_root": str(root.root.resolve())},
                 {"report": "mobility", "release_id": "elsewhere", "manifest_sha256": "0" * 64,
                  "data_root": str(tmp_path / "another")}]
    assert announcement_problems(root, led, announced) == []
    led.dispose()
    # the rollback: ledger, identity and mark from the backup, the release gone
    for suffix in ("-wal", "-shm"):
        Path(f"{tmp_path / 'ledger.sqlite'}{suffix}").unlink(missing_ok=True)
    (tmp_path / "ledger.sqlite").write_bytes(backup["ledger.sqlite"])
    for name in (IDENTITY_FILE, HEAD_FILE):
        (root.root / name).write_bytes(backup[name])
    shutil.rmtree(root.published_dir("mobility"))
    led = open_ledger(root, url)
    try:
        assert release_problems(root, led) == []  # nothing in the data root says so
        (problem,) = announcement_problems(root, led, announced)
        assert "release mobility/r1 was announced" in problem
        use_announcements(lambda: announced)
        try:
            with pytest.raises(LedgerTampered, match="r1 was announced"):
                require_sound(root, led)
        finally:
            use_announcements(None)
        require_sound(root, led)  # outside a host that keeps them: the data root's view
    finally:
        led.dispose()


def test_verify_fails_on_an_identity_record_written_without_the_key(tmp_path: Path) -> None:
    """`ledger --verify` checks the data root's records under the ledger key: an identity
    record rewritten by someone without it (here its MAC zeroed) exits 1, naming it."""
    root = DataRoot(tmp_path / "data")
    root.root.mkdir()
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    open_ledger(root, url).dispose()
    record = json.loads((root.root / IDENTITY_FILE).read_text())
    (root.root / IDENTITY_FILE).write_text(json.dumps({**record, "mac": "0" * 64}))
    env = {**os.environ, "DP_LEDGER_URL": url, "DP_DATA_ROOT": str(root.root)}
    res = subprocess.run([sys.executable, "-m", "dp_ops", "ledger", "--verify"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "ledger_identity.json: its MAC does not verify" in res.stdout
