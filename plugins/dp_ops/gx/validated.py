"""What earlier gates validated: a gate validates with GX only the rows of files no gate
validated before under the same rules."""

from __future__ import annotations

import json
from pathlib import Path

from dp_ops.gx.project import file_lock

# -- what earlier gates validated -----------------------------------------------------------
# Files whose rows passed a report's row-level suites, by a label (a day) and the file's
# sha256, under ``<gx_dir>/validated/<report>.json``. A gate validates with GX only the
# rows of files not in it, and rules that hold for a set of rows when they hold for each
# row cannot fail on the union of sets that each passed. Deleting the record (or the GX
# project) costs one full validation and nothing else; a record of other rules is ignored.
VALIDATED_DIR = "validated"
_VALIDATED_VERSION = 1


def _validated_path(gx_dir: Path, report: str) -> Path:
    return Path(gx_dir) / VALIDATED_DIR / f"{report}.json"


def validated_files(gx_dir: Path, report: str, rules: str) -> dict[str, str]:
    """label -> sha256 of the files that passed ``rules`` (empty when there is no record,
    it cannot be read, or it is of other rules or another layout)."""
    try:
        record = json.loads(_validated_path(gx_dir, report).read_text())
    except (OSError, ValueError):
        return {}
    if (not isinstance(record, dict) or record.get("version") != _VALIDATED_VERSION
            or record.get("rules") != rules or not isinstance(record.get("files"), dict)):
        return {}
    return {str(k): str(v) for k, v in record["files"].items()}


def record_validated(gx_dir: Path, report: str, rules: str, files: dict[str, str]) -> None:
    """Add ``files`` (label -> sha256) to the record of what passed ``rules`` (call only
    after they passed). Concurrent gates merge under a lock; a record of other rules is
    replaced."""
    from dp_ops.engine.files import write_json_atomic

    path = _validated_path(gx_dir, report)
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.parent / f".{report}.lock"):
        merged = {**validated_files(gx_dir, report, rules), **files}
        write_json_atomic(path, {"version": _VALIDATED_VERSION, "rules": rules,
                                 "files": dict(sorted(merged.items()))})
