"""Shared release plumbing: staging areas, checksums, Google-style CSVs and the atomic
promotion of a staged release to ``published/<report>/releases/<id>`` with ``latest``
repointed by one rename (readers see the old release or the new one, never a mix)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dp_ops.engine.files import exclusive_lock, json_bytes, write_bytes_atomic
from dp_ops.errors import PublishRefused
from dp_ops.faults import fault_point
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.release_signing import SIGNATURE_FILE, ReleaseSigner
from dp_ops.steps.release_values import Staged
from dp_ops.steps.result import StepResult


def staging_dir(root: DataRoot, report: str, run_id: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:120]
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    return root.root / "staging" / report / f"{safe}-{digest}"


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """Google's CSV conventions: header, no index, empty cell for a missing value, LF.

    A wide, sparse table (key columns, then many float columns: the symptoms files) is
    written by :func:`_wide_csv_text`, byte for byte what ``DataFrame.to_csv`` writes,
    and several times faster on a year of hundreds of mostly empty symptom columns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = _wide_csv_text(frame)
    if text is None:
        frame.to_csv(path, index=False, na_rep="", lineterminator="\n", encoding="utf-8")
        return
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


# Fewer trailing float columns than this: plain DataFrame.to_csv.
_WIDE_FLOAT_COLUMNS = 32


def _wide_csv_text(frame: pd.DataFrame) -> str | None:
    """The CSV text of ``frame`` when it is key columns followed by at least
    ``_WIDE_FLOAT_COLUMNS`` float columns (else None): the keys through pandas (its
    quoting), each float as numpy's shortest repr (what pandas writes), NaN as empty."""
    kinds = [t.kind for t in frame.dtypes]
    lead = len(kinds)
    while lead > 0 and kinds[lead - 1] == "f":
        lead -= 1
    n_floats = len(kinds) - lead
    if n_floats < _WIDE_FLOAT_COLUMNS or lead == 0 or "f" in kinds[:lead] or frame.empty:
        return None
    keys = frame.iloc[:, :lead]
    if any(keys[c].astype(str).str.contains("[\r\n]").any() for c in keys.columns
           if keys[c].dtype.kind in "OUST"):
        return None  # a quoted line break would split a key line in two
    header = str(frame.iloc[:0].to_csv(index=False, lineterminator="\n"))
    key_lines = keys.to_csv(index=False, header=False, na_rep="",
                            lineterminator="\n").split("\n")[:-1]
    values = frame.iloc[:, lead:].to_numpy(np.float64)
    # sparse: each present value with the commas since the previous one in its row, so the
    # work follows the values, not rows x columns (a year is ~2% full)
    rows, cols = np.nonzero(~np.isnan(values))
    commas = ["," * i for i in range(n_floats + 1)]
    spans: dict[int, tuple[int, int, int]] = {}  # row: its pieces [a, b), its last column
    pieces: list[str] = []
    if len(rows):
        # each distinct value formatted once (two-decimal values repeat a lot)
        distinct, which = np.unique(values[rows, cols], return_inverse=True)
        texts = np.asarray(distinct.astype(str).tolist(), dtype=object)[which].tolist()
        starts = np.r_[0, np.flatnonzero(np.diff(rows)) + 1]
        ends = np.r_[starts[1:], len(rows)]
        previous = np.r_[-1, cols[:-1]]
        previous[starts] = -1  # a row's first value counts its commas from the keys
        pieces = [commas[g] + t for g, t in zip((cols - previous).tolist(), texts, strict=True)]
        spans = dict(zip(rows[starts].tolist(), zip(
            starts.tolist(), ends.tolist(), cols[ends - 1].tolist(), strict=True), strict=True))
    empty = commas[n_floats]
    out = [header]
    for i, k in enumerate(key_lines):
        span = spans.get(i)
        if span is None:
            out.append(f"{k}{empty}\n")
        else:
            a, b, last = span
            out.append(f"{k}{''.join(pieces[a:b])}{commas[n_floats - 1 - last]}\n")
    return "".join(out)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def checksums(directory: Path) -> dict[str, dict[str, Any]]:
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return {str(p.relative_to(directory)): {"sha256": sha256_file(p), "bytes": p.stat().st_size}
            for p in files}


