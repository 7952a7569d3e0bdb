"""``dp-ops verify-release``: what a consumer runs on a downloaded release. A good release
verifies; each of a dozen kinds of damage is found and named; it reads nothing but the
release directory (issue 33, point 4). With ``--public-key`` it authenticates the release
by its manifest's signature, and without one it says it checked integrity only; files
that disagree with each other (a CSV edited alone, an interval that misses its value)
are refused even when every checksum was recomputed (issue 48, route 4)."""

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
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.release_keys import allowed_signers, session_signer, sign_manifest

from dp_ops.cli import main
from dp_ops.engine.files import json_bytes
from dp_ops.release_signing import SIGNATURE_FILE, ReleaseSigner
from dp_ops.reports.mobility.release import write_release_files
from dp_ops.reports.mobility.report import CHANGE_COLUMNS, PUBLISHED_COLUMNS, ROW_KEY
from dp_ops.sshsig import trusted_keys
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
        extras={"method_updates": []},
        signature=session_signer().manifest_fields()).as_dict()


@pytest.fixture
def release(tmp_path: Path) -> Path:
    target = tmp_path / "releases" / "2020-02-17-0123456789ab"
    write_release_files(_rows(), target, _intervals(_rows()))
    (target / "index.html").write_text("<!doctype html><title>release</title>\n")
    (target / "manifest.json").write_bytes(json_bytes(_manifest(target)))
    sign_manifest(target)
    return target


def test_a_good_release_verifies(release: Path) -> None:
    outcome = verify_release(release)
    assert outcome.ok, outcome.problems
    assert (outcome.report, outcome.release_id) == ("mobility", "2020-02-17-0123456789ab")
    assert outcome.files_checked == len(json.loads((release / "manifest.json").read_text())
                                        ["files"])
    assert outcome.text().startswith("INTEGRITY ONLY, NOT AUTHENTICATED: release "
                                     "2020-02-17-0123456789ab")
    signed = verify_release(release, trusted=trusted_keys(
        session_signer().allowed_signers_line()))
    assert signed.ok and signed.authenticated_by == session_signer().fingerprint
    assert signed.text().startswith("OK: release 2020-02-17-0123456789ab")


def _relist(release: Path) -> None:
    """Rewrite the manifest's file list for the files as they are now and sign it again
    with the publisher's key (damage the signature cannot catch: only the column schema
    and the cross-checks can)."""
    manifest = json.loads((release / "manifest.json").read_text())
    files = checksums(release)
    del files["manifest.json"], files[SIGNATURE_FILE]
    manifest["files"] = files
    (release / "manifest.json").write_bytes(json_bytes(manifest))
    sign_manifest(release)


def _edit_manifest(change: Callable[[dict[str, object]], None]) -> Callable[[Path], None]:
    """Edit the manifest and sign it again with the publisher's key (damage only the
    schema catches)."""
    def apply(release: Path) -> None:
        manifest = json.loads((release / "manifest.json").read_text())
        change(manifest)
        (release / "manifest.json").write_bytes(json_bytes(manifest))
        sign_manifest(release)
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
    assert capsys.readouterr().out.startswith("INTEGRITY ONLY, NOT AUTHENTICATED:")
    keys = allowed_signers(tmp_path)
    assert main(["verify-release", "--public-key", str(keys), str(release)]) == 0
    assert capsys.readouterr().out.startswith("OK:")
    (tmp_path / "nokey").write_text("# nothing\n")
    assert main(["verify-release", "--public-key", str(tmp_path / "nokey"), str(release)]) == 2
    assert "holds no ssh-ed25519 key" in capsys.readouterr().err
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
    from dp_ops.reports.mobility.release import CONTRACT as mobility

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
    assert res.stdout.startswith("INTEGRITY ONLY") and list(cwd.iterdir()) == []


def test_a_release_of_contract_1_1_still_verifies(release: Path) -> None:
    """Old releases stay readable: a 1.1 release had no intervals sidecar, and the
    1.2 reader does not ask for one (a 1.2 release without it fails, above)."""
    for name in (INTERVALS, INTERVALS.replace(".csv", ".parquet")):
        (release / name).unlink()
    _relist(release)
    _edit_manifest(lambda m: m.update(schema_version="1.1"))(release)
    outcome = verify_release(release)
    assert outcome.ok, outcome.problems


