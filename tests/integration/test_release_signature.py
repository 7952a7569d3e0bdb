"""A real release, published by the pipeline, checked as a consumer would with the stock
tools: ``ssh-keygen -Y verify`` accepts its signed manifest and refuses it after a
one-byte edit; a one-byte edit of any data file is caught by the manifest's sha256 (the
``sha256sum -c`` a consumer runs after ssh-keygen) and by ``verify-release --public-key``
(issue 48, route 4). The release is a two-day symptoms release of the demo country, the
cheapest the pipeline publishes."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import date, timedelta
from pathlib import Path

import pytest
from support.cached_roots import GeneratedRoots
from support.release_keys import allowed_signers, session_signer, ssh_keygen, stock_verify
from support.report_steps import SYMPTOMS_STEPS as symptoms_steps
from support.report_steps import run_days

from dp_ops.layout import DataRoot
from dp_ops.release_signing import SIGNATURE_FILE
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.sshsig import trusted_keys
from dp_ops.steps.noise_request import RunRequest
from dp_ops.verify_release import verify_release

pytestmark = [pytest.mark.slow, pytest.mark.integration]

DAYS = [date(2020, 1, 1) + timedelta(days=i) for i in range(2)]


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory,
              generated_roots: GeneratedRoots) -> Path:
    root = DataRoot(generated_roots.copy(tmp_path_factory.mktemp("signed") / "data",
                                         users=2000, seed=3, start=DAYS[0], end=DAYS[-1]))
    run_days(symptoms_steps, root, SymptomsConfig(),
             DAYS, RunRequest(run_id="signed"),
             ledger_url=f"sqlite:///{root.root / 'ledger.sqlite'}")
    return root.latest_release("symptoms").resolve()


@pytest.fixture
def release(published: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(published, tmp_path / published.name))


def _flip(path: Path, at: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if at is None else at] ^= 0x01
    path.write_bytes(bytes(data))


def _sha256sum_check(release: Path) -> subprocess.CompletedProcess[str]:
    """``sha256sum -c`` of the checksums the (signed) manifest lists."""
    files = json.loads((release / "manifest.json").read_text())["files"]
    listing = "".join(f"{meta['sha256']}  {name}\n" for name, meta in files.items())
    return subprocess.run(["sha256sum", "--quiet", "-c", "-"], input=listing, cwd=release,
                          capture_output=True, text=True, timeout=120)


def test_ssh_keygen_accepts_the_release_and_the_page_names_the_key(release: Path,
                                                                    tmp_path: Path) -> None:
    signer = session_signer()
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["signature"]["public_key_fingerprint"] == signer.fingerprint
    for page in ("index.html", "DATASTATEMENT.md"):
        text = (release / page).read_text()
        assert signer.fingerprint in text and "ssh-keygen -Y verify" in text
    good = stock_verify(release, allowed_signers(tmp_path), signer.identity)
    assert good.returncode == 0, good.stderr
    assert _sha256sum_check(release).returncode == 0
    assert verify_release(release, trusted=trusted_keys(signer.allowed_signers_line())).ok


def test_ssh_keygen_rejects_a_one_byte_edit_of_the_manifest(release: Path,
                                                            tmp_path: Path) -> None:
    _flip(release / "manifest.json")
    bad = stock_verify(release, allowed_signers(tmp_path), session_signer().identity)
    assert bad.returncode != 0
    outcome = verify_release(release, trusted=trusted_keys(
        session_signer().allowed_signers_line()))
    assert any(p.startswith(f"{SIGNATURE_FILE} / manifest.json") for p in outcome.problems)


def test_a_one_byte_edit_of_any_file_is_rejected(release: Path, tmp_path: Path) -> None:
    """Each listed file in turn: ssh-keygen still accepts the manifest (it is unchanged),
    and the manifest's checksum of the file rejects it, by sha256sum and verify-release."""
    signers = allowed_signers(tmp_path)
    trusted = trusted_keys(session_signer().allowed_signers_line())
    names = sorted(json.loads((release / "manifest.json").read_text())["files"])
    assert len(names) >= 10
    for name in names:
        original = (release / name).read_bytes()
        _flip(release / name)
        assert stock_verify(release, signers, session_signer().identity).returncode == 0
        assert _sha256sum_check(release).returncode != 0, name
        outcome = verify_release(release, trusted=trusted)
        assert any(p.startswith(f"{name}: ") for p in outcome.problems), (name, outcome)
        (release / name).write_bytes(original)
    assert ssh_keygen()
