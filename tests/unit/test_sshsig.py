"""The SSHSIG writer and reader (:mod:`dp_ops.sshsig`) against the stock ``ssh-keygen``:
a signature made here verifies with ``ssh-keygen -Y verify``, one made by ``ssh-keygen -Y
sign`` verifies here, and neither accepts a changed message, another namespace or an
untrusted key."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.release_keys import ssh_keygen

from dp_ops import sshsig

NAMESPACE = "dp-ops-release"


def _key_file(tmp_path: Path, key: Ed25519PrivateKey) -> Path:
    path = tmp_path / "id_ed25519"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    return path


def _allowed(tmp_path: Path, key: Ed25519PrivateKey) -> Path:
    path = tmp_path / "allowed_signers"
    path.write_text(f'releases@agency namespaces="{NAMESPACE}" '
                    f"{sshsig.public_key_line(key.public_key())}\n")
    return path


def _stock_verify(allowed: Path, signature: Path, message: bytes,
                  namespace: str = NAMESPACE) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([ssh_keygen(), "-Y", "verify", "-f", str(allowed), "-I",
                           "releases@agency", "-n", namespace, "-s", str(signature)],
                          input=message, capture_output=True, timeout=60)


def test_ours_verifies_with_ssh_keygen_and_a_changed_byte_does_not(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    message = b'{"epsilon": 8.58}\n'
    signature = tmp_path / "m.sig"
    signature.write_text(sshsig.sign(key, message, NAMESPACE))
    allowed = _allowed(tmp_path, key)
    good = _stock_verify(allowed, signature, message)
    assert good.returncode == 0, good.stderr
    assert sshsig.fingerprint(key.public_key()).encode() in good.stdout
    assert _stock_verify(allowed, signature, b'{"epsilon": 0.1}\n').returncode != 0
    assert _stock_verify(allowed, signature, message, namespace="git").returncode != 0


def test_ssh_keygens_signature_verifies_with_ours(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    message = tmp_path / "manifest.json"
    message.write_bytes(b'{"files": {}}\n')
    subprocess.run([ssh_keygen(), "-Y", "sign", "-f", str(_key_file(tmp_path, key)), "-n",
                    NAMESPACE, str(message)], check=True, capture_output=True, timeout=60)
    armored = (tmp_path / "manifest.json.sig").read_text()
    trusted = sshsig.trusted_keys(_allowed(tmp_path, key).read_text())
    assert sshsig.verify(armored, message.read_bytes(), NAMESPACE, trusted).ok
    assert not sshsig.verify(armored, b'{"files": {}} \n', NAMESPACE, trusted).ok
    assert not sshsig.verify(armored, message.read_bytes(), "file", trusted).ok
    other = sshsig.trusted_keys(sshsig.public_key_line(
        Ed25519PrivateKey.generate().public_key()))
    refused = sshsig.verify(armored, message.read_bytes(), NAMESPACE, other)
    assert not refused.ok and "not among the trusted keys" in str(refused.problem)


def test_the_fingerprint_is_ssh_keygens(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    shown = subprocess.run([ssh_keygen(), "-l", "-f", str(_key_file(tmp_path, key))],
                           check=True, capture_output=True, text=True, timeout=60).stdout
    assert shown.split()[1] == sshsig.fingerprint(key.public_key())


@pytest.mark.parametrize("line, usable", [
    ('a@b namespaces="git" {key}', False),
    ('a@b namespaces="git,dp-ops-release" {key}', True),
    ('a@b valid-before="20000101" {key}', False),
    ('a@b cert-authority {key}', None),
    ("{key} comment", True),
])
def test_allowed_signers_options_are_honoured(line: str, usable: bool | None) -> None:
    key = Ed25519PrivateKey.generate()
    keys = sshsig.trusted_keys(line.format(key=sshsig.public_key_line(key.public_key())))
    if usable is None:
        assert keys == []
        return
    signature = sshsig.sign(key, b"m", NAMESPACE)
    assert sshsig.verify(signature, b"m", NAMESPACE, keys).ok is usable