# -- authenticity: a mirror's forgery (issue 48, route 4) -----------------------------------
def _forge(release: Path, signer: ReleaseSigner | None) -> None:
    """What a mirror does: a value edited in every copy of it (CSV, Parquet, intervals
    stay consistent: the files are rewritten from the edited rows), the privacy claim
    lowered, every size and sha256 recomputed; signed with the mirror's own key, or the
    signature left as it was (``signer`` None)."""
    rows = _rows()
    rows.loc[0, PUBLISHED_COLUMNS[9]] = 40
    write_release_files(rows, release, _intervals(rows))
    manifest = json.loads((release / "manifest.json").read_text())
    manifest["epsilon"]["per_user_day_max"] = 0.1
    files = checksums(release)
    del files["manifest.json"], files[SIGNATURE_FILE]
    manifest["files"] = files
    if signer is not None:
        manifest["signature"] = signer.manifest_fields()
    (release / "manifest.json").write_bytes(json_bytes(manifest))
    if signer is not None:
        sign_manifest(release, signer)


def _publisher() -> list:  # type: ignore[type-arg]
    return trusted_keys(session_signer().allowed_signers_line())


@pytest.mark.parametrize("resigned", [False, True], ids=["old signature", "mirror's key"])
def test_a_forged_release_with_recomputed_checksums_is_refused_with_the_public_key(
        release: Path, resigned: bool) -> None:
    _forge(release, ReleaseSigner(Ed25519PrivateKey.generate()) if resigned else None)
    outcome = verify_release(release, trusted=_publisher())
    assert not outcome.ok and outcome.authenticated_by is None
    assert any(p.startswith(f"{SIGNATURE_FILE} / manifest.json: ") for p in outcome.problems
               ), outcome.problems
    assert outcome.text().startswith("NOT VERIFIED")


def test_without_a_public_key_a_forgery_is_integrity_only_never_a_bare_ok(
        release: Path) -> None:
    """A forgery re-signed with the mirror's own key is internally consistent: without
    the publisher's key the verdict says so plainly (exit 0, not "OK")."""
    _forge(release, ReleaseSigner(Ed25519PrivateKey.generate()))
    outcome = verify_release(release)
    assert outcome.ok and outcome.authenticated_by is None
    assert outcome.text().startswith("INTEGRITY ONLY, NOT AUTHENTICATED")
    assert "OK" not in outcome.text().split(":")[0]


def test_an_unsigned_release_cannot_be_authenticated(release: Path) -> None:
    _edit_manifest(lambda m: m.update(signature={"format": "unsigned", "note": "x"}))(release)
    (release / SIGNATURE_FILE).unlink()
    assert verify_release(release).ok
    outcome = verify_release(release, trusted=_publisher())
    assert outcome.problems == (
        "manifest.json: the release is not signed, so --public-key cannot authenticate it",)


def test_a_one_byte_edit_of_the_manifest_or_of_a_file_fails_with_the_public_key(
        release: Path) -> None:
    manifest = release / "manifest.json"
    original = manifest.read_bytes()
    manifest.write_bytes(original.replace(b'"per_user_day_max": 2.0', b'"per_user_day_max": 1.0'))
    assert manifest.read_bytes() != original
    outcome = verify_release(release, trusted=_publisher())
    assert any("does not verify" in p for p in outcome.problems), outcome.problems
    manifest.write_bytes(original)
    data = release / PARQUET
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 1
    data.write_bytes(bytes(raw))
    outcome = verify_release(release, trusted=_publisher())
    assert outcome.problems == (f"{PARQUET}: its sha256 is not the manifest's (changed since "
                                "it was published)",)


# -- the files agree with each other ---------------------------------------------------------
def _csv_value_edited(release: Path) -> None:
    (release / CSV).write_text((release / CSV).read_text().replace(",4,", ",5,", 1))
    _relist(release)


def _region_csv_edited(release: Path) -> None:
    (region,) = (release / "Region_Mobility_Report_CSVs").glob("*.csv")
    region.write_text(region.read_text().replace(",-20,", ",-21,", 1))
    _relist(release)


def _rewrite_intervals(change: Callable[[pd.DataFrame], None]) -> Callable[[Path], None]:
    """Both copies of the intervals rewritten from edited intervals (so they agree with
    each other), listed and signed again."""
    def apply(release: Path) -> None:
        intervals = _intervals(_rows())
        change(intervals)
        write_release_files(_rows(), release, intervals)
        _relist(release)
    return apply


