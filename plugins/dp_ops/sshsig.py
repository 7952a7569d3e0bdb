"""OpenSSH signatures (the SSHSIG format of OpenSSH's ``PROTOCOL.sshsig``) with Ed25519
keys, written and checked with the ``cryptography`` package.

A signature made here verifies with the stock tool, and one made by the stock tool
verifies here::

    ssh-keygen -Y verify -f allowed_signers -I <identity> -n <namespace> -s FILE.sig < FILE
    ssh-keygen -Y sign -f <private key> -n <namespace> FILE       # writes FILE.sig

The signed blob binds the namespace (so a release signature cannot be replayed as, say,
a git commit signature) and a hash of the message. Only Ed25519 is written or read:
release signing needs one algorithm, and a key of another type is never trusted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

MAGIC = b"SSHSIG"
VERSION = 1
KEY_TYPE = "ssh-ed25519"
BEGIN = "-----BEGIN SSH SIGNATURE-----"
END = "-----END SSH SIGNATURE-----"
_HASHES = {"sha256": hashlib.sha256, "sha512": hashlib.sha512}
# ssh-keygen wraps the armored base64 at 70 columns
_WRAP = 70


def _string(data: bytes) -> bytes:
    """An SSH wire ``string``: uint32 length, then the bytes."""
    return struct.pack(">I", len(data)) + data


class _Wire:
    """Reads SSH wire ``string`` and ``uint32`` fields; ValueError past the end."""

    def __init__(self, data: bytes) -> None:
        self._data, self._at = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self._at + n > len(self._data):
            raise ValueError("truncated")
        out = self._data[self._at:self._at + n]
        self._at += n
        return out

    def uint32(self) -> int:
        value: int = struct.unpack(">I", self.take(4))[0]
        return value

    def string(self) -> bytes:
        return self.take(self.uint32())

    def done(self) -> bool:
        return self._at == len(self._data)


def public_key_blob(key: Ed25519PublicKey) -> bytes:
    """The key's SSH wire encoding (what a public key line holds in base64)."""
    return _string(KEY_TYPE.encode()) + _string(key.public_bytes_raw())


def _key_from_blob(blob: bytes) -> Ed25519PublicKey:
    wire = _Wire(blob)
    kind, raw = wire.string(), wire.string()
    if kind != KEY_TYPE.encode() or len(raw) != 32 or not wire.done():
        raise ValueError(f"not an {KEY_TYPE} public key")
    return Ed25519PublicKey.from_public_bytes(raw)


def fingerprint(key: Ed25519PublicKey) -> str:
    """``SHA256:<base64>``, as ``ssh-keygen -l`` prints it."""
    digest = hashlib.sha256(public_key_blob(key)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def public_key_line(key: Ed25519PublicKey, comment: str = "") -> str:
    """The OpenSSH public key line (``ssh-ed25519 AAAA... comment``)."""
    line = f"{KEY_TYPE} {base64.b64encode(public_key_blob(key)).decode()}"
    return f"{line} {comment}" if comment else line


def _signed_data(namespace: str, hash_algorithm: str, message: bytes) -> bytes:
    digest = _HASHES[hash_algorithm](message).digest()
    return (MAGIC + _string(namespace.encode()) + _string(b"")
            + _string(hash_algorithm.encode()) + _string(digest))


def sign(key: Ed25519PrivateKey, message: bytes, namespace: str,
         hash_algorithm: str = "sha512") -> str:
    """The armored SSHSIG signature of ``message`` in ``namespace`` (text ending in a
    newline, what ``ssh-keygen -Y sign`` writes to ``FILE.sig``)."""
    if not namespace:
        raise ValueError("an SSHSIG signature needs a namespace")
    raw = key.sign(_signed_data(namespace, hash_algorithm, message))
    blob = (MAGIC + struct.pack(">I", VERSION) + _string(public_key_blob(key.public_key()))
            + _string(namespace.encode()) + _string(b"") + _string(hash_algorithm.encode())
            + _string(_string(KEY_TYPE.encode()) + _string(raw)))
    text = base64.b64encode(blob).decode()
    lines = [text[i:i + _WRAP] for i in range(0, len(text), _WRAP)]
    return "\n".join([BEGIN, *lines, END]) + "\n"


@dataclass(frozen=True)
class TrustedKey:
    """A public key a verifier trusts, from a public key line or an ``allowed_signers``
    line: ``principals`` and ``namespaces`` None when the line does not restrict them;
    ``valid_after`` / ``valid_before`` when it bounds the key's validity."""

    key: Ed25519PublicKey
    principals: tuple[str, ...] | None = None
    namespaces: tuple[str, ...] | None = None
    valid_after: datetime | None = None
    valid_before: datetime | None = None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)

    def usable(self, namespace: str, now: datetime) -> bool:
        """Whether the key may vouch for a signature in ``namespace`` at ``now``."""
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        if self.valid_after is not None and now < self.valid_after:
            return False
        return self.valid_before is None or now <= self.valid_before


@dataclass(frozen=True)
class Checked:
    """What :func:`verify` found: ``signer`` is the fingerprint of the key that signed,
    ``problem`` None when the signature is good and made by a trusted key."""

    signer: str | None
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _unarmor(armored: str) -> bytes:
    text = armored.strip()
    if not (text.startswith(BEGIN) and text.endswith(END)):
        raise ValueError(f"not an armored SSH signature ({BEGIN} ... {END})")
    body = "".join(text[len(BEGIN):-len(END)].split())
    return base64.b64decode(body, validate=True)


