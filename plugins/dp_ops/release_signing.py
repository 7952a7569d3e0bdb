"""The release-signing key: an Ed25519 key, separate from the ledger key, that signs every
release's ``manifest.json`` at publish (``manifest.json.sig``, OpenSSH's SSHSIG format,
:mod:`dp_ops.sshsig`). The manifest lists every file's sha256, so the signature covers
every file; a consumer checks it with ``ssh-keygen -Y verify`` or ``dp-ops
verify-release --public-key`` against the public key the agency publishes.

Where the key comes from, first match wins (docs/deploy.md, "The release-signing key"):

1. a provider registered by the host (Airflow: the Connection ``dp_release_signing_key``,
   its password field holding the private key, through the secrets backend;
   :func:`use_provider`);
2. ``DP_RELEASE_SIGNING_KEY``: the private key itself, in OpenSSH format or as its
   32-byte Ed25519 seed in 64 hex digits (one line, for an ``.env`` file);
3. the file named by ``DP_RELEASE_SIGNING_KEY_FILE``, default
   ``~/.config/dp-ops/release_signing.key`` (OpenSSH private key format, unencrypted,
   0600), made by ``python -m dp_ops release-key generate``.

No key anywhere: publish refuses, naming these settings and the command that makes one,
unless ``DP_RELEASE_UNSIGNED=true`` says the deployment publishes unsigned releases, which
the manifest, the page and the data statement then state. The key is never logged,
never written into the data root (publish refuses a key file inside it) and never
printed: only its public key and fingerprint are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from dp_ops import sshsig
from dp_ops.errors import PublishRefused

KEY_ENV = "DP_RELEASE_SIGNING_KEY"
KEY_FILE_ENV = "DP_RELEASE_SIGNING_KEY_FILE"
UNSIGNED_ENV = "DP_RELEASE_UNSIGNED"
SIGNER_ENV = "DP_RELEASE_SIGNER"
CONNECTION_ID = "dp_release_signing_key"
NAMESPACE = "dp-ops-release"
DEFAULT_SIGNER = "release-signing@dp-ops"
SIGNATURE_FILE = "manifest.json.sig"
GENERATE_COMMAND = "python -m dp_ops release-key generate"

_SEED = re.compile(r"[0-9a-fA-F]{64}")

_provider: Callable[[], str | None] | None = None


def default_key_file() -> Path:
    return Path.home() / ".config" / "dp-ops" / "release_signing.key"


def key_file(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    named = env.get(KEY_FILE_ENV)
    return Path(named).expanduser() if named else default_key_file()


def use_provider(provider: Callable[[], str | None] | None) -> None:
    """Register where the host keeps the private key (None: forget it). The provider
    returns the key's OpenSSH text, or None when it has none."""
    global _provider
    _provider = provider


@dataclass(frozen=True)
class ReleaseSigner:
    """The private key that signs manifests, and the identity consumers name it by (the
    principal of the agency's ``allowed_signers`` line)."""

    key: Ed25519PrivateKey
    identity: str = DEFAULT_SIGNER

    @property
    def fingerprint(self) -> str:
        return sshsig.fingerprint(self.key.public_key())

    def public_key_line(self) -> str:
        return sshsig.public_key_line(self.key.public_key(), self.identity)

    def allowed_signers_line(self) -> str:
        """The line of an ``allowed_signers`` file that trusts this key for releases."""
        return (f'{self.identity} namespaces="{NAMESPACE}" '
                f"{sshsig.public_key_line(self.key.public_key())}")

    def sign(self, manifest_bytes: bytes) -> bytes:
        """The ``manifest.json.sig`` of the manifest's exact bytes."""
        return sshsig.sign(self.key, manifest_bytes, NAMESPACE).encode()

    def manifest_fields(self) -> dict[str, Any]:
        """The manifest's ``signature``: where the signature is and whose key made it."""
        return {"format": "sshsig", "file": SIGNATURE_FILE, "namespace": NAMESPACE,
                "signer": self.identity, "public_key_fingerprint": self.fingerprint}


UNSIGNED_FIELDS: dict[str, Any] = {
    "format": "unsigned",
    "note": f"published unsigned ({UNSIGNED_ENV}=true): nobody can check that this "
            "release is the publisher's",
}


def _truthy(text: str | None) -> bool:
    return (text or "").strip().lower() in ("1", "true", "yes")


