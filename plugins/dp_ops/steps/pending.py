"""The names of pending files (docs/design.md, Stored noise and derived state).

A file bound to the ledger (a spend's stored noise, a day's report rows, derived state) is
written to a temporary file, renamed to a *pending* name, recorded (its sha256) in the
ledger, then moved into place; a reader that finds the target missing or not the recorded
version adopts a pending file holding the recorded bytes (a writer crashed between the
record and the move). The pending name carries :func:`pending_tag`, a MAC under the ledger
key of the ledger record the file is bound to, the file's name and the version's sha256.
Whoever can write the data root but holds no key cannot name a file so that it is
adopted, even with the recorded bytes in it and even when a forged record names them.
"""

from __future__ import annotations

from pathlib import Path

from dp_ops.privacy import ledger_key

TAG_CHARS = 32  # 128 bits of the MAC: ample against guessing, short in a file name


def pending_tag(target: Path, record: str, sha256: str) -> str:
    """The tag of the pending file of version ``sha256`` of ``target``, bound to ledger
    record ``record`` (``noise_store/<spend id>``, ``derived_state/<report>/<name>``)."""
    return ledger_key.seal(ledger_key.load_key(), "pending", {
        "record": record, "file": target.name, "sha256": sha256})[:TAG_CHARS]