def signer_key(armored: str) -> Ed25519PublicKey | None:
    """The key an armored SSHSIG signature says made it (None: not a readable one). It
    proves nothing by itself: anyone can sign with a key of their own."""
    try:
        wire = _Wire(_unarmor(armored))
        if wire.take(6) != MAGIC or wire.uint32() != VERSION:
            return None
        return _key_from_blob(wire.string())
    except (ValueError, binascii.Error):
        return None


def verify(armored: str, message: bytes, namespace: str,
           trusted: Sequence[TrustedKey], *, now: datetime | None = None) -> Checked:
    """Check the armored SSHSIG ``armored`` over ``message``: its format, its namespace,
    that its key is one of ``trusted`` (usable in ``namespace`` at ``now``), and the
    Ed25519 signature itself under that trusted key."""
    try:
        wire = _Wire(_unarmor(armored))
        if wire.take(6) != MAGIC or wire.uint32() != VERSION:
            return Checked(None, "not an SSHSIG signature of version 1")
        blob = wire.string()
        signed_ns, _reserved = wire.string().decode(), wire.string()
        hash_algorithm = wire.string().decode()
        inner = _Wire(wire.string())
        kind, raw = inner.string(), inner.string()
        if not (wire.done() and inner.done()):
            return Checked(None, "trailing bytes after the signature")
        signer = _key_from_blob(blob)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        return Checked(None, f"not a readable SSH signature ({exc})")
    who = fingerprint(signer)
    if signed_ns != namespace:
        return Checked(who, f"signed in namespace {signed_ns[:60]!r}, not {namespace!r}")
    if hash_algorithm not in _HASHES or kind != KEY_TYPE.encode():
        return Checked(who, f"unsupported algorithm {hash_algorithm[:20]!r} / "
                            f"{kind[:20]!r}")
    when = now or datetime.now(UTC)
    match = [t for t in trusted if public_key_blob(t.key) == blob and t.usable(namespace, when)]
    if not match:
        return Checked(who, f"signed by key {who}, which is not among the trusted keys "
                            f"(for namespace {namespace!r})")
    try:
        match[0].key.verify(raw, _signed_data(namespace, hash_algorithm, message))
    except InvalidSignature:
        return Checked(who, f"the signature by key {who} does not verify: the signed file "
                            "was changed after signing, or the signature was forged")
    return Checked(who, None)


_KEY_IN_LINE = re.compile(r"(?:^|\s)(ssh-[a-z0-9-]+|ecdsa-[a-z0-9-]+|sk-[a-z0-9@.-]+)"
                          r"\s+([A-Za-z0-9+/]+={0,2})(?:\s|$)")
_OPTION = re.compile(r'([a-z-]+)(?:=(?:"([^"]*)"|([^\s,"]*)))?')


def _timestamp(text: str) -> datetime:
    """An ``allowed_signers`` time: YYYYMMDD[HHMM[SS]], UTC with a trailing Z, else
    local time (as ssh-keygen reads it)."""
    utc = text.endswith(("Z", "z"))
    digits = text.rstrip("Zz")
    formats = {8: "%Y%m%d", 12: "%Y%m%d%H%M", 14: "%Y%m%d%H%M%S"}
    if len(digits) not in formats:
        raise ValueError(f"bad time {text!r}")
    parsed = datetime.strptime(digits, formats[len(digits)])
    return parsed.replace(tzinfo=UTC) if utc else parsed.astimezone()


def _options(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) if m.group(2) is not None else (m.group(3) or "")
            for m in _OPTION.finditer(text)}


def trusted_keys(text: str) -> list[TrustedKey]:
    """The Ed25519 keys of a public key file (lines ``ssh-ed25519 AAAA... comment``) or of
    an ``allowed_signers`` file (``principals [options] ssh-ed25519 AAAA...``). Keys of
    other types, certificate authorities and comment lines are left out; a malformed line
    raises ValueError naming its number."""
    keys: list[TrustedKey] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        found = _KEY_IN_LINE.search(stripped)
        if found is None:
            raise ValueError(f"line {number}: no public key (expected "
                             f"'{KEY_TYPE} AAAA...', optionally after principals and options)")
        if found.group(1) != KEY_TYPE:
            continue
        head = stripped[:found.start(1)].strip()
        principals: tuple[str, ...] | None = None
        opts: dict[str, str] = {}
        if head:
            first, _, rest = head.partition(" ")
            principals = tuple(p for p in first.strip('"').split(",") if p)
            opts = _options(rest)
        if "cert-authority" in opts:
            continue  # a CA signs certificates; release signatures carry plain keys
        try:
            key = _key_from_blob(base64.b64decode(found.group(2), validate=True))
            namespaces = (tuple(n for n in opts["namespaces"].split(",") if n)
                          if "namespaces" in opts else None)
            after = _timestamp(opts["valid-after"]) if "valid-after" in opts else None
            before = _timestamp(opts["valid-before"]) if "valid-before" in opts else None
        except (ValueError, binascii.Error) as exc:
            raise ValueError(f"line {number}: {exc}") from None
        keys.append(TrustedKey(key, principals, namespaces, after, before))
    return keys