def parse_private_key(text: str, *, source: str) -> Ed25519PrivateKey:
    """An unencrypted OpenSSH Ed25519 private key, or its 32-byte seed as 64 hex digits
    (one line, for an environment file); :class:`PublishRefused` naming ``source`` (never
    the text) otherwise."""
    if _SEED.fullmatch(text.strip()):
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(text.strip()))
    try:
        key = serialization.load_ssh_private_key(text.strip().encode() + b"\n", None)
    except (ValueError, TypeError):
        raise PublishRefused(f"{source}: not an unencrypted OpenSSH private key (make one "
                             f"with {GENERATE_COMMAND})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise PublishRefused(f"{source}: the release-signing key must be Ed25519 (make one "
                             f"with {GENERATE_COMMAND})")
    return key


def signer_identity(environ: Mapping[str, str] | None = None) -> str:
    """``DP_RELEASE_SIGNER``, default ``release-signing@dp-ops``: the principal of the
    agency's ``allowed_signers`` line, named in every manifest."""
    env = os.environ if environ is None else environ
    identity = (env.get(SIGNER_ENV) or DEFAULT_SIGNER).strip()
    if len(identity) > 100 or any(c.isspace() or c in '",' for c in identity):
        raise PublishRefused(f"{SIGNER_ENV}={identity[:60]!r}: the signer identity is one "
                             "allowed_signers principal (at most 100 characters, no spaces, "
                             "quotes or commas)")
    return identity


def load_signer(data_root: Path | None = None, environ: Mapping[str, str] | None = None
                ) -> ReleaseSigner | None:
    """The release signer (see the module docstring), or None when the deployment has
    opted out of signing. :class:`PublishRefused` when there is no key and no opt-out,
    or when the key file lies inside ``data_root``."""
    env = os.environ if environ is None else environ
    identity = signer_identity(env)
    provided = _provider() if _provider is not None else None
    if provided:
        return ReleaseSigner(parse_private_key(provided, source=f"connection {CONNECTION_ID}"),
                             identity)
    if env.get(KEY_ENV):
        return ReleaseSigner(parse_private_key(env[KEY_ENV], source=KEY_ENV), identity)
    path = key_file(env)
    if data_root is not None:
        _require_outside(path, data_root)
    try:
        text = path.read_text()
    except FileNotFoundError:
        if _truthy(env.get(UNSIGNED_ENV)):
            return None
        raise PublishRefused(
            f"no release-signing key: neither the Airflow connection {CONNECTION_ID}, "
            f"{KEY_ENV}, nor the key file {path} ({KEY_FILE_ENV}) is there. Make one with "
            f"`{GENERATE_COMMAND}` and publish its public key (docs/deploy.md, 'The "
            f"release-signing key'), or set {UNSIGNED_ENV}=true to publish unsigned "
            "releases; not published") from None
    return ReleaseSigner(parse_private_key(text, source=str(path)), identity)


def _require_outside(path: Path, data_root: Path) -> None:
    """Refuse a key file that lies inside the data root (whoever writes the data root
    could then read it, or swap in a key of their own)."""
    try:
        path.resolve().relative_to(data_root.resolve())
    except ValueError:
        return
    raise PublishRefused(f"{KEY_FILE_ENV}={path}: the release-signing key lies "
                         f"inside the data root {data_root}; keep it outside (default "
                         f"{default_key_file()}); not published")


def generate_key_file(path: Path, identity: str = DEFAULT_SIGNER) -> ReleaseSigner:
    """Make a new key at ``path`` (0600, in a 0700 directory), refusing to replace one:
    a key that signed releases stays, so they keep verifying against it."""
    key = Ed25519PrivateKey.generate()
    text = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                             serialization.NoEncryption())
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(text)
    return ReleaseSigner(key, identity)


def how_to_check(manifest: Mapping[str, Any]) -> str:
    """A paragraph for the release page and data statement (Markdown-style backticks):
    whose key signed the release and how a consumer checks it with ``ssh-keygen``, or
    that it is unsigned."""
    fields = manifest.get("signature")
    if not isinstance(fields, Mapping) or fields.get("format") != "sshsig":
        return ("This release is **not signed**: its checksums show that the files match "
                "`manifest.json`, not who published them.")
    signer, namespace = fields.get("signer"), fields.get("namespace")
    return (f"`manifest.json` is signed by the publisher's release-signing key "
            f"`{fields.get('public_key_fingerprint')}` (signer `{signer}`, OpenSSH "
            f"signature `{fields.get('file')}`, namespace `{namespace}`); it lists the "
            "sha256 of every other file, so the signature covers them all. Check it against "
            "the `allowed_signers` file the publisher publishes, never against a key found "
            f"beside the release: `ssh-keygen -Y verify -f allowed_signers -I {signer} -n "
            f"{namespace} -s {fields.get('file')} < manifest.json`, then every file against "
            "its sha256 in the manifest; `dp-ops verify-release --public-key allowed_signers "
            "<this directory>` does both.")
