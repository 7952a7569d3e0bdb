"""The typed release records: a staged record and a manifest read back are what was
written, and a report's manifest sections cannot replace the common fields."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest

from dp_ops.errors import PublishRefused
from dp_ops.privacy.ledger import Ledger
from dp_ops.steps.release import read_staged, write_empty_staged, write_staged
from dp_ops.steps.release_values import GateOutcome, Manifest, Staged

STAGED = Staged(
    run_id="r1", first_date=date(2020, 2, 15), last_date=date(2020, 2, 20),
    files={"a.csv": {"sha256": "0" * 64, "bytes": 3}}, rows={"published": 3},
    suppression={"share": 0.5}, inputs_sha256="1" * 64, build_key="2" * 64,
    gate=GateOutcome(True, 7, "/gx/index.html"), charts=[{"region_id": "DL"}],
    uncharted_levels=[2], region="DL-1", extras={"new_scaling": []}, reused_from="r0")


@pytest.fixture
def ledger_key(tmp_path: Path) -> None:
    Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}").dispose()  # the ledger and its key


def test_a_staged_record_reads_back_as_written(tmp_path: Path, ledger_key: None) -> None:
    write_staged(tmp_path / "s", STAGED)
    assert read_staged(tmp_path / "s", "r1") == STAGED
    write_empty_staged(tmp_path / "e", "r2")
    assert read_staged(tmp_path / "e", "r2") is None
    with pytest.raises(PublishRefused, match="not the staged record of run 'r3'"):
        read_staged(tmp_path / "s", "r3")


def test_a_sealed_record_this_version_does_not_write_is_refused(
        tmp_path: Path, ledger_key: None) -> None:
    from dp_ops.steps.release import _write_record

    record = STAGED.as_record()
    del record["build_key"]
    _write_record(tmp_path / "s", record)
    with pytest.raises(PublishRefused, match="not a staged record this version reads"):
        read_staged(tmp_path / "s")


def test_a_manifest_reads_back_and_keeps_the_report_sections() -> None:
    manifest = Manifest(
        report="mobility", release_id="2020-02-20-abcdefabcdef", run_id="r1",
        software_version="0.1.0", method_version="v1", first_date=date(2020, 2, 15),
        last_date=date(2020, 2, 20), inputs={"region_table_sha256": "3" * 64},
        rows={"published": 3}, suppression={}, epsilon={"per_user_day_max": 1.0},
        ledger={"ledger_id": "x"}, files=STAGED.files, gate=STAGED.gate,
        extras={"method_updates": []})
    data = json.loads(json.dumps(manifest.as_dict()))
    assert data["method_updates"] == [] and data["gate"]["evaluated"] == 7
    assert data["first_date"] == "2020-02-15"
    assert Manifest.from_dict(data) == manifest
    with pytest.raises(ValueError, match=r"may not replace \['files'\]"):
        replace(manifest, extras={"files": {}})
