"""The session's release-signing key (tests/conftest.py makes it) and what a consumer
does with its public half: an ``allowed_signers`` file, and the stock ``ssh-keygen``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from dp_ops.release_signing import NAMESPACE, SIGNATURE_FILE, ReleaseSigner, load_signer
from support.ci import in_ci

REPO = Path(__file__).resolve().parents[2]
INSTALL_HINT = "scripts/install_openssh_client.sh (as root: apt-get install openssh-client)"


def session_signer() -> ReleaseSigner:
    """The signer every publish of this test session uses."""
    signer = load_signer()
    assert signer is not None
    return signer


def allowed_signers(directory: Path, signer: ReleaseSigner | None = None) -> Path:
    """An ``allowed_signers`` file trusting ``signer`` (default: the session's)."""
    path = directory / "allowed_signers"
    path.write_text((signer or session_signer()).allowed_signers_line() + "\n")
    return path


def sign_manifest(release: Path, signer: ReleaseSigner | None = None) -> None:
    """(Re)write ``manifest.json.sig`` for the release's manifest as it is now."""
    data = (release / "manifest.json").read_bytes()
    (release / SIGNATURE_FILE).write_bytes((signer or session_signer()).sign(data))


def ssh_keygen() -> str:
    """The stock ``ssh-keygen``: installed by the script when missing and we are root;
    under CI a missing tool fails the test, elsewhere it skips."""
    found = shutil.which("ssh-keygen")
    if found is None:
        subprocess.run(["bash", str(REPO / "scripts" / "install_openssh_client.sh")],
                       check=False, timeout=600)
        found = shutil.which("ssh-keygen")
    if found is None:
        if in_ci():
            pytest.fail(f"ssh-keygen is missing under CI; {INSTALL_HINT}")
        pytest.skip(f"ssh-keygen is missing: {INSTALL_HINT}")
    return found


def stock_verify(release: Path, signers: Path, identity: str) -> subprocess.CompletedProcess[str]:
    """``ssh-keygen -Y verify`` of the release's manifest, as a consumer runs it."""
    with open(release / "manifest.json", "rb") as manifest:
        return subprocess.run([ssh_keygen(), "-Y", "verify", "-f", str(signers), "-I",
                               identity, "-n", NAMESPACE, "-s",
                               str(release / SIGNATURE_FILE)],
                              stdin=manifest, capture_output=True, text=True, timeout=60)
