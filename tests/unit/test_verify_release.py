"""``dp-ops verify-release``: what a consumer runs on a downloaded release. A good release
verifies; each of a dozen kinds of damage is found and named; it reads nothing but the
release directory (issue 33, point 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from dp_ops.cli import main
from dp_ops.engine.files import json_bytes
from dp_ops.reports.mobility.release import write_release_files
from dp_ops.reports.mobility.report import CHANGE_COLUMNS, PUBLISHED_COLUMNS, ROW_KEY
from dp_ops.steps.release import checksums, epsilon_summary
from dp_ops.steps.release_values import GateOutcome, Manifest
from dp_ops.verify_release import verify_release

INTERVALS = "Global_Mobility_Report_intervals.csv"
CSV = "Global_Mobility_Report.csv"
PARQUET = "Global_Mobility_Report.parquet"


def _rows() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series([""] * 3, dtype="object") for c in PUBLISHED_COLUMNS})
    frame["country_region_code"], frame["country_region"] = "DM", "Demoland"
    frame["place_id"] = "ChIJ-demo"
    frame["date"] = ["2020-02-15", "2020-02-16", "2020-02-17"]
    for c in PUBLISHED_COLUMNS[9:]:
        frame[c] = pd.array([4, None, -20], dtype="Int64")
    return frame


def _intervals(published: pd.DataFrame) -> pd.DataFrame:
    """The sidecar of ``published``: each change's interval, 3 below to 4 above it."""
    frame = published[list(ROW_KEY)].copy()
    for c in CHANGE_COLUMNS:
        frame[f"{c}_low"] = published[c] - 3
        frame[f"{c}_high"] = published[c] + 4
    return frame


def _manifest(release: Path) -> dict[str, object]:
    epsilon = epsilon_summary({date(2020, 2, 15): 2.0}, normal_run=2.0, cap=4.0,
                              composition="basic")
    return Manifest(
        report="mobility", release_id="2020-02-17-0123456789ab", run_id="r1",
        software_version="0.1.0", method_version="v1", first_date=date(2020, 2, 15),
        last_date=date(2020, 2, 17),
        inputs={"region_table_sha256": "a" * 64, "baseline_sha256": "c" * 64,
                "baseline_window": ["2020-01-03", "2020-02-06"]},
        rows={"published": 3}, suppression={}, epsilon=epsilon,
        ledger={"ledger_id": "l", "chain_seq": 3, "chain_sha256": "b" * 64},
        files=checksums(release), gate=GateOutcome(True, 12, None),
        extras={"method_updates": []}).as_dict()


@pytest.fixture
def release(tmp_path: Path) -> Path:
    target = tmp_path / "releases" / "2020-02-17-0123456789ab"
    write_release_files(_rows(), target, _intervals(_rows()))
    (target / "index.html").write_text("<!doctype html><title>release</title>\n")
    (target / "manifest.json").write_bytes(json_bytes(_manifest(target)))
    return target


def test_a_good_release_verifies(release: Path) -> None:
    outcome = verify_release(release)
    assert outcome.ok, outcome.problems
    assert (outcome.report, outcome.release_id) == ("mobility", "2020-02-17-0123456789ab")
    assert outcome.files_checked == len(json.loads((release / "manifest.json").read_text())
                                        ["files"])
    assert outcome.text().startswith("OK: release 2020-02-17-0123456789ab")


def _relist(release: Path) -> None:
    """Rewrite the manifest's file list for the files as they are now (an attacker who
    edits a file and its checksum: only the column schema can catch a broken file)."""
    manifest = json.loads((release / "manifest.json").read_text())
    files = checksums(release)
    del files["manifest.json"]
    manifest["files"] = files
    (release / "manifest.json").write_bytes(json_bytes(manifest))


def _edit_manifest(change: Callable[[dict[str, object]], None]) -> Callable[[Path], None]:
    def apply(release: Path) -> None:
        manifest = json.loads((release / "manifest.json").read_text())
        change(manifest)
        (release / "manifest.json").write_bytes(json_bytes(manifest))
    return apply


def _replace_csv_header(release: Path) -> None:
    csv = release / CSV
    csv.write_text(csv.read_text().replace("parks_percent", "park_percent", 1))
    _relist(release)


