"""Kill the pipeline hard (SIGKILL) at its most dangerous points, rerun it, and check that
it kept its promises (issue 6, point 1; docs/design.md, Operations, "Idempotence").

Each case starts from a copy of a data root that already holds a published release (the
"previous release", through ``D0``), runs the next day ``D1`` through the real CLI in a
child process with ``DP_FAULT=<point>`` so that it dies with SIGKILL, and then checks:

- while the process lay dead: ``latest`` still points at the previous release, whose files
  all match its manifest's checksums; nothing partial or temporary is visible under
  ``published/`` (every release directory there is complete and verifies);
- after a rerun without the fault: no ledger slot is spent twice;
- the final release is byte-identical to the release of an uninterrupted run of ``D1``
  from the previous state with the same stored noise (the noise files and ledger of the
  recovered run copied into a fresh copy of the previous state). Only the manifest's run
  id and Data Docs path, which name the run, and its ledger anchor may differ.

The child is the CLI (``python -m dp_ops run``), which calls the same step functions as
the Airflow operators; Airflow's own retry of a killed task is covered by
``test_airflow_operations.py``.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.pipeline_helpers import (
    LAST_BEFORE,
    assert_one_spend_per_slot,
    assert_published_consistent,
    copy_root,
    latest,
    ok,
    release_files,
    run_day,
    uninterrupted_reference,
    verify_release,
)

from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.regions import read_regions

# shares ``previous`` with the other modules of its xdist group (one worker builds it)
pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.xdist_group("previous")]


def comparable_manifest(directory: Path) -> dict[str, Any]:
    """The manifest without what names the run (its id, its Data Docs page) or the ledger
    entry it was published at: the reference runs on a copy of the recovered ledger,
    which already holds the recovered run's record of its release, so its chain is one
    entry longer at publish."""
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest.pop("run_id")
    manifest["gate"].pop("data_docs")
    assert manifest.pop("ledger")["ledger_id"]
    return dict(manifest)


CASES = [
    ("mobility", "noise.after_reserve"),
    ("mobility", "noise.after_draw"),
    ("mobility", "noise.after_store@2"),
    ("mobility", "release.mid_write"),
    ("mobility", "publish.before_rename"),
    ("mobility", "publish.after_rename"),
    ("symptoms", "noise.after_draw"),
    ("symptoms", "noise.after_store"),
    ("symptoms", "release.mid_write"),
    ("symptoms", "publish.after_scaling"),
    ("symptoms", "publish.after_rename"),
]


@pytest.mark.parametrize("report, point", CASES, ids=[f"{r}-{p}" for r, p in CASES])
def test_a_kill_then_a_rerun_gives_the_uninterrupted_release(
        previous: dict[str, Path], tmp_path: Path, report: str, point: str) -> None:
    assert (DataRoot(previous[report]).default_ledger_url.endswith("ledger.sqlite"))
    root = copy_root(previous[report], tmp_path / "crashed")
    day = LAST_BEFORE[report] + timedelta(days=1)
    before = latest(root, report)
    before_manifest = verify_release(before)

    killed = run_day(root, report, day, "--run-id", "crashed", fault=point)
    assert killed.returncode == -signal.SIGKILL, (
        f"the fault {point} did not fire: exit {killed.returncode}\n{killed.stderr[-2000:]}")
    # while dead: readers still get the previous release, whole
    assert latest(root, report) == before
    assert verify_release(before) == before_manifest
    assert_published_consistent(root, report)

    ok(run_day(root, report, day, "--run-id", "rerun"))
    assert_one_spend_per_slot(root, report)
    assert_published_consistent(root, report)
    final = latest(root, report)
    assert final != before and verify_release(final)["last_date"] == day.isoformat()

    ref_root = uninterrupted_reference(previous[report], root, report, day, tmp_path / "ref")
    reference = latest(ref_root, report)
    assert final.name == reference.name  # the release id names the content
    assert release_files(final) == release_files(reference)
    assert comparable_manifest(final) == comparable_manifest(reference)


def test_a_killed_renoise_retried_by_the_same_run_spends_once(
        previous: dict[str, Path], tmp_path: Path) -> None:
    """An on-call re-noise dies after drawing, before storing; Airflow retries it with the
    same run id: the ledger holds one re-noise spend per slot of the region's chain, and
    the release uses the stored values."""
    report, day = "mobility", LAST_BEFORE["mobility"]
    root = copy_root(previous[report], tmp_path / "crashed")
    regions = read_regions(DataRoot(root).regions_csv)
    region = str(regions.loc[regions["level"] == 2, "region_id"].iloc[0])
    args = ("--region", region, "--renoise", "--reason", "raw data corrected",
            "--run-id", "oncall-1", "--approved-by", "approver")
    killed = run_day(root, report, day, *args, fault="noise.after_draw")
    assert killed.returncode == -signal.SIGKILL
    ok(run_day(root, report, day, *args))
    ledger = Ledger(DataRoot(root).default_ledger_url)
    try:
        renoises = [s for s in ledger.spends(report, day) if s.kind == "renoise"]
    finally:
        ledger.dispose()
    per_slot = Counter(s.slot for s in renoises)
    assert per_slot and set(per_slot.values()) == {1}
    assert {s.slot.region_scope for s in renoises} <= {
        rid for rid in regions["region_id"]}  # the region and its ancestors only
    assert region in {s.slot.region_scope for s in renoises}
    assert_published_consistent(root, report)
