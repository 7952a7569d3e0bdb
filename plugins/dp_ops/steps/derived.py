"""Derived state bound to the ledger (docs/design.md, Derived state): the frozen baseline,
the symptoms scaling factors and each method update's factors.

Later releases rest on these files, so halving the baseline or multiplying the scaling
factors would be published silently unless someone checks. Each version of such a file is
recorded in the ledger (``derived_state``: its sha256) *before* it becomes visible, and
every read verifies the file against the version recorded last:

- :func:`store_recorded` writes the table to a pending file beside the target (its name
  carries a MAC under the ledger key of the record and the sha256: dp_ops.steps.pending),
  records its sha256 in the ledger, then moves it into place (a frozen file: only if there
  is none);
- :func:`verify_recorded` refuses a file that is missing, differs, or exists with no
  record (:class:`DerivedStateTampered`). A pending file named with the MAC of the recorded
  version and holding it is the trace of a crash between the record and the move: it is
  moved into place; a pending file of any other name is never adopted.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.engine.files import (
    PENDING_SUFFIX,
    adopt,
    make_dirs,
    pending_path,
    pending_paths,
    write_parquet_beside,
)
from dp_ops.errors import DerivedStateConflict, DerivedStateTampered
from dp_ops.privacy.ledger import Ledger
from dp_ops.steps.pending import pending_tag
from dp_ops.steps.release import sha256_file


def _pending_files(target: Path) -> list[Path]:
    """Every pending file of ``target``, whoever named it (for a writer's clean-up)."""
    return sorted(target.parent.glob(f".{target.name}.*{PENDING_SUFFIX}"))


def _tag(target: Path, report: str, name: str, sha256: str) -> str:
    return pending_tag(target, f"derived_state/{report}/{name}", sha256)


def verify_recorded(ledger: Ledger, report: str, name: str, target: Path, *,
                    writer: bool = False) -> bool:
    """True if ``target`` is the version the ledger recorded last, False if none was ever
    recorded and the file does not exist; otherwise raise, naming the file and the remedy.

    A pending file holding the recorded version is a write between its record and its
    move (in progress, or crashed): a missing target gets it (a hard link, safe beside a
    live writer); an existing target that is the previous version is accepted as it is by
    a reader, and replaced by a ``writer`` (who holds the lock that serialises writers)."""
    versions = ledger.derived_versions(report, name)
    if not versions:
        if target.exists():
            raise DerivedStateTampered(
                f"{target} exists but the ledger has no record of it ({report}/{name}): it "
                "was not written by the pipeline. Move it away; the pipeline rebuilds what "
                "it can from stored noise")
        return False
    recorded = versions[-1]
    pending = [p for p in pending_paths(target, _tag(target, report, name, recorded))
               if sha256_file(p) == recorded] if _pending_files(target) else []
    if pending and not target.exists():
        try:
            adopt(pending[0], target, replace=False)
        except FileExistsError:
            pass
    if not target.exists():
        raise DerivedStateTampered(
            f"{target} is missing; the ledger recorded its sha256 {recorded} "
            f"({report}/{name}). Restore it from a backup (it is verified on restore); "
            "it is never rebuilt silently")
    actual = sha256_file(target)
    if actual != recorded and pending and len(versions) > 1 and actual == versions[-2]:
        if not writer:
            return True  # the previous version, with the next one being moved in
        adopt(pending[0], target)
        actual = recorded
    if actual != recorded:
        raise DerivedStateTampered(
            f"{target} has sha256 {actual}, not the {recorded} the ledger recorded for "
            f"{report}/{name} when it was written: it was edited or swapped. Restore the "
            "recorded version from a backup; nothing was published from it")
    for stale in _pending_files(target):
        if writer:
            stale.unlink(missing_ok=True)
    return True


def read_recorded(ledger: Ledger, report: str, name: str, target: Path) -> pa.Table | None:
    """The version of ``target`` the ledger recorded last, parsed from the very bytes
    checked against the record (no second open a swapped file could slip into); None if
    none was ever recorded and there is no file. Raises like :func:`verify_recorded`."""
    if not verify_recorded(ledger, report, name, target):
        return None
    recorded = ledger.derived_sha256(report, name)
    data = target.read_bytes()
    if hashlib.sha256(data).hexdigest() != recorded:
        raise DerivedStateTampered(
            f"{target} changed while it was read: it is not the version the ledger recorded "
            f"for {report}/{name}. Nothing was published from it")
    return pq.read_table(pa.BufferReader(data))


def store_recorded(ledger: Ledger, report: str, name: str, table: pa.Table, target: Path,
                   *, frozen: bool) -> bool:
    """Record, then store ``table`` at ``target``; True if this call's version is the one
    in place. ``frozen``: the file is written once (a second writer finds the first one's
    file, verifies it and returns False); otherwise it replaces the current version, which
    must verify first (call under the lock that serialises its writers)."""
    if frozen and verify_recorded(ledger, report, name, target):
        return False
    if not frozen:
        verify_recorded(ledger, report, name, target, writer=True)
    current = ledger.derived_sha256(report, name)
    make_dirs(target.parent)
    tmp = write_parquet_beside(table, target)
    pending = tmp
    try:
        digest = sha256_file(tmp)
        pending = pending_path(target, _tag(target, report, name, digest))
        os.replace(tmp, pending)
        try:
            ledger.record_derived(report, name, digest,
                                  replaces=None if frozen else current)
        except DerivedStateConflict:
            if frozen and verify_recorded(ledger, report, name, target):
                return False  # another run recorded and stored its version first
            raise
        if frozen:
            try:
                os.link(pending, target)
            except FileExistsError:
                verify_recorded(ledger, report, name, target)
                return False
        else:
            os.replace(pending, target)
        return True
    finally:
        tmp.unlink(missing_ok=True)
        pending.unlink(missing_ok=True)