def verify_checksums(directory: Path, files: dict[str, dict[str, Any]], *,
                     rewritten: Collection[str] = ()) -> None:
    """Refuse unless ``directory`` holds exactly ``files`` (the sealed record's list) as
    regular files, each with its recorded sha256: a file added, removed, edited or made a
    link after the gate is named. ``rewritten``: the files publish itself writes there
    before promoting, overwritten by every attempt (a retry finds the last attempt's)."""
    links = sorted(p for p in directory.rglob("*") if p.is_symlink())
    if links:
        raise PublishRefused(f"staged file {links[0]} is a symbolic link, which the gate "
                             "never writes; not published, rerun the gate")
    found = {str(p.relative_to(directory)) for p in directory.rglob("*")
             if p.is_file()} - set(rewritten)
    differ = sorted(found ^ set(files))
    if differ:
        what = "added to" if differ[0] in found else "removed from"
        raise PublishRefused(f"staged file {directory / differ[0]} was {what} the staged "
                             "release after the gate; not published, rerun the gate")
    for name, meta in files.items():
        if sha256_file(directory / name) != meta["sha256"]:
            raise PublishRefused(f"staged file {directory / name} changed after the gate")


# -- the staged record ----------------------------------------------------------------------
# The gate and the publish are separate processes, and the staging area is in the data
# root: the record of what the gate validated (its files' checksums, its result) carries a
# MAC under the ledger key, so a staged release edited or planted there is refused.
STAGED = "staged.json"
STAGED_MAC = "staged.mac"


def _write_record(stage: Path, record: dict[str, Any]) -> None:
    """Write ``stage``'s record and its MAC (of the very bytes written)."""
    from dp_ops.privacy import ledger_key

    data = json_bytes(record)
    stage.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(stage / STAGED_MAC, ledger_key.seal(
        ledger_key.load_key(), "staged", {"sha256": hashlib.sha256(data).hexdigest()}
    ).encode())
    write_bytes_atomic(stage / STAGED, data)


def write_staged(stage: Path, staged: Staged) -> None:
    """Seal ``staged`` as the record of the release staged in ``stage``."""
    _write_record(stage, staged.as_record())


def write_empty_staged(stage: Path, run_id: str) -> None:
    """Seal the record of a gate that found nothing to release."""
    _write_record(stage, {"empty": True, "run_id": run_id})


def read_staged(stage: Path, run_id: str | None = None) -> Staged | None:
    """``stage``'s record, parsed from the bytes whose MAC verified (None: its gate found
    nothing to release); with ``run_id``, it must be that run's. :class:`PublishRefused`
    otherwise, naming the file."""
    from dp_ops.privacy import ledger_key

    path = stage / STAGED
    try:
        data, tag = path.read_bytes(), (stage / STAGED_MAC).read_text()
    except FileNotFoundError:
        raise PublishRefused(f"no staged release at {stage}"
                             + (f" for run {run_id!r}" if run_id else "")
                             + ": the gate step must pass first") from None
    if not ledger_key.sealed(ledger_key.load_key(), "staged",
                             {"sha256": hashlib.sha256(data).hexdigest()}, tag.strip()):
        raise PublishRefused(f"{path}: its MAC does not verify under the ledger key: the "
                             "staged record was written or edited outside the gate. Not "
                             "published; rerun the gate")
    record = json.loads(data)
    if not isinstance(record, dict) or (run_id is not None and record.get("run_id") != run_id):
        raise PublishRefused(f"{path} is not the staged record of run {run_id!r}; rerun "
                             "the gate")
    if record.get("empty") is True:
        return None
    try:
        return Staged.from_record(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise PublishRefused(f"{path} is not a staged record this version reads ({exc!r}); "
                             "rerun the gate") from exc


@contextmanager
def publish_lock(root: DataRoot, report: str) -> Iterator[None]:
    with exclusive_lock(root.root / "staging" / f".{report}.publish.lock"):
        yield


# -- gates that would stage the same release ------------------------------------------------
# A backfill runs several runs of a report at once, and each gate stages the release of
# every day present: two gates started together often see the same days. The second one
# waits for the first and copies its staged files instead of validating and drawing the
# same release again.

# A staged release older than this is not reused (built again): a gate result stands for
# the code that produced it, and code can change without a new version in a dev install.
TWIN_MAX_AGE_S = 3600


def build_key(report: str, **parts: Any) -> str:
    """sha256 naming a staged release by everything it is built from: ``parts`` (days,
    the sha256 of the inputs, the config, ...) and this software's version. Two gates with
    the same key build the same files and the same gate result."""
    import dp_ops

    payload = {"report": report, "software_version": dp_ops.__version__, **parts}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()
                          ).hexdigest()