def _link_outside(release: Path) -> None:
    outside = release.parent / "elsewhere.csv"
    outside.write_bytes((release / CSV).read_bytes())
    (release / CSV).unlink()
    os.symlink(outside, release / CSV)


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "a value edited": (lambda r: (r / CSV).write_text(
        (r / CSV).read_text().replace(",4,", ",5,", 1)), f"{CSV}: its sha256 is not"),
    "a file deleted": (lambda r: (r / PARQUET).unlink(),
                       f"{PARQUET}: listed in the manifest but missing"),
    "a file planted": (lambda r: (r / "extra.csv").write_text("a\n"),
                       "extra.csv: in the release directory but not listed"),
    "a file truncated": (lambda r: (r / PARQUET).write_bytes(
        (r / PARQUET).read_bytes()[:100]), f"{PARQUET}: 100 bytes, the manifest says"),
    "no manifest": (lambda r: (r / "manifest.json").unlink(), "manifest.json: missing"),
    "a manifest that is not JSON": (lambda r: (r / "manifest.json").write_text("{oops"),
                                    "manifest.json: not readable JSON"),
    "an accounting claiming delta > 0": (
        _edit_manifest(lambda m: m["epsilon"].update(delta=1)),  # type: ignore[attr-defined]
        "manifest.json: manifest['epsilon']['delta']"),
    "an unknown contract version": (
        _edit_manifest(lambda m: m.update(schema_version="9.0")),
        "schema_version '9.0'"),
    "a listed path out of the release": (
        _edit_manifest(lambda m: m["files"].update(  # type: ignore[attr-defined]
            {"../../etc/passwd": {"sha256": "0" * 64, "bytes": 1}})),
        "'../../etc/passwd': points outside the release"),
    "a file swapped for a link out of the release": (
        _link_outside, f"{CSV}: is (or passes through) a symbolic link"),
    "a column renamed, its checksum updated": (
        _replace_csv_header, f"{CSV}: "),
    "a gate that did not pass": (
        _edit_manifest(lambda m: m["gate"].update(success=False)),  # type: ignore[attr-defined]
        "manifest['gate']['success']"),
    "a 1.2 release without its intervals sidecar": (
        lambda r: ((r / INTERVALS).unlink(), _relist(r)),
        f"{INTERVALS}: no such file in the release"),
    "a release id that is no content id": (
        _edit_manifest(lambda m: m.update(release_id="latest")), "manifest['release_id']"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_each_kind_of_damage_is_found_and_named(release: Path, damage: str) -> None:
    apply, expected = DAMAGE[damage]
    apply(release)
    outcome = verify_release(release)
    assert not outcome.ok
    assert any(expected in p for p in outcome.problems), outcome.problems
    assert outcome.text().startswith("NOT VERIFIED")


def test_the_command_exits_0_1_or_2(release: Path, capsys: pytest.CaptureFixture[str],
                                    tmp_path: Path) -> None:
    assert main(["verify-release", str(release)]) == 0
    assert capsys.readouterr().out.startswith("OK:")
    (release / "extra.txt").write_text("planted")
    assert main(["verify-release", "--json", str(release)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verified"] is False and out["problems"] == [
        "extra.txt: in the release directory but not listed in the manifest"]
    assert main(["verify-release", str(tmp_path / "nowhere")]) == 2
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "cols.json").write_text("[]")
    assert main(["verify-release", "--columns", str(tmp_path / "cols.json"),
                 str(release)]) == 2


def test_a_report_dp_ops_does_not_ship_needs_its_column_schema(release: Path) -> None:
    _edit_manifest(lambda m: m.update(report="presence"))(release)
    outcome = verify_release(release)
    assert outcome.ok and "no column schema is shipped for report 'presence'" in (
        outcome.notes[0])
    from dp_ops.steps.release_contract import load_schema

    mobility = load_schema("mobility.columns.json")
    assert verify_release(release, {**mobility, "report": "presence"}).ok


def test_it_reads_nothing_but_the_release(release: Path, tmp_path: Path) -> None:
    """Run as a consumer would, from an empty directory with no data root, ledger or
    Airflow settings: nothing is written, and the outcome is the same."""
    cwd = tmp_path / "consumer"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DP_", "AIRFLOW"))}
    res = subprocess.run([sys.executable, "-m", "dp_ops", "verify-release", str(release)],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("OK:") and list(cwd.iterdir()) == []


def test_a_release_of_contract_1_1_still_verifies(release: Path) -> None:
    """Old releases stay readable: a 1.1 release had no intervals sidecar, and the
    1.2 reader does not ask for one (a 1.2 release without it fails, above)."""
    for name in (INTERVALS, INTERVALS.replace(".csv", ".parquet")):
        (release / name).unlink()
    _relist(release)
    _edit_manifest(lambda m: m.update(schema_version="1.1"))(release)
    outcome = verify_release(release)
    assert outcome.ok, outcome.problems
