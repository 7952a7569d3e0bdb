"""Open the ledger for a data root, refusing a ledger the data root was not first used with
(docs/design.md, Privacy budget ledger: the ledger's identity).

A ledger has an identity (a random id written in its first row). The first process that
opens a ledger for a data root records that id in ``<data root>/ledger_identity.json``;
every later one compares, so the same data root with another ``DP_LEDGER_URL`` (a fresh
ledger, a restored copy of another one) is refused before anything is read or spent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from dp_ops.errors import LedgerMismatch, LedgerTampered
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger, safe_url

IDENTITY_FILE = "ledger_identity.json"


def holds_state(root: DataRoot) -> bool:
    """True when the data root holds stored noise or releases: state some ledger accounts
    for, which a fresh ledger must not be paired with."""
    for area in (root.root / "noise", root.root / "published"):
        if area.is_dir() and any(area.iterdir()):
            return True
    return False


def recorded_ledger_id(root: DataRoot) -> str | None:
    """The ledger id the data root recorded at first use (None: not bound yet)."""
    path = root.root / IDENTITY_FILE
    if not path.exists():
        return None
    try:
        return str(json.loads(path.read_text())["ledger_id"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LedgerMismatch(f"{path}: unreadable ({type(exc).__name__}); restore it from a "
                             "backup of this data root") from exc


def bind(root: DataRoot, ledger: Ledger) -> None:
    """Record ``ledger``'s id in the data root at first use; refuse any other ledger.

    A data root that holds stored noise or releases but no identity file has lost it: a
    fresh ledger there would draw fresh noise for days already noised, so that is refused
    too, with the remedy."""
    path = root.root / IDENTITY_FILE
    recorded = recorded_ledger_id(root)
    if recorded is None:
        if holds_state(root):
            raise LedgerMismatch(
                f"data root {root.root} holds stored noise or releases but no "
                f"{IDENTITY_FILE}: nothing says which ledger accounts for them. Restore the "
                "file from a backup of this data root (`python -m dp_ops ledger --verify` "
                "prints the id of the ledger DP_LEDGER_URL points at)")
        body = json.dumps({"ledger_id": ledger.ledger_id,
                           "bound_at": datetime.now(UTC).isoformat(timespec="seconds"),
                           "ledger_url": safe_url(ledger.url)}, indent=2) + "\n"
        tmp = path.with_name(f".{IDENTITY_FILE}.{os.getpid()}.tmp")
        tmp.write_text(body)
        os.chmod(tmp, 0o644)
        try:
            os.link(tmp, path)  # atomic, and fails if another process bound it first
            return
        except FileExistsError:
            recorded = recorded_ledger_id(root)
        finally:
            tmp.unlink()
    if recorded != ledger.ledger_id:
        raise LedgerMismatch(
            f"data root {root.root} was first used with ledger {recorded!s:.36}, but "
            f"{safe_url(ledger.url)} is ledger {ledger.ledger_id}: the data root's spends "
            "and stored noise are accounted in the other one. Point DP_LEDGER_URL at it; "
            "nothing was read or spent")


@contextmanager
def closing_ledger(ledger: Ledger) -> Iterator[Ledger]:
    """``with closing_ledger(open_ledger(...)) as ledger:`` disposes of it on the way out."""
    try:
        yield ledger
    finally:
        ledger.dispose()


def require_verified_ledger(ledger: Ledger) -> None:
    """Refuse to publish from a ledger whose hash chain or guards do not check."""
    check = ledger.verify()
    if not check.ok:
        raise LedgerTampered(
            f"ledger {ledger.ledger_id} fails verification: {check.problem}. Nothing is "
            "published from it; see OPERATIONS.md, The ledger fails verification")


def open_ledger(root: DataRoot, url: str) -> Ledger:
    """The ledger at ``url``, bound to ``root`` (see :func:`bind`)."""
    ledger = Ledger(url)
    try:
        if root.root.is_dir():
            bind(root, ledger)
    except Exception:
        ledger.dispose()
        raise
    return ledger