@contextmanager
def one_build(root: DataRoot, report: str, key: str, run_id: str) -> Iterator[Path | None]:
    """Serialise the gates of one build ``key``: yields the staging directory of a run
    that staged that release already (passed its gate, at most ``TWIN_MAX_AGE_S`` old),
    or None, in which case the caller builds it (and records ``key`` as ``build_key`` in
    its ``staged.json``) before the block ends. The lock is one of 256 files by the key's
    first two hex digits, so unrelated builds rarely wait on each other and the lock
    files stay few."""
    with exclusive_lock(root.root / "staging" / report / f".build-{key[:2]}.lock"):
        yield _staged_twin(root, report, key, run_id)


def _staged_twin(root: DataRoot, report: str, key: str, run_id: str) -> Path | None:
    oldest = time.time() - TWIN_MAX_AGE_S
    for record_path in sorted((root.root / "staging" / report).glob(f"*/{STAGED}")):
        try:
            if record_path.stat().st_mtime < oldest:
                continue
            staged = read_staged(record_path.parent)
        except (OSError, ValueError, PublishRefused):
            continue  # a staging area being removed by its publish, or not sealed
        if (staged is not None and staged.build_key == key and staged.run_id != run_id
                and staged.gate.success):
            return record_path.parent
    return None


def stage_once(root: DataRoot, report: str, key: str, *, run_id: str, stage: Path,
               label: str, build: Callable[[], StepResult]) -> StepResult:
    """Stage the release ``key`` in ``stage``: a copy of what another run staged for the
    same key (:func:`one_build`, :func:`copy_staged`), else ``build()`` under the key's
    lock. ``label`` names the release in the step's summary ("mobility release candidate
    ...")."""
    with one_build(root, report, key, run_id) as twin:
        staged = copy_staged(twin, stage, run_id) if twin is not None else None
        if staged is None:
            return build()
    return StepResult(f"{label} is the one run {staged.reused_from} staged from the same "
                      "inputs: its files and gate result are reused (no second validation); "
                      f"staged in {stage}; Data Docs: {staged.gate.data_docs}",
                      (str(stage),))


def copy_staged(twin: Path, stage: Path, run_id: str) -> Staged | None:
    """Copy the release staged in ``twin`` to ``stage`` as this run's (its record with this
    ``run_id`` and ``reused_from`` the twin's); return the new record, or None (``stage``
    left absent) when the twin went away meanwhile (its publish moved it) or the copy is
    not exactly the files its record lists with their checksums."""
    try:
        record = read_staged(twin)
        if record is None:
            raise ValueError("the twin staged nothing")
        shutil.copytree(twin / "release", stage / "release")
        if checksums(stage / "release") != record.files:
            raise ValueError("the copied files are not the staged ones")
    except (OSError, ValueError, KeyError, TypeError, PublishRefused):
        shutil.rmtree(stage, ignore_errors=True)
        return None
    copied = replace(record, run_id=run_id, reused_from=record.run_id)
    write_staged(stage, copied)
    return copied


