"""The mobility publish step refuses a release whose composed epsilon per user-day on a
released (or baseline-window) date exceeds the cap, and says so."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
from support.spend_requests import spend_request

from dp_ops.errors import PublishRefused
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger, Slot
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.mobility.release import PARTS, staging_dir
from dp_ops.steps.release import write_empty_staged, write_staged
from dp_ops.steps.release_flow import publish_staged
from dp_ops.steps.release_values import GateOutcome, Staged

CFG = MobilityConfig()


def _spend_normal_run(url: str, day: date) -> None:
    ledger = Ledger(url)
    try:
        ledger.reserve([spend_request(Slot("mobility", day, level, b.name), b.epsilon)
                        for level in CFG.levels for b in CFG.metric_budgets],
                       run_id="r", kind="noise", cap=CFG.cap, method_version="v1")
    finally:
        ledger.dispose()


@pytest.mark.parametrize("day", [date(2020, 3, 2), date(2020, 1, 10)])  # released; baseline
def test_publish_refuses_over_the_cap(tmp_path: Path, day: date) -> None:
    root = DataRoot(tmp_path / "data")
    root.root.mkdir()
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    _spend_normal_run(url, day)  # 8.58 per user-day
    stage = staging_dir(root, "run-x")
    (stage / "release").mkdir(parents=True)
    write_staged(stage, Staged(
        run_id="run-x", first_date=date(2020, 2, 15), last_date=date(2020, 3, 31), files={},
        rows={}, suppression={}, inputs_sha256="0" * 64, build_key="0" * 64,
        gate=GateOutcome(True, 1, None), charts=[], uncharted_levels=[]))
    lowered = MobilityConfig(cap_override=5.0)
    with pytest.raises(PublishRefused, match=r"8\.58.*over the cap 5\.0000"):
        publish_staged(PARTS, root, lowered, run_id="run-x", ledger_url=url)
    assert not root.latest_release("mobility").exists()


def test_a_staged_record_written_outside_the_gate_is_refused(tmp_path: Path) -> None:
    """Issue 31: the staging area is in the data root. A staged record planted or edited
    there (here: one claiming the gate passed) carries no valid MAC under the ledger key
    and is refused before anything is read from the staged files."""
    import json

    root = DataRoot(tmp_path / "data")
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    Ledger(url).dispose()  # the ledger and its key, as the noise step leaves them
    stage = staging_dir(root, "run-x")
    (stage / "release").mkdir(parents=True)
    write_empty_staged(stage, "run-x")
    (stage / "staged.json").write_text(json.dumps({
        "empty": False, "run_id": "run-x", "first_date": "2020-02-15",
        "last_date": "2020-03-31", "files": {}, "rows": {}, "suppression": {},
        "gate": {"success": True, "evaluated": 1, "data_docs": None}}))
    with pytest.raises(PublishRefused, match="MAC does not verify"):
        publish_staged(PARTS, root, CFG, run_id="run-x", ledger_url=url)
    assert not root.latest_release("mobility").exists()
