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

Both records live where an attacker can write, so each carries a MAC under the ledger key
(:mod:`dp_ops.privacy.ledger_key`), which does not live in the data root: a record
rewritten to name another ledger, or a high-water mark lowered to a made-up entry, does
not verify and is refused. A data root that holds noise or releases must hold both.

Releases are bound too: publishing records each release's manifest (its sha256) in the
ledger before the release directory appears, and :func:`require_sound` (every noise step
and every publish) refuses to go on while any release in the data root is not the one
recorded, names another ledger, or names a chain entry the ledger lacks.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dp_ops.errors import LedgerMismatch, LedgerTampered
from dp_ops.layout import DataRoot
from dp_ops.privacy import ledger_key
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


def _read_record(path: Path) -> dict[str, object] | None:
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict):
            raise TypeError("not a JSON object")
        return record
    except (OSError, ValueError, TypeError) as exc:
        raise LedgerMismatch(f"{path}: unreadable ({type(exc).__name__}); restore it from a "
                             "backup of this data root") from exc


def recorded_ledger_id(root: DataRoot, key: bytes | None = None) -> str | None:
    """The ledger id the data root recorded at first use (None: not bound yet). With
    ``key``, the record's MAC must verify under it (:class:`LedgerMismatch` otherwise)."""
    path = root.root / IDENTITY_FILE
    record = _read_record(path)
    if record is None:
        return None
    ledger_id = str(record.get("ledger_id"))
    if key is not None and not ledger_key.sealed(key, "identity", {"ledger_id": ledger_id},
                                                  record.get("mac")):
        raise LedgerMismatch(
            f"{path}: its MAC does not verify under the ledger key (id "
            f"{ledger_key.key_id(key)}): the record was written or edited by someone "
            "without the key, or under another key. Restore it from a backup of this data "
            "root; nothing was read or spent")
    return ledger_id


def bind(root: DataRoot, ledger: Ledger) -> None:
    """Record ``ledger``'s id in the data root at first use; refuse any other ledger.

    A data root that holds stored noise or releases but no identity file has lost it: a
    fresh ledger there would draw fresh noise for days already noised, so that is refused
    too, with the remedy."""
    path = root.root / IDENTITY_FILE
    key = ledger.key()
    recorded = recorded_ledger_id(root, key)
    if recorded is None:
        if holds_state(root):
            raise LedgerMismatch(
                f"data root {root.root} holds stored noise or releases but no "
                f"{IDENTITY_FILE}: nothing says which ledger accounts for them. Restore the "
                "file from a backup of this data root (`python -m dp_ops ledger --verify` "
                "prints the id of the ledger DP_LEDGER_URL points at)")
        body = json.dumps({"ledger_id": ledger.ledger_id,
                           "bound_at": datetime.now(UTC).isoformat(timespec="seconds"),
                           "ledger_url": safe_url(ledger.url),
                           "mac": ledger_key.seal(key, "identity",
                                                  {"ledger_id": ledger.ledger_id})},
                          indent=2) + "\n"
        tmp = path.with_name(f".{IDENTITY_FILE}.{os.getpid()}.tmp")
        tmp.write_text(body)
        os.chmod(tmp, 0o644)
        try:
            os.link(tmp, path)  # atomic, and fails if another process bound it first
            return
        except FileExistsError:
            recorded = recorded_ledger_id(root, key)
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


def _head_body(seq: int, chain: str, ledger_id: str) -> dict[str, object]:
    return {"seq": seq, "chain_sha256": chain, "ledger_id": ledger_id}


def recorded_head(root: DataRoot, key: bytes | None = None) -> tuple[int, str] | None:
    """The data root's high-water mark (seq, chain hash), None when there is none. With
    ``key``, its MAC must verify (:class:`LedgerMismatch` otherwise)."""
    path = root.root / HEAD_FILE
    mark = _read_record(path)
    if mark is None:
        return None
    try:
        seq, chain, ledger_id = int(str(mark["seq"])), str(mark["chain_sha256"]), str(
            mark["ledger_id"])
    except (KeyError, ValueError) as exc:
        raise LedgerMismatch(f"{path}: unreadable ({type(exc).__name__}); restore it from a "
                             "backup of this data root") from exc
    if key is not None and not ledger_key.sealed(key, "head", _head_body(seq, chain,
                                                                          ledger_id),
                                                  mark.get("mac")):
        raise LedgerMismatch(
            f"{path}: its MAC does not verify under the ledger key: the high-water mark "
            "was written or edited without the key. Restore it from a backup of this data "
            "root; nothing was read or spent")
    return seq, chain


def head_problem(root: DataRoot, ledger: Ledger) -> str | None:
    """Why ``ledger`` is older than (or forked from) what the data root has seen, if it is;
    also when a data root that holds noise or releases has no mark at all (deleted: it
    would let an older copy of the ledger pass)."""
    mark = recorded_head(root, ledger.key())
    if mark is None:
        if holds_state(root):
            return (f"data root {root.root} holds stored noise or releases but no "
                    f"{HEAD_FILE}: nothing says how far the ledger had come. Restore the "
                    "file from a backup of this data root")
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
    mark = recorded_head(root, ledger.key())
    if mark is not None and mark[0] >= seq:
        return  # the common case (a step that wrote nothing): no lock, no write
    lock_path = root.root / f".{HEAD_FILE}.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            mark = recorded_head(root, ledger.key())
            if mark is not None and mark[0] >= seq:
                return
            tmp = root.root / f".{HEAD_FILE}.{os.getpid()}.tmp"
            body = _head_body(seq, chain, ledger.ledger_id)
            tmp.write_text(json.dumps({**body, "mac": ledger_key.seal(
                ledger.key(), "head", body)}) + "\n")
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