# The manifest's ``inputs`` key for :func:`inputs_sha256`.
INPUTS_KEY = "report_days_sha256"
def inputs_sha256(days: list[date], day_digests: Mapping[date, str],
                  extra: Mapping[str, str] | None = None) -> str:
    """sha256 over what a release of ``days`` is built from: each day's per-day report
    file by the sha256 the ledger recorded for it (``day_digests``:
    :func:`dp_ops.steps.day_files.recorded_days`), then each of ``extra`` (name: the
    sha256 the ledger recorded, e.g. the frozen baseline's). Raises KeyError for a day
    without a record."""
    h = hashlib.sha256()
    for day in days:
        h.update(f"{day.isoformat()} {day_digests[day]}\n".encode())
    for name, digest in sorted((extra or {}).items()):
        h.update(f"{name} {digest}\n".encode())
    return h.hexdigest()


def _latest_target(root: DataRoot, report: str) -> tuple[Path, str] | None:
    """The release directory ``latest`` points to and the remedy to name when it does not
    verify; None before the first release. ``latest`` must be a symlink to a directory
    directly under ``releases/``."""
    latest = root.latest_release(report)
    remedy = ("repoint it to the newest release that verifies (ln -sfn releases/<id> "
              f"{latest}) or remove it, then rerun publish (OPERATIONS.md, 'latest does not "
              "verify')")
    if not latest.is_symlink():
        if latest.exists():
            raise PublishRefused(f"{latest} is not a symlink to a release; {remedy}")
        return None
    releases = (root.published_dir(report) / "releases").resolve()
    target = latest.resolve()
    if target.parent != releases or not target.is_dir():
        raise PublishRefused(f"{latest} points outside {releases}: {remedy}")
    return target, remedy


def _read_manifest(target: Path, remedy: str, ledger: Ledger | None,
                   report: str) -> dict[str, Any]:
    """The manifest of release directory ``target``, parsed from the bytes that, with
    ``ledger``, match the sha256 it recorded at publish."""
    from dp_ops.steps.ledger_binding import RELEASE_RECORD

    manifest_path = target / "manifest.json"
    try:
        data = manifest_path.read_bytes()
        if ledger is not None and hashlib.sha256(data).hexdigest() != ledger.derived_sha256(
                report, RELEASE_RECORD.format(release_id=target.name)):
            raise PublishRefused(f"{manifest_path} is not the manifest the ledger recorded "
                                 f"when release {target.name} was published: {remedy}")
        manifest = dict(json.loads(data))
    except (OSError, ValueError, TypeError) as exc:
        raise PublishRefused(f"{manifest_path} cannot be read ({exc}): {remedy}") from exc
    if manifest.get("release_id") != target.name:
        raise PublishRefused(f"{manifest_path} names release "
                             f"{str(manifest.get('release_id'))[:40]!r}, not {target.name}: "
                             f"{remedy}")
    if not manifest.get("files"):
        raise PublishRefused(f"{manifest_path} lists no files: {remedy}")
    return manifest


def current_release(root: DataRoot, report: str,
                    ledger: Ledger | None = None) -> dict[str, Any] | None:
    """The manifest of the release ``latest`` points to, verified; ``None`` before the
    first release.

    ``latest`` must be a symlink to a directory directly under ``releases/`` whose
    manifest names that directory (and, with ``ledger``, is the manifest the ledger
    recorded at publish, parsed from the bytes checked) and whose files all match the
    manifest's checksums. Anything else (a fake or edited release, a link out of
    ``releases/``) raises :class:`PublishRefused` naming what is wrong: publishing decides
    what to do from this manifest (a newer release already out is kept), so a forged one
    must not silently turn every later publish into a no-op."""
    found = _latest_target(root, report)
    if found is None:
        return None
    target, remedy = found
    manifest = _read_manifest(target, remedy, ledger, report)
    for name, meta in dict(manifest["files"]).items():
        path = target / name
        if not path.is_file() or sha256_file(path) != meta.get("sha256"):
            raise PublishRefused(f"{path} does not match the release's manifest: {remedy}")
    return manifest


def latest_release_file(root: DataRoot, report: str, ledger: Ledger,
                        name: str) -> tuple[bytes, str] | None:
    """The bytes and sha256 of file ``name`` of the release ``latest`` points to, read once
    and checked against that release's manifest, itself checked against the ledger's
    record; None before the first release or when the release has no such file."""
    found = _latest_target(root, report)
    if found is None:
        return None
    target, remedy = found
    want = dict(_read_manifest(target, remedy, ledger, report)["files"]).get(name)
    if not isinstance(want, dict):
        return None
    data = (target / name).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != want.get("sha256"):
        raise PublishRefused(f"{target / name} does not match the release's manifest: "
                             f"{remedy}")
    return data, digest


