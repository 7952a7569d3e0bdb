"""Publish re-checks the staged release against the record its gate sealed.

The gate and the publish are separate tasks and the staging area is in the data root,
which an attacker without the ledger key may write (PRIVACY.md). The gate seals the list
of its files and their sha256 in ``staged.json`` with a MAC under the ledger key
(``staged.mac``); publish refuses, before anything is published or stored, a staged file
edited, added or removed since, and a sealed record edited, swapped for another run's or
left without its MAC. The control publishes the same staging area untouched.

One symptoms release is staged once per module (a real gate) and copied, data root and
ledger together, for each case. No test here is statistical.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from dp_demo.geography import demo_regions
from support.day_records import write_days

from dp_ops.errors import PublishRefused
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.privacy.noise import add_discrete_laplace, noise_generator
from dp_ops.regions import write_regions
from dp_ops.reports.symptoms import release
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.reports.symptoms.daily import with_reliability
from dp_ops.sources.search_activity import symptom_list
from dp_ops.steps import release_flow
from dp_ops.steps.release import (
    STAGED,
    STAGED_MAC,
    checksums,
    read_staged,
    staging_dir,
    verify_checksums,
    write_empty_staged,
)

CFG = SymptomsConfig()
RATES = {"Fever": 0.05, "Cough": 0.02, "Headache": 0.01}
RUN = "run-a"


def _rows(regions: pd.DataFrame, days: list[date]) -> pd.DataFrame:
    """Per-day noisy rows as the report step writes them (B by area share of a
    60,000-searcher country, A = rate x B, each with the config's noise)."""
    rng = noise_generator(key=48)
    a_cell, b_cell = CFG.budget("symptom_searches"), CFG.budget("search_users")
    zero = np.zeros(1, np.int64)
    rows = []
    for day in days:
        for region in regions[regions["level"].isin(CFG.levels)].itertuples():
            share = 1.0 if region.level == 0 else min(1.0, float(region.area_km2) / 28889.0)
            b_true = int(60_000 * share)
            b = b_true + int(add_discrete_laplace(zero, epsilon=b_cell.cell_epsilon,
                                                  sensitivity=1, rng=rng)[0])
            for symptom, rate in RATES.items():
                a = int(rate * b_true) + int(add_discrete_laplace(
                    zero, epsilon=a_cell.cell_epsilon, sensitivity=1, rng=rng)[0])
                rows.append((region.level, region.region_id, symptom, day, a,
                             a_cell.cell_epsilon, 1, b, b_cell.cell_epsilon, 1))
    return with_reliability(pd.DataFrame(rows, columns=[
        "level", "region_id", "symptom", "date", "a_noisy", "a_epsilon", "a_sensitivity",
        "b_noisy", "b_epsilon", "b_sensitivity"]), CFG, n_days=1)


def _url(home: Path) -> str:
    return f"sqlite:///{home / 'ledger.sqlite'}"


def _stage(home: Path, run_id: str) -> None:
    root = DataRoot(home / "data")
    if not root.regions_csv.exists():
        regions = demo_regions()
        write_regions(regions, root.regions_csv)
        symptom_list(root).write_text("\n".join(RATES) + "\n")
        first = CFG.first_public_date
        write_days(root, _rows(regions, [first + timedelta(days=i) for i in range(7)]),
                   url=_url(home))
    release_flow.stage_and_validate(release.PARTS, root, CFG, run_id=run_id, ledger_url=_url(home))


@pytest.fixture(scope="module")
def staged_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root (``data``) and its ledger (``ledger.sqlite``) with RUN's release staged
    by its gate."""
    home = tmp_path_factory.mktemp("staged")
    _stage(home, RUN)
    return home


@pytest.fixture
def home(staged_home: Path, tmp_path: Path) -> Path:
    """A copy of ``staged_home`` for one test to tamper with."""
    return Path(shutil.copytree(staged_home, tmp_path / "home", symlinks=True))


def _stage_of(home: Path, run_id: str = RUN) -> Path:
    return staging_dir(DataRoot(home / "data"), "symptoms", run_id)


def _files(home: Path) -> dict[str, dict[str, object]]:
    return dict(json.loads((_stage_of(home) / STAGED).read_text())["files"])


def _nothing_published(home: Path) -> None:
    root = DataRoot(home / "data")
    assert not root.latest_release("symptoms").exists()
    assert not list(root.published_dir("symptoms").glob("releases/*"))
    assert not root.scaling_file("symptoms").exists()  # no state committed either


def _publish(home: Path) -> None:
    release_flow.publish_staged(release.PARTS, DataRoot(home / "data"), CFG, run_id=RUN,
                                ledger_url=_url(home))


def test_an_untouched_staging_area_publishes(home: Path) -> None:
    """The control: the staged files as the gate left them publish, listed as sealed."""
    files = _files(home)
    assert len(files) >= 4, "the staged release should hold several files"
    _publish(home)
    latest = DataRoot(home / "data").latest_release("symptoms")
    manifest = json.loads((latest / "manifest.json").read_text())
    assert {n: m["sha256"] for n, m in manifest["files"].items() if n in files} == \
        {n: m["sha256"] for n, m in files.items()}


def _edit_a_csv(stage: Path, files: dict[str, dict[str, object]]) -> str:
    name = next(n for n in sorted(files) if n.endswith(".csv"))
    path = stage / "release" / name
    data = path.read_bytes()
    path.write_bytes(data[:-2] + (b"9" if data[-2:-1] != b"9" else b"8") + data[-1:])
    return name


def _add_a_file(stage: Path, files: dict[str, dict[str, object]]) -> str:
    (stage / "release" / "extra.csv").write_text("region,value\nDM,1\n")
    return "extra.csv"


def _add_a_file_in_a_folder(stage: Path, files: dict[str, dict[str, object]]) -> str:
    (stage / "release" / "more").mkdir()
    (stage / "release" / "more" / "note.txt").write_text("planted")
    return "more/note.txt"


def _remove_a_file(stage: Path, files: dict[str, dict[str, object]]) -> str:
    name = sorted(files)[-1]
    (stage / "release" / name).unlink()
    return name


def _swap_a_file_for_a_symlink(stage: Path, files: dict[str, dict[str, object]]) -> str:
    """The same bytes, but a link (out of the release, once published)."""
    name = next(n for n in sorted(files) if n.endswith(".csv"))
    path = stage / "release" / name
    outside = stage.parent / "outside.csv"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    return name


@pytest.mark.parametrize("tamper", [_edit_a_csv, _add_a_file, _add_a_file_in_a_folder,
                                    _remove_a_file, _swap_a_file_for_a_symlink])
def test_a_staged_file_changed_after_the_gate_is_refused(
        home: Path, tamper: Callable[[Path, dict[str, dict[str, object]]], str]) -> None:
    stage = _stage_of(home)
    name = tamper(stage, _files(home))
    with pytest.raises(PublishRefused) as err:
        _publish(home)
    assert str(stage / "release" / name) in str(err.value)
    _nothing_published(home)


def test_a_sealed_record_edited_to_match_an_edited_file_is_refused(home: Path) -> None:
    """The attacker edits a file and its sha256 in the record: the MAC no longer holds."""
    import hashlib

    stage = _stage_of(home)
    name = _edit_a_csv(stage, _files(home))
    record = json.loads((stage / STAGED).read_text())
    path = stage / "release" / name
    record["files"][name] = {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                             "bytes": path.stat().st_size}
    (stage / STAGED).write_text(json.dumps(record))
    with pytest.raises(PublishRefused, match="MAC does not verify"):
        _publish(home)
    _nothing_published(home)


def test_a_sealed_record_without_its_mac_is_refused(home: Path) -> None:
    (_stage_of(home) / STAGED_MAC).unlink()
    with pytest.raises(PublishRefused):
        _publish(home)
    _nothing_published(home)


def test_another_runs_sealed_record_is_refused(home: Path) -> None:
    """Another run's record and MAC (both genuine) copied over this run's."""
    _stage(home, "run-b")
    for name in (STAGED, STAGED_MAC):
        shutil.copy2(_stage_of(home, "run-b") / name, _stage_of(home) / name)
    with pytest.raises(PublishRefused, match="not the staged record of run 'run-a'"):
        _publish(home)
    _nothing_published(home)


# -- the re-check and the record on their own (no gate) ------------------------------------

def _tampered(tmp_path: Path, tamper: Callable[[Path, dict[str, dict[str, object]]], str]
              ) -> tuple[Path, dict[str, dict[str, Any]], str]:
    """A staging area of two files (one in a folder), its checksums, then ``tamper``."""
    stage = tmp_path / "stage"
    (stage / "release" / "sub").mkdir(parents=True)
    (stage / "release" / "a.csv").write_text("region,value\nDM,1\n")
    (stage / "release" / "sub" / "b.csv").write_text("region,value\nDM-01,2\n")
    files = checksums(stage / "release")
    return stage, files, tamper(stage, files)


@pytest.mark.parametrize("tamper", [_edit_a_csv, _add_a_file, _add_a_file_in_a_folder,
                                    _remove_a_file, _swap_a_file_for_a_symlink])
def test_the_recheck_names_the_file_that_differs_from_the_record(
        tmp_path: Path, tamper: Callable[[Path, dict[str, dict[str, object]]], str]) -> None:
    stage, files, name = _tampered(tmp_path, tamper)
    with pytest.raises(PublishRefused) as err:
        verify_checksums(stage / "release", files, rewritten=("index.html",))
    assert str(stage / "release" / name) in str(err.value)


def test_the_recheck_passes_the_record_and_what_publish_writes_itself(tmp_path: Path) -> None:
    stage, files, _ = _tampered(tmp_path, lambda stage, files: "")
    (stage / "release" / "index.html").write_text("<p>from the attempt before</p>")
    verify_checksums(stage / "release", files, rewritten=("index.html",))


def test_a_record_sealed_for_another_run_is_refused(tmp_path: Path) -> None:
    Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}").dispose()  # the session's ledger key
    write_empty_staged(tmp_path / "stage", "run-b")
    assert read_staged(tmp_path / "stage", "run-b") is None
    with pytest.raises(PublishRefused, match="not the staged record of run 'run-a'"):
        read_staged(tmp_path / "stage", "run-a")
