"""Verify a published release as its consumer can: ``python -m dp_ops verify-release DIR
[--public-key FILE]``.

It needs the release directory only: no ledger, no private data, no Airflow, nothing of
the data root. It checks

- with ``--public-key`` (the publisher's OpenSSH public key or ``allowed_signers`` file),
  that ``manifest.json.sig`` is a good signature of the manifest's exact bytes by one of
  those keys (:mod:`dp_ops.sshsig`): the release is the publisher's. Without it the
  outcome says *integrity only: not authenticated*, since a mirror can edit a value and
  recompute every checksum; a signature that does not verify even under its own key is
  still a problem (damage);
- that ``manifest.json`` is there, is JSON, and conforms to the manifest schema of its
  ``schema_version`` (shipped with the package, docs/release-contract.md);
- every file the manifest lists: a regular file inside the release (no link, no ``..``,
  no absolute path, listed once), of the listed size and sha256;
- that the release holds no file the manifest does not list (the signature aside);
- every data file against its report's column schema (shipped for ``mobility`` and
  ``symptoms``; for a report of an agency's own, the schema its package ships, passed
  with ``--columns``);
- that the files agree with each other (:mod:`dp_ops.release_consistency`): every CSV with
  its Parquet twin, every other CSV with the CSV of the same header, every intervals
  file with its data file.

Whether the release is the one the operator recorded at publish is the ledger's to say
(``python -m dp_ops ledger --verify``).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from dp_ops import sshsig
from dp_ops.release_consistency import consistency_problems
from dp_ops.release_signing import NAMESPACE, SIGNATURE_FILE
from dp_ops.steps.release import sha256_file
from dp_ops.steps.release_contract import (
    READABLE_VERSIONS,
    check_manifest,
    check_release_files,
)

MANIFEST = "manifest.json"
_REPORT_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
# Problems listed at most (a release broken everywhere says so once per kind).
_MAX_PROBLEMS = 50


@dataclass(frozen=True)
class Verification:
    """The outcome: ``problems`` empty means the release verifies; ``authenticated_by``
    the fingerprint of the trusted key whose signature verified (None: integrity only);
    ``notes`` say what could not be checked."""

    release_dir: Path
    report: str | None
    release_id: str | None
    files_checked: int
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()
    authenticated_by: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"release_dir": str(self.release_dir), "report": self.report,
                "release_id": self.release_id, "files_checked": self.files_checked,
                "verified": self.ok, "authenticated": self.ok and bool(self.authenticated_by),
                "signed_by": self.authenticated_by, "problems": list(self.problems),
                "notes": list(self.notes)}

    def text(self) -> str:
        what = (f"release {self.release_id or '?'} of report {self.report or '?'} in "
                f"{self.release_dir}")
        checked = (f"{self.files_checked} file(s) match the manifest's sizes and sha256s; "
                   "the files agree with each other; the manifest and the data files "
                   "conform to the release contract")
        if self.ok and self.authenticated_by:
            lines = [f"OK: {what}: the manifest's signature by key {self.authenticated_by} "
                     f"verifies against the given public key; {checked}"]
        elif self.ok:
            lines = [f"INTEGRITY ONLY, NOT AUTHENTICATED: {what}: {checked}. No public key "
                     "was given, so nothing shows who published it (anyone can edit a file "
                     "and recompute the checksums): pass the publisher's allowed_signers or "
                     "public key with --public-key"]
        else:
            lines = [f"NOT VERIFIED: {what}: {len(self.problems)} problem(s)"]
            lines += [f"  - {p}" for p in self.problems]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _signature_problems(root: Path, manifest: Mapping[str, Any], data: bytes,
                        trusted: Sequence[sshsig.TrustedKey] | None
                        ) -> tuple[str | None, list[str], list[str]]:
    """The fingerprint of the trusted key whose signature of the manifest bytes ``data``
    verifies (None without ``trusted``), the problems, and notes. Without ``trusted`` the
    signature is checked under its own key only: that catches damage, not forgery."""
    fields = manifest.get("signature")
    signed = isinstance(fields, dict) and fields.get("format") == "sshsig"
    if not signed:
        if trusted is not None:
            return None, [f"{MANIFEST}: the release is not signed, so --public-key cannot "
                          "authenticate it"], []
        return None, [], ["the release is not signed: nothing can show who published it"]
    assert isinstance(fields, dict)
    path = root / SIGNATURE_FILE
    if path.is_symlink() or not path.is_file():
        return None, [f"{SIGNATURE_FILE}: missing (the manifest says the release is "
                      "signed)"], []
    armored = path.read_text(encoding="utf-8", errors="replace")
    if trusted is None:
        own = sshsig.signer_key(armored)
        if own is None:
            return None, [f"{SIGNATURE_FILE}: not a readable SSH signature"], []
        checked = sshsig.verify(armored, data, NAMESPACE, [sshsig.TrustedKey(own)])
        problems = ([] if checked.ok else
                    [f"{SIGNATURE_FILE}: {checked.problem} (not a signature of this "
                     f"{MANIFEST})"])
        return None, problems, []
    checked = sshsig.verify(armored, data, NAMESPACE, trusted)
    if not checked.ok:
        return None, [f"{SIGNATURE_FILE} / {MANIFEST}: {checked.problem}"], []
    named = fields.get("public_key_fingerprint")
    notes = ([] if named == checked.signer else
             [f"signed by key {checked.signer}, a trusted key, while the manifest names "
              f"{str(named)[:60]} (signed again after a key rotation)"])
    return checked.signer, [], notes


def _noting_repeats(twice: list[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A JSON ``object_pairs_hook`` that notes every key given twice in one object."""
    def build(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                twice.append(key)
            out[key] = value
        return out
    return build


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


def installed_columns(report: str) -> Mapping[str, Any] | None:
    """The column schema of ``report`` when it is installed here (its release parts'
    ``column_contract``), else None."""
    from dp_ops.reports.registry import declared_report
    from dp_ops.reports.spec import UnknownReport, report_spec

    try:
        return declared_report(report_spec(report)).release.column_contract
    except (UnknownReport, FileNotFoundError):
        return None


def verify_release(directory: Path, column_schema: Mapping[str, Any] | None = None,
                   trusted: Sequence[sshsig.TrustedKey] | None = None) -> Verification:
    """Check the release in ``directory`` (see the module docstring); with ``trusted``
    (the publisher's public keys), its signature too."""
    root = Path(directory)
    problems: list[str] = []
    notes: list[str] = []

    signer: str | None = None

    def done(report: str | None = None, release_id: str | None = None,
             checked: int = 0) -> Verification:
        shown = problems[:_MAX_PROBLEMS]
        if len(problems) > _MAX_PROBLEMS:
            shown.append(f"... and {len(problems) - _MAX_PROBLEMS} more")
        return Verification(root, report, release_id, checked, tuple(shown), tuple(notes),
                            signer)

    manifest_path = root / MANIFEST
    if manifest_path.is_symlink() or not manifest_path.is_file():
        problems.append(f"{MANIFEST}: missing (not a release directory, or a damaged one)")
        return done()
    twice: list[str] = []
    try:
        manifest_bytes = manifest_path.read_bytes()
        manifest = json.loads(manifest_bytes, object_pairs_hook=_noting_repeats(twice))
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
    problems += [f"{MANIFEST}: {key[:80]!r} appears twice in one object (a reader may take "
                 "either)" for key in twice]
    signer, signature_problems, signature_notes = _signature_problems(
        root, manifest, manifest_bytes, trusted)
    problems += signature_problems
    notes += signature_notes
    problems += [f"{MANIFEST}: {p}" for p in check_manifest(manifest)]

    files = manifest.get("files")
    if not isinstance(files, dict):
        return done(report, release_id)
    checked = 0
    seen: set[str] = set()
    for name, meta in sorted(files.items(), key=lambda kv: str(kv[0])):
        path, why = _listed_path(root, name)
        if path is None:
            problems.append(str(why))
            continue
        # one file under two names (a/../a is refused above; ./a, a//b normalise here)
        canonical = PurePosixPath(str(name)).as_posix()
        if canonical in seen or canonical in (MANIFEST, SIGNATURE_FILE):
            problems.append(f"{name}: listed twice, or names the manifest or its signature")
            continue
        seen.add(canonical)
        if not isinstance(meta, dict):
            continue  # the schema check above names it
        checked += 1
        size = path.stat().st_size
        if meta.get("bytes") != size:
            problems.append(f"{name}: {size} bytes, the manifest says {meta.get('bytes')}")
        elif sha256_file(path) != meta.get("sha256"):
            problems.append(f"{name}: its sha256 is not the manifest's (changed since it "
                            "was published)")
    unlisted = sorted(_present_files(root) - set(map(str, files))
                      - {MANIFEST, SIGNATURE_FILE})
    problems += [f"{name}: in the release directory but not listed in the manifest"
                 for name in unlisted]

    contract = column_schema
    if contract is None and report is not None:
        contract = installed_columns(report)
        if contract is None:
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
    if not problems:  # files that match their checksums and their columns: compare them
        problems += consistency_problems(root, sorted(seen))
    return done(report, release_id, checked)
