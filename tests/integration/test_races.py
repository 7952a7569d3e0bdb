"""Runs racing for the same dates, as real concurrent processes (issue 6, point 2).

A scheduled run and an on-call rerun, or two backfills, can start together. What must
hold: the ledger admits one spend per slot (the reservation is one transaction under the
ledger's write lock, so the second process waits for the first and then reuses its
spends); stored noise is first-writer-wins, so both processes report from the same noisy
values; publishing is under a lock and a release is named by its content, so the
published release is the one an uninterrupted run would give. Where only one of two can
have what it asks for (the last of the budget), the loser fails with the cap message and
nothing of it is written.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from datetime import date, timedelta
from pathlib import Path

import pytest
from support.pipeline_helpers import (
    LAST_BEFORE,
    REPO,
    assert_one_spend_per_slot,
    assert_published_consistent,
    child_env,
    copy_root,
    latest,
    release_files,
    uninterrupted_reference,
    verify_release,
)

from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.regions import read_regions
from dp_ops.reports.mobility.config import load_mobility_config

# shares ``previous`` with the other modules of its xdist group (one worker builds it)
pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.xdist_group("previous")]


def start(root: Path, report: str, first: date, last: date, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dp_ops", "run", report, "--start", first.isoformat(),
         "--end", last.isoformat(), *more],
        env=child_env(root), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str]]:
    out = []
    for proc in procs:
        _, err = proc.communicate(timeout=900)
        out.append((proc.returncode, err))
    return out


def spends_of(root: Path, report: str, day: date) -> list:
    ledger = Ledger(DataRoot(root).default_ledger_url)
    try:
        return ledger.spends(report, day)
    finally:
        ledger.dispose()


@pytest.mark.parametrize("report", ["mobility", "symptoms"])
def test_two_runs_of_the_same_day_started_together(previous: dict[str, Path], tmp_path: Path,
                                                   report: str) -> None:
    root = copy_root(previous[report], tmp_path / "raced")
    day = LAST_BEFORE[report] + timedelta(days=1)
    results = finish([start(root, report, day, day, "--run-id", "scheduled__" + str(day)),
                      start(root, report, day, day, "--run-id", "manual__rerun")])
    assert [code for code, _ in results] == [0, 0], [err[-2000:] for _, err in results]
    assert_one_spend_per_slot(root, report)
    assert_published_consistent(root, report)
    final = latest(root, report)
    assert verify_release(final)["last_date"] == day.isoformat()
    reference = latest(uninterrupted_reference(previous[report], root, report, day,
                                               tmp_path / "ref"), report)
    assert release_files(final) == release_files(reference)


def test_two_overlapping_backfills_started_together(previous: dict[str, Path],
                                                    tmp_path: Path) -> None:
    report = "mobility"
    root = copy_root(previous[report], tmp_path / "raced")
    d1 = LAST_BEFORE[report] + timedelta(days=1)
    d3 = d1 + timedelta(days=2)
    results = finish([start(root, report, d1, d3, "--run-id", "backfill-a"),
                      start(root, report, d1 + timedelta(days=1), d3, "--run-id", "backfill-b")])
    assert [code for code, _ in results] == [0, 0], [err[-2000:] for _, err in results]
    assert_one_spend_per_slot(root, report)
    assert_published_consistent(root, report)
    assert verify_release(latest(root, report))["last_date"] == d3.isoformat()
    for day in (d1, d1 + timedelta(days=1), d3):
        by_run = Counter(s.run_id for s in spends_of(root, report, day))
        assert len(by_run) == 1, f"{day}: spends from {sorted(by_run)}"  # one run paid


def test_two_renoises_race_for_the_last_of_the_budget(previous: dict[str, Path],
                                                      tmp_path: Path) -> None:
    """The default cap leaves room for one re-noise of a region-day: of two on-call runs
    asking together, one spends and publishes, the other is refused, by the cap (when
    both passed the repeat check together) or by the repeat check (when the winner's
    spend was already in the ledger): either way it writes nothing."""
    report, day = "mobility", LAST_BEFORE["mobility"]
    root = copy_root(previous[report], tmp_path / "raced")
    regions = read_regions(DataRoot(root).regions_csv)
    region = str(regions.loc[regions["level"] == 2, "region_id"].iloc[0])
    before = latest(root, report)
    results = finish([start(root, report, day, day, "--region", region, "--renoise",
                            "--reason", f"on-call {i}", "--run-id", f"oncall-{i}",
                            "--approved-by", "approver")
                      for i in (1, 2)])
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], [err[-2000:] for _, err in results]
    refusal = next(err for code, err in results if code == 2)
    assert "error:" in refusal and day.isoformat() in refusal
    assert "cap" in refusal or "already re-noised" in refusal, refusal[-2000:]
    renoises = [s for s in spends_of(root, report, day) if s.kind == "renoise"]
    assert len({s.run_id for s in renoises}) == 1  # the loser wrote nothing
    assert set(Counter(s.slot for s in renoises).values()) == {1}
    cfg = load_mobility_config()
    total = sum(s.epsilon for s in spends_of(root, report, day))
    assert total <= cfg.cap + 1e-9
    assert_published_consistent(root, report)
    assert latest(root, report) != before  # the winner republished
