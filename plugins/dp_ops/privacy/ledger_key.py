"""The ledger key: the secret that makes the ledger's hash chain a chain of MACs.

Whoever can write the ledger's database file (the default SQLite ledger lives in the data
root) could otherwise edit a row and recompute every later link of a plain sha256 chain,
and ``ledger --verify`` would pass. Each link is therefore an HMAC-SHA256 under a key that
lives outside the data root and outside the ledger database; the data root's identity and
high-water records carry a MAC under the same key. Without the key nobody can write a link,
an identity or a mark that verifies; with it (the pipeline's own processes) everything is
as before. PRIVACY.md, "Threat model", says what this does and does not protect against.

Where the key comes from, first match wins:

1. a provider registered by the host (Airflow: the Connection ``dp_ledger_key``, its
   password field, through the secrets backend; :func:`use_provider`);
2. ``DP_LEDGER_KEY``: 64 or more hex digits (an environment secret, e.g. for the CLI);
3. the file named by ``DP_LEDGER_KEY_FILE``, default ``~/.config/dp-ops/ledger.key``:
   created (0600, 32 random bytes as hex) when a *new* ledger is created and no key
   exists anywhere; an existing ledger is never paired with a freshly made key.

The key is never logged, never written into the data root and never stored in the ledger:
only its id (a MAC of a fixed label, which reveals nothing of the key) appears in messages.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dp_ops.errors import LedgerKeyMissing

KEY_ENV = "DP_LEDGER_KEY"
KEY_FILE_ENV = "DP_LEDGER_KEY_FILE"
MIN_KEY_BYTES = 32

_provider: Callable[[], bytes | None] | None = None


def default_key_file() -> Path:
    return Path.home() / ".config" / "dp-ops" / "ledger.key"


def key_file(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    named = env.get(KEY_FILE_ENV)
    return Path(named).expanduser() if named else default_key_file()


def use_provider(provider: Callable[[], bytes | None] | None) -> None:
    """Register where the host keeps the key (None: forget it). The provider returns the
    key, or None when it has none (then the environment and the key file apply)."""
    global _provider
    _provider = provider


def parse_key(text: str, *, source: str) -> bytes:
    """A key written as hex digits (surrounding white space ignored), or
    :class:`LedgerKeyMissing` naming ``source`` (never the value)."""
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        raise LedgerKeyMissing(f"{source}: the ledger key must be hex digits "
                               f"(at least {2 * MIN_KEY_BYTES})") from None
    if len(key) < MIN_KEY_BYTES:
        raise LedgerKeyMissing(f"{source}: the ledger key has {len(key)} bytes; at least "
                               f"{MIN_KEY_BYTES} (64 hex digits) are needed")
    return key


def load_key(*, create: bool = False, environ: Mapping[str, str] | None = None) -> bytes:
    """The ledger key (see the module docstring for where it is looked up). With
    ``create``, a missing key file is created; otherwise a missing key raises
    :class:`LedgerKeyMissing` saying where it was looked for."""
    if _provider is not None:
        provided = _provider()
        if provided is not None:
            if len(provided) < MIN_KEY_BYTES:
                raise LedgerKeyMissing(f"the host's ledger key has {len(provided)} bytes; at "
                                       f"least {MIN_KEY_BYTES} are needed")
            return provided
    env = os.environ if environ is None else environ
    if env.get(KEY_ENV):
        return parse_key(env[KEY_ENV], source=KEY_ENV)
    path = key_file(env)
    try:
        return parse_key(path.read_text(), source=str(path))
    except FileNotFoundError:
        if not create:
            raise LedgerKeyMissing(
                f"no ledger key: neither {KEY_ENV} nor the key file {path} "
                f"({KEY_FILE_ENV}) is there. The ledger's chain is sealed with the key it "
                "was created with: point the process at that key (OPERATIONS.md, 'The "
                "ledger key')") from None
    return _create_key_file(path)


def _create_key_file(path: Path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_bytes(MIN_KEY_BYTES)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex() + "\n")
    try:
        os.link(tmp, path)  # two processes creating it at once: the first one wins
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return parse_key(path.read_text(), source=str(path))


def key_id(key: bytes) -> str:
    """A short public name of ``key`` (a MAC of a fixed label): tells two keys apart in a
    message without revealing either."""
    return hmac.new(key, b"dp-ops ledger key id", hashlib.sha256).hexdigest()[:16]


def mac(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def seal(key: bytes, kind: str, body: Mapping[str, Any]) -> str:
    """The MAC of a record of ``kind`` (its canonical JSON), for records kept where the
    attacker can write (the data root's identity and high-water files)."""
    payload = json.dumps({"kind": kind, **body}, sort_keys=True, separators=(",", ":"))
    return mac(key, payload)


def sealed(key: bytes, kind: str, body: Mapping[str, Any], tag: object) -> bool:
    return isinstance(tag, str) and hmac.compare_digest(seal(key, kind, body), tag)
