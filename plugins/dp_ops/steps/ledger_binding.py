"""Open the ledger for a data root, refusing a ledger the data root was not first used with
(docs/design.md, Privacy budget ledger: the ledger's identity).

A ledger has an identity (a random id written in its first row). The first process that
opens a ledger for a data root records that id in ``<data root>/ledger_identity.json``;
every later one compares, so the same data root with another ``DP_LEDGER_URL`` (a fresh
ledger, a restored copy of another one) is refused before anything is read or spent.

An older copy of the *same* ledger (a restored backup) has the same id and an intact, only
shorter, chain. So the data root also keeps a high-water mark, ``ledger_head.json``: the
last chain entry (seq and hash) it has seen, raised after every write. A ledger whose chain
does not hold that entry is older than the data root (or forked from it) and is refused:
it would not know spends whose noise the data root holds, and would hand out their ids
again.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from dp_ops.errors import LedgerMismatch, LedgerTampered
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger, safe_url

IDENTITY_FILE = "ledger_identity.json"
HEAD_FILE = "ledger_head.json"


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


def recorded_head(root: DataRoot) -> tuple[int, str] | None:
    path = root.root / HEAD_FILE
    if not path.exists():
        return None
    try:
        mark = json.loads(path.read_text())
        return int(mark["seq"]), str(mark["chain_sha256"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LedgerMismatch(f"{path}: unreadable ({type(exc).__name__}); restore it from a "
                             "backup of this data root") from exc


def head_problem(root: DataRoot, ledger: Ledger) -> str | None:
    """Why ``ledger`` is older than (or forked from) what the data root has seen, if it is."""
    mark = recorded_head(root)
    if mark is None:
        return None
    seq, want = mark
    have = ledger.chain_sha256(seq)
    if have is None:
        return (f"data root {root.root} has seen ledger entry {seq}, but the ledger's chain "
                f"ends at entry {ledger.head()[0]}: the ledger is older than the data root (a "
                "restored backup?). Restore the ledger backup taken with or after this data "
                "root's, never an older one")
    if have != want:
        return (f"data root {root.root} has seen ledger entry {seq} with hash {want[:16]}, but "
                f"the ledger's entry {seq} has {have[:16]}: another history of the same ledger")
    return None


def record_head(root: DataRoot, ledger: Ledger) -> None:
    """Raise the data root's high-water mark to the ledger's head (never lower it)."""
    seq, chain = ledger.head()
    mark = recorded_head(root)
    if mark is not None and mark[0] >= seq:
        return  # the common case (a step that wrote nothing): no lock, no write
    lock_path = root.root / f".{HEAD_FILE}.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            mark = recorded_head(root)
            if mark is not None and mark[0] >= seq:
                return
            tmp = root.root / f".{HEAD_FILE}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps({"seq": seq, "chain_sha256": chain,
                                       "ledger_id": ledger.ledger_id}) + "\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, root.root / HEAD_FILE)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ledger_anchor(ledger: Ledger) -> dict[str, object]:
    """What a release manifest records of the ledger it was published under: its id and
    the chain entry it had reached. Releases are public and copied by consumers, so a
    ledger later rolled back (together with the data root's mark) no longer holds that
    entry, and `ledger --verify` says so (:func:`release_problems`)."""
    seq, chain = ledger.head()
    return {"ledger_id": ledger.ledger_id, "chain_seq": seq, "chain_sha256": chain}


def release_problems(root: DataRoot, ledger: Ledger) -> list[str]:
    """Every published release whose manifest names a chain entry this ledger lacks."""
    out = []
    for manifest_path in sorted(root.root.glob("published/*/releases/*/manifest.json")):
        try:
            anchor = json.loads(manifest_path.read_text()).get("ledger")
        except (OSError, ValueError) as exc:
            out.append(f"{manifest_path}: unreadable ({type(exc).__name__})")
            continue
        if not isinstance(anchor, dict) or anchor.get("ledger_id") != ledger.ledger_id:
            continue  # published before releases were anchored, or under another ledger
        seq, want = anchor.get("chain_seq"), anchor.get("chain_sha256")
        have = ledger.chain_sha256(int(seq)) if isinstance(seq, int) else None
        if have != want:
            state = "lacks" if have is None else "holds with another hash"
            out.append(f"release {manifest_path.parent.name} was published at ledger entry "
                       f"{seq}, which this ledger {state}: the ledger was rolled back or "
                       "rewritten")
    return out


def open_ledger(root: DataRoot, url: str) -> Ledger:
    """The ledger at ``url``, bound to ``root`` (see :func:`bind`)."""
    ledger = Ledger(url)
    try:
        if root.root.is_dir():
            bind(root, ledger)
            problem = head_problem(root, ledger)
            if problem is not None:
                raise LedgerMismatch(problem + "; nothing was read or spent")
            record_head(root, ledger)
            ledger.after_write = lambda: record_head(root, ledger)
    except Exception:
        ledger.dispose()
        raise
    return ledger
