"""Verify a published release as its consumer can: ``python -m dp_ops verify-release DIR``.

It needs the release directory only: no ledger, no private data, no Airflow, nothing of
the data root. It checks

- that ``manifest.json`` is there, is JSON, and conforms to the manifest schema of its
  ``schema_version`` (shipped with the package, docs/release-contract.md);
- every file the manifest lists: a regular file inside the release (no link, no ``..``),
  of the listed size and sha256;
- that the release holds no file the manifest does not list;
- every data file against its report's column schema (shipped for ``mobility`` and
  ``symptoms``; for a report of an agency's own, the schema its package ships, passed
  with ``--columns``).

What it cannot check without the ledger is whether the release is the one the operator
published: the operator's ``python -m dp_ops ledger --verify`` does that.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from dp_ops.steps.release import sha256_file
from dp_ops.steps.release_contract import (
    READABLE_VERSIONS,
    check_manifest,
    check_release_files,
    load_schema,
)

MANIFEST = "manifest.json"
_REPORT_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
# Problems listed at most (a release broken everywhere says so once per kind).
_MAX_PROBLEMS = 50


@dataclass(frozen=True)
class Verification:
    """The outcome: ``problems`` empty means the release verifies; ``notes`` say what
    could not be checked."""

    release_dir: Path
    report: str | None
    release_id: str | None
    files_checked: int
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"release_dir": str(self.release_dir), "report": self.report,
                "release_id": self.release_id, "files_checked": self.files_checked,
                "verified": self.ok, "problems": list(self.problems),
                "notes": list(self.notes)}

    def text(self) -> str:
        what = (f"release {self.release_id or '?'} of report {self.report or '?'} in "
                f"{self.release_dir}")
        if self.ok:
            lines = [f"OK: {what}: {self.files_checked} file(s) match the manifest's sizes "
                     "and sha256s; the manifest and the data files conform to the release "
                     "contract"]
        else:
            lines = [f"NOT VERIFIED: {what}: {len(self.problems)} problem(s)"]
            lines += [f"  - {p}" for p in self.problems]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _listed_path(root: Path, name: object) -> tuple[Path | None, str | None]:
    """The path of a file the manifest lists, or why it cannot be one of the release's
    own files (absolute, ``..``, a link on the way, not a regular file, missing)."""
    if not isinstance(name, str) or not name or "\\" in name or "\x00" in name:
        return None, f"{str(name)[:80]!r}: not a file name of the release"
    parts = PurePosixPath(name).parts
    if PurePosixPath(name).is_absolute() or any(p in ("..", ".", "") for p in parts):
        return None, f"{name[:80]!r}: points outside the release"
    path = root
    for part in parts:
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return None, f"{name}: listed in the manifest but missing"
        if stat.S_ISLNK(mode):
            return None, f"{name}: is (or passes through) a symbolic link"
    if not stat.S_ISREG(os.lstat(path).st_mode):
        return None, f"{name}: not a regular file"
    return path, None


def _present_files(root: Path) -> set[str]:
    """Every file or link under ``root`` (links not followed), as release-relative names."""
    found: set[str] = set()
    for base, dirs, files in os.walk(root, followlinks=False):
        rel = Path(base).relative_to(root)
        for name in files + [d for d in dirs if (Path(base) / d).is_symlink()]:
            found.add((rel / name).as_posix())
    return found


def verify_release(directory: Path,
                   column_schema: Mapping[str, Any] | None = None) -> Verification:
    """Check the release in ``directory`` (see the module docstring)."""
    root = Path(directory)
    problems: list[str] = []
    notes: list[str] = []

    def done(report: str | None = None, release_id: str | None = None,
             checked: int = 0) -> Verification:
        shown = problems[:_MAX_PROBLEMS]
        if len(problems) > _MAX_PROBLEMS:
            shown.append(f"... and {len(problems) - _MAX_PROBLEMS} more")
        return Verification(root, report, release_id, checked, tuple(shown), tuple(notes))

    manifest_path = root / MANIFEST
    if manifest_path.is_symlink() or not manifest_path.is_file():
        problems.append(f"{MANIFEST}: missing (not a release directory, or a damaged one)")
        return done()
    try:
        manifest = json.loads(manifest_path.read_bytes())
    except (OSError, ValueError) as exc:
        problems.append(f"{MANIFEST}: not readable JSON ({str(exc)[:120]})")
        return done()
    if not isinstance(manifest, dict):
        problems.append(f"{MANIFEST}: not a JSON object")
        return done()
    named = manifest.get("report")
    report = named if isinstance(named, str) and _REPORT_NAME.fullmatch(named) else None
    release_id = (manifest.get("release_id")
                  if isinstance(manifest.get("release_id"), str) else None)
    version = manifest.get("schema_version")
    if version not in READABLE_VERSIONS:
        problems.append(f"{MANIFEST}: schema_version {str(version)[:20]!r}; this version "
                        f"of dp-ops reads {', '.join(READABLE_VERSIONS)}: use the dp-ops "
                        "that wrote it")
        return done(report, release_id)
    problems += [f"{MANIFEST}: {p}" for p in check_manifest(manifest)]

    files = manifest.get("files")
    if not isinstance(files, dict):
        return done(report, release_id)
    checked = 0
    for name, meta in sorted(files.items(), key=lambda kv: str(kv[0])):
        path, why = _listed_path(root, name)
        if path is None:
            problems.append(str(why))
            continue
        if not isinstance(meta, dict):
            continue  # the schema check above names it
        checked += 1
        size = path.stat().st_size
        if meta.get("bytes") != size:
            problems.append(f"{name}: {size} bytes, the manifest says {meta.get('bytes')}")
        elif sha256_file(path) != meta.get("sha256"):
            problems.append(f"{name}: its sha256 is not the manifest's (changed since it "
                            "was published)")
    unlisted = sorted(_present_files(root) - set(map(str, files)) - {MANIFEST})
    problems += [f"{name}: in the release directory but not listed in the manifest"
                 for name in unlisted]

    contract = column_schema
    if contract is None and report is not None:
        try:
            contract = load_schema(f"{report}.columns.json")
        except (FileNotFoundError, ValueError):
            notes.append(f"no column schema is shipped for report {report!r}: the data "
                         "files' columns were not checked (pass the report's own with "
                         "--columns)")
    if contract is not None and report is not None:
        try:
            problems += check_release_files(report, root, contract,
                                            version=str(version))
        except Exception as exc:  # a data file a reader cannot parse
            problems.append(f"a data file cannot be read as its column schema says "
                            f"({type(exc).__name__}: {str(exc)[:160]})")
    return done(report, release_id, checked)
