"""What earlier gates validated: a gate validates with GX only the rows of files no gate
validated before under the same rules."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from dp_ops.gx.project import file_lock
from dp_ops.privacy.ledger_key import seal, sealed

log = logging.getLogger(__name__)

# -- what earlier gates validated -----------------------------------------------------------
# Files whose rows passed a report's row-level suites, by a label (a day) and the file's
# sha256, under ``<gx_dir>/validated/<report>.json``. A gate validates with GX only the
# rows of files not in it, and rules that hold for a set of rows when they hold for each
# row cannot fail on the union of sets that each passed. Deleting the record costs one
# full validation and nothing else; a record of other rules is ignored.
#
# The record lies in the data root, which someone without the ledger key can write
# (PRIVACY.md, Threat model): planted, it would spare a file the row-level checks. So it
# carries a MAC under the ledger key over the report, the rules and the files, and a
# record whose MAC does not verify (planted, edited, or written before records carried
# one) counts as nothing validated.
VALIDATED_DIR = "validated"
_VALIDATED_VERSION = 2
_RECORD_KIND = "gx_validated"


def _validated_path(gx_dir: Path, report: str) -> Path:
    return Path(gx_dir) / VALIDATED_DIR / f"{report}.json"


def _body(report: str, rules: str, files: dict[str, str]) -> dict[str, Any]:
    return {"version": _VALIDATED_VERSION, "report": report, "rules": rules, "files": files}


def validated_files(gx_dir: Path, report: str, rules: str, *, key: bytes) -> dict[str, str]:
    """label -> sha256 of the files that passed ``rules`` (empty when there is no record,
    it cannot be read, it is of other rules or another layout, or its MAC under the
    ledger ``key`` does not verify)."""
    path = _validated_path(gx_dir, report)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict) or record.get("rules") != rules:
        return {}
    files = record.get("files")
    if (record.get("version") != _VALIDATED_VERSION or not isinstance(files, dict)
            or not all(isinstance(v, str) for v in files.values())
            or not sealed(key, _RECORD_KIND, _body(report, rules, files), record.get("mac"))):
        log.warning("%s carries no valid MAC under the ledger key (edited, planted or "
                    "written by an older version): ignored, every day is validated again",
                    path)
        return {}
    return dict(files)


def record_validated(gx_dir: Path, report: str, rules: str, files: dict[str, str], *,
                     key: bytes) -> None:
    """Add ``files`` (label -> sha256) to the record of what passed ``rules`` (call only
    after they passed), sealed with the ledger ``key``. Concurrent gates merge under a
    lock; a record of other rules, or one that does not verify, is replaced."""
    from dp_ops.engine.files import write_json_atomic

    path = _validated_path(gx_dir, report)
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.parent / f".{report}.lock"):
        merged = {**validated_files(gx_dir, report, rules, key=key), **files}
        body = _body(report, rules, dict(sorted(merged.items())))
        write_json_atomic(path, {**body, "mac": seal(key, _RECORD_KIND, body)})