RELEASE_RECORD = "release/{release_id}"


def record_release(ledger: Ledger, report: str, release_id: str, manifest_sha256: str) -> None:
    """Record the sha256 of release ``release_id``'s manifest before its directory appears
    (:func:`dp_ops.steps.release.promote`). A publish that crashed before the rename is
    retried with a new manifest (its anchor moved): the record then moves with it; once
    the directory exists the record is final."""
    name = RELEASE_RECORD.format(release_id=release_id)
    ledger.record_derived(report, name, manifest_sha256,
                          replaces=ledger.derived_sha256(report, name))


def release_problems(root: DataRoot, ledger: Ledger) -> list[str]:
    """Every release in the data root that is not bound to this ledger: its manifest is
    not the one recorded at publish (planted, edited, or from another history), it names
    another ledger, or it names a chain entry this ledger lacks (rolled back)."""
    out = []
    recorded: dict[str, dict[str, str]] = {}
    for manifest_path in sorted(root.root.glob("published/*/releases/*/manifest.json")):
        report, release_id = manifest_path.parts[-4], manifest_path.parent.name
        if report not in recorded:
            recorded[report] = ledger.derived_current(report, RELEASE_RECORD.format(
                release_id=""))
        want_sha = recorded[report].get(RELEASE_RECORD.format(release_id=release_id))
        label = f"release {report}/{release_id}"
        try:
            data = manifest_path.read_bytes()
            have_sha = hashlib.sha256(data).hexdigest()
            anchor = json.loads(data).get("ledger")
        except (OSError, ValueError, AttributeError) as exc:
            out.append(f"{label}: {manifest_path} unreadable ({type(exc).__name__})")
            continue
        if want_sha is None:
            out.append(f"{label}: this ledger recorded no such release (planted, or "
                       "published under another ledger or an older copy of this one)")
            continue
        if have_sha != want_sha:
            out.append(f"{label}: its manifest.json is not the one recorded at publish "
                       "(edited or replaced)")
            continue
        if not isinstance(anchor, dict) or anchor.get("ledger_id") != ledger.ledger_id:
            out.append(f"{label}: its manifest names another ledger")
            continue
        seq, want = anchor.get("chain_seq"), anchor.get("chain_sha256")
        have = ledger.chain_sha256(int(seq)) if isinstance(seq, int) else None
        if have != want:
            state = "lacks" if have is None else "holds with another hash"
            out.append(f"release {release_id} was published at ledger entry {seq}, which "
                       f"this ledger {state}: the ledger was rolled back or rewritten")
    return out


# Where the host keeps what it announced of each publish (Airflow: the release asset
# events, dp_ops.airflow.runtime), outside the data root: a callable returning the events'
# extras (report, release_id, manifest_sha256, data_root), or None outside such a host.
_announcements: Callable[[], list[Mapping[str, Any]]] | None = None


def use_announcements(provider: Callable[[], list[Mapping[str, Any]]] | None) -> None:
    global _announcements
    _announcements = provider


def announcement_problems(root: DataRoot, ledger: Ledger,
                          announced: list[Mapping[str, Any]]) -> list[str]:
    """Every release announced from this data root (``announced``: the host's records of
    each publish, kept outside the data root) that this ledger does not hold with the same
    manifest: the ledger and the data root were restored, together, from before it."""
    out = []
    here = str(root.root.resolve())
    recorded: dict[str, dict[str, str]] = {}
    for event in announced:
        report, release_id = event.get("report"), event.get("release_id")
        if event.get("data_root") != here or not isinstance(report, str):
            continue  # another data root's releases (or an event from before this check)
        if report not in recorded:
            recorded[report] = ledger.derived_current(report, RELEASE_RECORD.format(
                release_id=""))
        want = event.get("manifest_sha256")
        if recorded[report].get(RELEASE_RECORD.format(release_id=release_id)) != want:
            out.append(f"release {report}/{release_id} was announced (an Airflow asset "
                       f"event, manifest sha256 {str(want)[:16]}...) but this ledger does not "
                       "hold it: the ledger was restored from before it was published, or "
                       "replaced")
    return out


def require_sound(root: DataRoot, ledger: Ledger) -> None:
    """Refuse to spend or publish unless the ledger verifies under the key, every release
    in the data root is bound to it (:func:`release_problems`) and, inside a host that
    keeps them, every release announced from this data root is held by it
    (:func:`announcement_problems`)."""
    require_verified_ledger(ledger)
    problems = release_problems(root, ledger)
    if _announcements is not None:
        problems += announcement_problems(root, ledger, _announcements())
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise LedgerTampered(
            f"{problems[0]}{more}. Nothing is spent or published until the data root and "
            "the ledger agree; see OPERATIONS.md, The ledger fails verification")


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