def _interval_above(frame: pd.DataFrame) -> None:
    column = f"{CHANGE_COLUMNS[0]}_low"
    frame.loc[0, column] = frame.loc[0, column] + 10  # low above the published 4


def _withheld_with_interval(frame: pd.DataFrame) -> None:
    for side in ("low", "high"):
        frame.loc[1, f"{CHANGE_COLUMNS[0]}_{side}"] = 0  # row 2's value is withheld


def _intervals_row_dropped(release: Path) -> None:
    intervals = _intervals(_rows()).iloc[:2]
    write_release_files(_rows(), release, intervals)
    _relist(release)


DISAGREEMENT: dict[str, tuple[Callable[[Path], None], str]] = {
    "the CSV edited alone": (_csv_value_edited, f"{CSV}: line 2, column"),
    "a per-country CSV edited alone": (_region_csv_edited, "line 4 is in no file"),
    "an interval that does not hold its value": (
        _rewrite_intervals(_interval_above), "row 1, 'retail_and_recreation_percent_change"),
    "a withheld value with an interval": (
        _rewrite_intervals(_withheld_with_interval), "row 2, 'retail_and_recreation"),
    "an intervals file missing a row": (_intervals_row_dropped, "2 rows, its data file has 3"),
}


@pytest.mark.parametrize("damage", sorted(DISAGREEMENT))
def test_files_that_disagree_are_refused_though_every_checksum_and_the_signature_hold(
        release: Path, damage: str) -> None:
    apply, expected = DISAGREEMENT[damage]
    apply(release)
    outcome = verify_release(release, trusted=_publisher())
    assert not outcome.ok
    assert any(expected in p for p in outcome.problems), outcome.problems


# -- the path checks, one by one --------------------------------------------------------------
def _absolute(release: Path) -> None:
    _edit_manifest(lambda m: m["files"].update(  # type: ignore[attr-defined]
        {str(release / CSV): {"sha256": "0" * 64, "bytes": 1}}))(release)


def _directory_link(release: Path) -> None:
    regions = release / "Region_Mobility_Report_CSVs"
    moved = release.parent / "regions-elsewhere"
    regions.rename(moved)
    os.symlink(moved, regions)


def _listed_twice(release: Path) -> None:
    text = (release / "manifest.json").read_text()
    entry = f'"{CSV}": '
    start = text.index(entry)
    end = text.index("}", start) + 1
    twice = text[:end] + ",\n    " + text[start:end] + text[end:]
    (release / "manifest.json").write_text(twice)
    sign_manifest(release)


def _listed_by_a_second_name(release: Path) -> None:
    (region,) = (release / "Region_Mobility_Report_CSVs").glob("*.csv")
    meta = json.loads((release / "manifest.json").read_text())["files"][
        f"Region_Mobility_Report_CSVs/{region.name}"]
    _edit_manifest(lambda m: m["files"].update(  # type: ignore[attr-defined]
        {f"Region_Mobility_Report_CSVs//{region.name}": meta}))(release)


def _unlisted_in_a_subdirectory(release: Path) -> None:
    (release / "Region_Mobility_Report_CSVs" / "2020_XX_Region_Mobility_Report.csv"
     ).write_text("planted\n")


PATHS: dict[str, tuple[Callable[[Path], None], str]] = {
    "an absolute path": (_absolute, "points outside the release"),
    "a directory swapped for a link": (_directory_link, "is (or passes through) a symbolic "
                                                        "link"),
    "a file listed twice": (_listed_twice, f"'{CSV}' appears twice"),
    "a file listed under a second name": (_listed_by_a_second_name, "listed twice"),
    "a file present but not listed": (_unlisted_in_a_subdirectory,
                                      "2020_XX_Region_Mobility_Report.csv: in the release "
                                      "directory but not listed"),
    "a listed file missing": (lambda r: (r / INTERVALS).unlink(),
                              f"{INTERVALS}: listed in the manifest but missing"),
}


@pytest.mark.parametrize("damage", sorted(PATHS))
def test_each_path_check_refuses_its_case(release: Path, damage: str) -> None:
    apply, expected = PATHS[damage]
    apply(release)
    outcome = verify_release(release, trusted=_publisher())
    assert not outcome.ok
    assert any(expected in p for p in outcome.problems), outcome.problems
