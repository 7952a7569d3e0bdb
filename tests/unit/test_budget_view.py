"""What the Privacy budget view shows (dp_ops.budget_view), from a real ledger and
manifests on disk; the plugin itself is tested through a real api-server
(tests/integration/test_ui_browser.py)."""

from __future__ import annotations

import hashlib
import json
from datetime import date
from pathlib import Path

import pytest
from support.approvals import reserve_approved
from support.spend_requests import spend_request

from dp_ops.budget_view import (
    NOT_RECORDED,
    group_spends,
    release_history,
    render_page,
    report_budget,
    to_json,
)
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import ALL_REGIONS, Ledger, Slot
from dp_ops.steps.ledger_binding import record_release

D1, D2 = date(2020, 3, 1), date(2020, 3, 2)
CAP, NORMAL = 3.0, 1.0


@pytest.fixture
def ledger(ledger: Ledger) -> Ledger:
    """The shared SQLite ledger (tests/unit/conftest.py) with two days of spends and an
    approved re-noise."""
    for day in (D1, D2):
        ledger.reserve([spend_request(Slot("mobility", day, lvl, "places", ALL_REGIONS), 0.5)
                        for lvl in (0, 1)], run_id=f"backfill__{day}", kind="noise", cap=CAP,
                       method_version="v1")
    reserve_approved(ledger, [spend_request(Slot("mobility", D2, 1, "places", "R-1"), 0.75)],
                     run_id="oncall__1", kind="renoise", cap=CAP, method_version="v1",
                     reason="INC-7 <script>alert(1)</script>")
    return ledger


def _release(root: Path, release_id: str, last: str, eps: float, latest: bool,
             ledger: Ledger | None) -> None:
    """A release directory with a manifest, recorded in ``ledger`` as publish records it
    (None: a directory the ledger never recorded)."""
    path = root / "published" / "mobility" / "releases" / release_id
    path.mkdir(parents=True)
    data = json.dumps({
        "first_date": "2020-02-15", "last_date": last,
        "epsilon": {"per_user_day_max": eps},
        "suppression": {"values": {"cells": {"published_share": 0.625}}},
        "gate": {"success": True, "evaluated": 40}}).encode()
    (path / "manifest.json").write_bytes(data)
    if ledger is not None:
        record_release(ledger, "mobility", release_id, hashlib.sha256(data).hexdigest())
    if latest:
        (root / "published" / "mobility" / "latest").symlink_to(path)


def test_the_totals_are_the_ledgers(ledger: Ledger, tmp_path: Path) -> None:
    b = report_budget(DataRoot(tmp_path), ledger, "mobility", cap=99.0, normal_run=NORMAL)
    assert b.cap == CAP  # the recorded cap, not the configured one
    assert b.totals == {day.isoformat(): total
                        for (_, day), total in ledger.totals("mobility").items()}
    assert b.totals == {"2020-03-01": 1.0, "2020-03-02": 1.75}
    assert [d.day for d in b.above_normal] == [D2]
    assert min(d.headroom for d in b.dates) == pytest.approx(1.25)


def test_spends_are_grouped_by_date_kind_run_and_reason(ledger: Ledger) -> None:
    groups = group_spends(ledger.spends("mobility"))
    assert [(g.day, g.kind, g.run_id, g.slots, g.epsilon) for g in groups] == [
        (D1, "noise", "backfill__2020-03-01", 2, 1.0),
        (D2, "noise", "backfill__2020-03-02", 2, 1.0),
        (D2, "renoise", "oncall__1", 1, 0.75)]


def test_release_history_newest_first_with_latest_marked(ledger: Ledger,
                                                         tmp_path: Path) -> None:
    _release(tmp_path, "2020-03-01-aaaa", "2020-03-01", 1.0, latest=False, ledger=ledger)
    _release(tmp_path, "2020-03-02-bbbb", "2020-03-02", 1.75, latest=True, ledger=ledger)
    rows = release_history(DataRoot(tmp_path), "mobility", ledger)
    assert [(r.release_id, r.latest, r.epsilon_max) for r in rows] == [
        ("2020-03-02-bbbb", True, 1.75), ("2020-03-01-aaaa", False, 1.0)]
    assert rows[0].published_share == {"cells": 0.625} and rows[0].gate_success


def test_a_release_the_ledger_never_recorded_is_not_shown(ledger: Ledger,
                                                          tmp_path: Path) -> None:
    """Route 6 of issue 48: a self-consistent release planted under ``releases/``, and
    ``latest`` pointed at it, is listed as not the ledger's, with none of its figures, and
    is neither the latest nor linked; the recorded one keeps its figures."""
    _release(tmp_path, "2020-03-01-aaaa", "2020-03-01", 1.0, latest=False, ledger=ledger)
    _release(tmp_path, "2020-03-09-ffff", "2020-03-09", 0.01, latest=True, ledger=None)
    rows = release_history(DataRoot(tmp_path), "mobility", ledger)
    planted, recorded = rows
    assert planted.release_id == "2020-03-09-ffff" and planted.malformed
    assert not planted.latest and planted.epsilon_max is None
    assert planted.problems == (NOT_RECORDED,)
    assert (recorded.release_id, recorded.epsilon_max) == ("2020-03-01-aaaa", 1.0)
    b = report_budget(DataRoot(tmp_path), ledger, "mobility", cap=CAP, normal_run=NORMAL)
    page = render_page([b], {"mobility": {"release": "/dp-budget/release/mobility/index.html"}},
                       "the ledger's hash chain verifies")
    assert "/dp-budget/release/mobility/index.html" not in page  # no release is linked
    assert "0.0100" not in page  # the planted release's epsilon


def test_the_page_escapes_what_people_typed(ledger: Ledger, tmp_path: Path) -> None:
    _release(tmp_path, "2020-03-02-bbbb", "2020-03-02", 1.75, latest=True, ledger=ledger)
    b = report_budget(DataRoot(tmp_path), ledger, "mobility", cap=CAP, normal_run=NORMAL)
    page = render_page([b], {"mobility": {"release": "/dp-budget/release/mobility/index.html",
                                          "data_docs": "/dp-budget/data-docs/index.html"}},
                       "the ledger's hash chain verifies")
    assert "<script>alert(1)</script>" not in page
    assert "INC-7 &lt;script&gt;" in page
    assert "oncall__1" in page and "2020-03-02-bbbb" in page and "62.50%" in page
    assert page.count("<rect") == 2  # one bar per date
    data = to_json([b])["mobility"]
    assert data["above_normal"] == ["2020-03-02"] and data["cap"] == CAP
    assert json.dumps(data)  # plain JSON