def content_release_id(last: date, *parts: Any) -> str:
    """``<last date>-<12 hex>`` named by what the release holds: its files' checksums and
    whatever else its manifest states (epsilon accounting, method updates). A rerun that
    reproduces them is the same release; a re-noise that changes only the accounting (say,
    of a region whose cells are all suppressed) is a new one, with its own manifest."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode())
    return f"{last.isoformat()}-{digest.hexdigest()[:12]}"


def point_latest(root: DataRoot, report: str, release: Path, scratch: Path) -> None:
    link_tmp = scratch / "latest.symlink"
    if link_tmp.is_symlink() or link_tmp.exists():
        link_tmp.unlink()
    os.symlink(os.path.relpath(release, root.published_dir(report)), link_tmp)
    os.replace(link_tmp, root.latest_release(report))


def promote(root: DataRoot, report: str, files_dir: Path, release_id: str,
            manifest: dict[str, Any], scratch: Path, ledger: Ledger,
            signer: ReleaseSigner | None) -> Path:
    """Move ``files_dir`` (with ``manifest.json`` and, with ``signer``, its signature
    ``manifest.json.sig`` added) to the release directory and repoint ``latest``. The
    manifest's sha256 is recorded in the ledger before the directory appears, so a
    release that is not the recorded one is refused by every later run
    (:func:`dp_ops.steps.ledger_binding.release_problems`); the signature is of those very
    bytes. Call with :func:`publish_lock` held."""
    from dp_ops.steps.ledger_binding import record_release

    target = root.published_dir(report) / "releases" / release_id
    if not target.exists():
        data = json_bytes(manifest)  # recorded and signed as written, not re-read
        record_release(ledger, report, release_id, hashlib.sha256(data).hexdigest())
        if signer is not None:
            write_bytes_atomic(files_dir / SIGNATURE_FILE, signer.sign(data))
        write_bytes_atomic(files_dir / "manifest.json", data)
        target.parent.mkdir(parents=True, exist_ok=True)
        fault_point("publish.before_rename")
        os.rename(files_dir, target)
        fault_point("publish.after_rename")
    point_latest(root, report, target, scratch)
    return target


def release_event(root: DataRoot, before: dict[str, Any] | None, release_id: str,
                  target: Path) -> dict[str, str | float | int] | None:
    """The asset event of a publish that moved ``latest`` (``before``: the release it
    pointed at), or None when ``latest`` already named this release (a byte-identical
    rerun): public values only. It names the data root it was published from, so that
    later runs there can check the ledger still holds what was announced
    (:func:`dp_ops.steps.ledger_binding.announcement_problems`)."""
    if before is not None and before.get("release_id") == release_id:
        return None
    manifest_path = target / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    return {"release_id": release_id, "last_date": str(manifest["last_date"]),
            "manifest_sha256": sha256_file(manifest_path),
            "epsilon_per_user_day_max": float(manifest["epsilon"]["per_user_day_max"]),
            "report": str(manifest["report"]), "data_root": str(root.root.resolve())}


def epsilon_summary(totals: dict[date, float], *, normal_run: float, cap: float,
                    composition: str) -> dict[str, Any]:
    """What a manifest says of the privacy spent behind a release: ``totals`` maps each
    date whose noise feeds the release to its composed epsilon per user-day."""
    worst = max(totals.values(), default=0.0)
    return {
        "privacy_unit": "user-day",
        "delta": 0,
        "composition": composition,
        "per_user_day_max": round(worst, 6),
        "per_user_day_normal_run": round(normal_run, 6),
        "cap": round(cap, 6),
        "dates_accounted": len(totals),
        "dates_over_normal_run": sorted(d.isoformat() for d, e in totals.items()
                                        if e > normal_run + 1e-9),
        "sum_over_dates": round(math.fsum(totals.values()), 6),
    }
