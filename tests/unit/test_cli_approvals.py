"""``python -m dp_ops run ... --renoise`` is an administrator's path, but not an unapproved
one (issue 31, point 4): it needs ``--approved-by`` someone other than the requester
(``--requested-by``, by default the operating-system user), recorded in the ledger as a
command-line approval before anything runs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from dp_demo.geography import demo_regions

from dp_ops import cli
from dp_ops.layout import DataRoot, ledger_url
from dp_ops.privacy.ledger import Ledger
from dp_ops.regions import write_regions

DAY = date(2020, 3, 1)


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[len(handlers):]:
        handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def root(dp_data_root: Path) -> DataRoot:
    """A data root with its region table and nothing else: a run stops at ingest."""
    data = DataRoot(dp_data_root)
    write_regions(demo_regions(), data.regions_csv)
    return data


def _renoise(*extra: str) -> int:
    return cli.main(["run", "mobility", "--start", DAY.isoformat(), "--end", DAY.isoformat(),
                     "--region", "DM-01",
                     "--renoise", "--reason", "raw data corrected", "--run-id", "cli__t",
                     *extra])


def _approvals(root: DataRoot) -> list[Any]:
    ledger = Ledger(ledger_url(root))
    try:
        return list(ledger.approvals())
    finally:
        ledger.dispose()


def test_a_cli_renoise_without_an_approver_is_refused(
        root: DataRoot, capsys: pytest.CaptureFixture[str]) -> None:
    assert _renoise() == 2
    err = capsys.readouterr().err
    assert "error: --renoise needs --approved-by NAME" in err and "nothing was spent" in err
    assert not (root.root / "work").exists()  # refused before any step ran


def test_a_cli_renoise_approved_by_its_requester_is_refused(
        root: DataRoot, capsys: pytest.CaptureFixture[str]) -> None:
    assert _renoise("--approved-by", "alice", "--requested-by", "alice") == 2
    assert "the approver 'alice' is the requester" in capsys.readouterr().err
    assert _approvals(root) == []


def test_a_cli_approval_is_recorded_as_such(root: DataRoot) -> None:
    """Recorded before the run starts (here it then stops at ingest: no raw data), naming
    both people and the command line as who vouched for them."""
    from dp_ops.privacy.ledger import VIA_CLI
    from dp_ops.reports.mobility.declaration import REPORT
    from dp_ops.steps.noising import renoise_request

    assert _renoise("--approved-by", "bob", "--requested-by", "alice") == 2
    (approval,) = _approvals(root)
    request = renoise_request(REPORT.noise_plan(root, REPORT.load_config()), DAY, "DM-01",
                              "raw data corrected",
                              False)
    assert (approval.run_id, approval.requester, approval.approver, approval.via) == (
        "cli__t", "alice", "bob", VIA_CLI)
    assert approval.request_sha256 == request.sha256()
