"""The release flow, written once for every report (docs/pipeline.md, Gate and publish).

A report supplies its parts (:class:`ReleaseParts`): what a release is built from, how
its files are assembled, validated and written, what its manifest says beyond the common
fields, and any state the release fixes for good. This module does the rest, the same
way for every report:

- :func:`stage_and_validate` (the gate task) empties this run's staging area, builds the
  candidate from the report days recorded in the ledger (or copies what a twin gate
  staged from the same inputs), checks the shipped column schema and seals the
  :class:`~dp_ops.steps.release.Staged` record.
- :func:`publish_staged` (the publish task) works under the report's publish lock: it
  refuses an unsound ledger, keeps a newer release that already holds this run's values,
  rebuilds when overtaken or when the report's state moved since staging, checks the
  staged files and the epsilon cap, writes the page and the :class:`Manifest`, lets the
  report commit its state, and promotes the release with ``latest`` repointed atomically.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import dp_ops
from dp_ops.errors import PublishRefused
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.privacy.plan import MetricBudget
from dp_ops.release_signing import SIGNATURE_FILE, UNSIGNED_FIELDS, ReleaseSigner, load_signer
from dp_ops.steps.data_statement import STATEMENT_FILE, StatementParts, render_statement
from dp_ops.steps.day_files import recorded_days, release_days
from dp_ops.steps.ledger_binding import closing_ledger, ledger_anchor, open_ledger, require_sound
from dp_ops.steps.page import INDEX_FILE, PublishedSection, write_release_index
from dp_ops.steps.release import (
    INPUTS_KEY,
    checksums,
    content_release_id,
    current_release,
    promote,
    publish_lock,
    read_staged,
    release_event,
    sha256_file,
    stage_once,
    staging_dir,
    verify_checksums,
    write_empty_staged,
    write_staged,
)
from dp_ops.steps.release_contract import SCHEMA_VERSION, require_contract, require_manifest
from dp_ops.steps.release_values import GateOutcome, Manifest, Staged
from dp_ops.steps.result import StepResult

if TYPE_CHECKING:  # GX takes seconds to import: only a gate that validates does
    from dp_ops.gx.carried import Tables

__all__ = ["Built", "GateOutcome", "GateRows", "Manifest", "ReleaseConfig", "ReleaseParts",
           "ReleasePlan", "Staged", "carried_gate_rows", "holds_current_inputs",
           "publish_staged", "record_gate_rows", "stage_and_validate"]



class ReleaseConfig(Protocol):
    """What the flow reads of a report's configuration."""

    @property
    def first_public_date(self) -> date: ...

    @property
    def cap(self) -> float: ...

    @property
    def method_version(self) -> str: ...

    @property
    def metric_budgets(self) -> tuple[MetricBudget, ...]: ...

    @property
    def levels(self) -> tuple[int, ...]: ...

    @property
    def min_area_km2(self) -> float: ...


C = TypeVar("C", bound=ReleaseConfig)
C_contra = TypeVar("C_contra", bound=ReleaseConfig, contravariant=True)

@dataclass(frozen=True)
class Built:
    """What a report's build hands back once its files are written and its gate passed.

    ``inputs_sha256`` and ``build_key`` are those of what the build actually read (a
    report that reads its day files again may read newer ones than its plan named).
    ``gate_rows`` is what the gate validated row by row, under which rules (None:
    nothing to record); the flow records it once the release passed the contract and its
    files' checksums are taken (:func:`record_gate_rows`)."""

    rows: dict[str, int]
    suppression: dict[str, Any]
    gate: GateOutcome
    charts: list[dict[str, Any]]
    uncharted_levels: list[int]
    inputs_sha256: str
    build_key: str
    extras: dict[str, Any] = field(default_factory=dict)
    gate_rows: GateRows | None = None


@dataclass(frozen=True)
class GateRows:
    """The row digests a gate validated (:func:`dp_ops.gx.carried.table_digests`) and the
    digest of the rules it validated them under."""

    rules: str
    tables: Tables


@dataclass(frozen=True)
class ReleasePlan:
    """What a report will stage: ``key`` names it by everything it is built from
    (:func:`~dp_ops.steps.release.build_key`); ``build(target)`` assembles, validates and
    writes the files into ``target`` (raising ``GateFailed`` when the gate fails)."""

    key: str
    label: str
    build: Callable[[Path], Built]


class ReleaseParts(Protocol[C_contra]):
    """The parts of a release only its report knows."""

    @property
    def report(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def page_section(self) -> PublishedSection:
        """The report's section of the release page."""

    @property
    def column_contract(self) -> Mapping[str, Any] | None:
        """The column schema of the release's data files; None: the one ``dp_ops`` ships
        for the report (``schemas/<report>.columns.json``)."""

    def plan(self, root: DataRoot, cfg: C_contra, ledger: Ledger, days: list[date],
             digests: dict[date, str], *, run_id: str, region: str | None) -> ReleasePlan:
        """The release of ``days`` (their per-day files by ``digests``); with ``region``
        (an on-call rerun) the report may decide only that region afresh."""

    def inputs_sha256(self, ledger: Ledger, days: list[date],
                      digests: Mapping[date, str]) -> str:
        """sha256 of what a release of ``days`` is built from, as the ledger records it
        (the per-day files and the report's derived state): the manifest's
        ``report_days_sha256``."""

    def state_moved(self, ledger: Ledger, staged: Staged) -> bool:
        """Whether state the release reads changed since it was staged (then it is built
        again under the publish lock before it is published)."""

    def epsilon(self, ledger: Ledger, cfg: C_contra, first: date, last: date
                ) -> dict[str, Any]:
        """The manifest's ``epsilon``: what was spent on the dates behind the release
        (:func:`~dp_ops.steps.release.epsilon_summary`)."""

    def check_inputs(self, root: DataRoot, ledger: Ledger, cfg: C_contra) -> None:
        """Raise when something the release rests on is missing or not the recorded one."""

    def manifest_inputs(self, root: DataRoot, ledger: Ledger, cfg: C_contra
                        ) -> dict[str, Any]:
        """The report's entries of the manifest's ``inputs`` (beside the region table's)."""

    def manifest_extras(self, root: DataRoot, ledger: Ledger, cfg: C_contra,
                        last: date) -> dict[str, Any]:
        """The report's own top-level manifest sections."""

    def release_id_parts(self, extras: Mapping[str, Any]) -> tuple[Any, ...]:
        """What of ``extras``, besides the files and the accounting, names the release."""

    def commit(self, root: DataRoot, ledger: Ledger, staged: Staged) -> None:
        """Record the state this release fixes for good, just before it is promoted."""

    def statement(self, cfg: C_contra, manifest: Mapping[str, Any]) -> StatementParts:
        """The report's paragraphs of the release's data statement
        (:mod:`dp_ops.steps.data_statement`), from its public config and ``manifest``."""
        ...

    def rows_text(self, rows: Mapping[str, int]) -> str:
        """The release's row counts in words, for the publish summary."""


def stage_and_validate(parts: ReleaseParts[C], root: DataRoot, cfg: C, *, run_id: str,
                       ledger_url: str, region: str | None = None) -> StepResult:
    """Build, validate and stage the release of the report days recorded from the
    first public date (the unbroken run of them) in this run's staging area. A gate
    that would build what another run staged already (the same build key) copies that
    run's staged files and gate result instead."""
    report = parts.report
    stage = staging_dir(root, report, run_id)
    if stage.exists():
        shutil.rmtree(stage)  # a retry rebuilds the staging area from scratch
    with closing_ledger(open_ledger(root, ledger_url)) as ledger:
        days, digests = release_days(ledger, report, cfg.first_public_date)
        if not days:
            write_empty_staged(stage, run_id)
            return StepResult(f"nothing to release yet: no {report} days from "
                              f"{cfg.first_public_date}", (str(stage),))
        plan = parts.plan(root, cfg, ledger, days, digests, run_id=run_id, region=region)
        return stage_once(root, report, plan.key, run_id=run_id, stage=stage,
                          label=plan.label,
                          build=lambda: _build(parts, plan, stage, days, run_id=run_id,
                                               region=region, root=root, ledger=ledger))


def _build(parts: ReleaseParts[C], plan: ReleasePlan, stage: Path, days: list[date], *,
           run_id: str, region: str | None, root: DataRoot, ledger: Ledger) -> StepResult:
    target = stage / "release"
    built = plan.build(target)
    require_contract(parts.report, target, parts.column_contract)  # GateFailed
    files = checksums(target)
    if built.gate_rows is not None:
        record_gate_rows(root, ledger, parts.report, built.gate_rows, files)
    write_staged(stage, Staged(
        run_id=run_id, region=region, first_date=days[0], last_date=days[-1],
        files=files, rows=built.rows, suppression=built.suppression,
        inputs_sha256=built.inputs_sha256, build_key=built.build_key, gate=built.gate,
        charts=built.charts, uncharted_levels=built.uncharted_levels, extras=built.extras))
    return StepResult(f"{plan.label} passed the gate ({built.gate.evaluated} expectations); "
                      f"staged in {stage}; Data Docs: {built.gate.data_docs}", (str(stage),))


# -- what a gate carries over from the release now published -------------------------------
def carried_gate_rows(root: DataRoot, ledger: Ledger, report: str, rules: str, *,
                      method_version: str, first_date: date) -> Tables | None:
    """The row digests the gate of the release ``latest`` points to recorded under
    ``rules`` (:func:`dp_ops.gx.carried.recorded_rows`), when that release is one this gate
    can build on: its manifest is the one the ledger recorded and every file of it has the
    sha256 the manifest lists (:func:`current_release`), it passed its gate, and it was
    made by this software version and method from the same first date. None otherwise
    (first release, a release that does not verify, another method or version): then the
    gate validates every row."""
    import logging

    from dp_ops.gx.carried import recorded_rows

    try:
        found = current_release(root, report, ledger)
    except PublishRefused as exc:
        # publish refuses it too; the gate validates everything rather than build on it
        logging.getLogger(__name__).warning("%s: the published release does not verify "
                                            "(%s); every row is validated", report, exc)
        return None
    if found is None:
        return None
    try:
        previous = Manifest.from_dict(found)
    except (KeyError, TypeError, ValueError):
        return None
    if (not previous.gate.success or previous.method_version != method_version
            or previous.software_version != dp_ops.__version__
            or previous.first_date != first_date):
        return None
    return recorded_rows(root.gx_dir, report, rules, previous.files, key=ledger.key())


def record_gate_rows(root: DataRoot, ledger: Ledger, report: str, gate_rows: GateRows,
                     files: Mapping[str, Mapping[str, Any]]) -> None:
    """Record the digests of the rows a gate validated (``gate_rows``) for the release whose
    files are ``files`` (:func:`~dp_ops.steps.release.checksums` of its directory)
    (:func:`dp_ops.gx.carried.record_rows`); call after its gate passed and its files are
    written."""
    from dp_ops.gx.carried import record_rows

    record_rows(root.gx_dir, report, gate_rows.rules,
                {name: str(meta["sha256"]) for name, meta in files.items()},
                gate_rows.tables, key=ledger.key())


def publish_staged(parts: ReleaseParts[C], root: DataRoot, cfg: C, *, run_id: str,
                   ledger_url: str) -> StepResult:
    """Publish what this run's gate staged (see the module docstring)."""
    report = parts.report
    stage = staging_dir(root, report, run_id)
    staged = read_staged(stage, run_id)
    if staged is None:
        return StepResult(f"nothing to publish yet (no {report} days)")
    signer = load_signer(root.root)  # no key, no opt-out: refused before anything moves
    with publish_lock(root, report), closing_ledger(open_ledger(root, ledger_url)) as ledger:
        require_sound(root, ledger)
        found = current_release(root, report, ledger)
        current = Manifest.from_dict(found) if found is not None else None
        if current is not None and staged.region is None:
            kept = _kept(parts, cfg, ledger, staged, current, root)
            if kept is not None:
                shutil.rmtree(stage, ignore_errors=True)
                return StepResult(kept)
        overtaken = current is not None and current.last_date > staged.last_date
        if overtaken or parts.state_moved(ledger, staged):
            # a release covering later days was published since this run staged, or state
            # the release reads moved: rebuild from the current state, so that this run's
            # values are published (a run never ends "done" having spent and skipped it)
            stage_and_validate(parts, root, cfg, run_id=run_id, ledger_url=ledger_url,
                               region=staged.region)
            rebuilt = read_staged(stage, run_id)
            if rebuilt is None or parts.state_moved(ledger, rebuilt):
                raise PublishRefused(f"the {report} release could not be rebuilt from a "
                                     "steady state under the publish lock; not published")
            staged = rebuilt
        manifest = _manifest(parts, root, cfg, ledger, staged, signer)
        parts.commit(root, ledger, staged)
        target = promote(root, report, stage / "release", manifest.release_id,
                         manifest.as_dict(), stage, ledger, signer)
        event = release_event(root, found, manifest.release_id, target)
    shutil.rmtree(stage, ignore_errors=True)
    return StepResult(f"published {report} release {manifest.release_id} "
                      f"({staged.first_date}..{staged.last_date}; "
                      f"{parts.rows_text(staged.rows)}; epsilon per user-day max "
                      f"{manifest.epsilon['per_user_day_max']}) at "
                      f"{root.latest_release(report)}; report page {target / INDEX_FILE}",
                      (str(target),), event=event)


def _kept(parts: ReleaseParts[C], cfg: C, ledger: Ledger, staged: Staged, current: Manifest,
          root: DataRoot) -> str | None:
    """Why the published ``current`` release stands for this run's staged one (then there
    is nothing to publish), or None."""
    report = parts.report
    if (current.first_date, current.last_date) == (staged.first_date, staged.last_date):
        epsilon = parts.epsilon(ledger, cfg, staged.first_date, staged.last_date)
        extras = parts.manifest_extras(root, ledger, cfg, staged.last_date)
        if _release_id(parts, staged, extras, epsilon) == current.release_id:
            # another run (a gate beside this one built the same files) published
            # exactly this release: nothing to do
            return (f"{report} release {current.release_id} ({staged.first_date}.."
                    f"{staged.last_date}) is out already: run {current.run_id} published "
                    "these staged files with the same accounting; latest stays")
    if current.last_date > staged.last_date and holds_current_inputs(
            current, lambda days: parts.inputs_sha256(ledger, days,
                                                      recorded_days(ledger, report))):
        # a release of later days, built from the inputs as they are now, is out: it
        # holds this run's values, and a rebuild would give the same files
        return (f"{report} release {current.release_id} ({current.first_date}.."
                f"{current.last_date}), published since this run staged, holds this run's "
                f"days {staged.first_date}..{staged.last_date} from the same inputs: "
                "latest stays, nothing to rebuild")
    return None


def holds_current_inputs(current: Manifest, now: Callable[[list[date]], str]) -> bool:
    """Whether the published release ``current`` was built from exactly the inputs its
    days have now (``now(days)``: :meth:`ReleaseParts.inputs_sha256` of them): then a run
    overtaken by it has its values published already, and rebuilding would give the same
    files. False when the manifest has no such record or a day has none."""
    recorded = current.inputs.get(INPUTS_KEY)
    if not recorded:
        return False
    span = (current.last_date - current.first_date).days + 1
    days = [current.first_date + timedelta(days=i) for i in range(span)]
    try:
        return bool(now(days) == recorded)
    except (OSError, KeyError):
        return False


def _release_id(parts: ReleaseParts[C], staged: Staged, extras: Mapping[str, Any],
                epsilon: Mapping[str, Any]) -> str:
    # the same files under another accounting (or other report state) are another release
    return content_release_id(staged.last_date, staged.files,
                              *parts.release_id_parts(extras), epsilon)


def _manifest(parts: ReleaseParts[C], root: DataRoot, cfg: C, ledger: Ledger,
              staged: Staged, signer: ReleaseSigner | None) -> Manifest:
    """The checked manifest of the staged release, with its page written and listed; its
    ``signature`` names ``signer``'s key (or says the release is unsigned)."""
    report = parts.report
    if not staged.gate.success:
        raise PublishRefused(f"the staged {report} release of run {staged.run_id} did not "
                             "pass the gate")
    files_dir = staging_dir(root, report, staged.run_id) / "release"
    # the page, the data statement, the manifest and its signature are publish's own
    verify_checksums(files_dir, staged.files, rewritten=(INDEX_FILE, STATEMENT_FILE,
                                                         "manifest.json", SIGNATURE_FILE))
    first, last = staged.first_date, staged.last_date
    epsilon = parts.epsilon(ledger, cfg, first, last)
    if epsilon["per_user_day_max"] > cfg.cap + 1e-9:
        raise PublishRefused(f"{report} release {first}..{last} rests on a composed epsilon "
                             f"per user-day of {epsilon['per_user_day_max']}, over the cap "
                             f"{cfg.cap:.4f}; not published")
    parts.check_inputs(root, ledger, cfg)
    extras = parts.manifest_extras(root, ledger, cfg, last)
    release_id = _release_id(parts, staged, extras, epsilon)
    manifest = Manifest(
        report=report, release_id=release_id, run_id=staged.run_id,
        software_version=dp_ops.__version__,
        method_version=cfg.method_version,
        first_date=first, last_date=last,
        inputs={"region_table_sha256": sha256_file(root.regions_csv),
                **parts.manifest_inputs(root, ledger, cfg),
                INPUTS_KEY: staged.inputs_sha256},
        rows=staged.rows, suppression=staged.suppression, epsilon=epsilon,
        ledger=ledger_anchor(ledger), files=staged.files, gate=staged.gate,
        extras=extras, schema_version=SCHEMA_VERSION,
        signature=UNSIGNED_FIELDS if signer is None else signer.manifest_fields())
    # the data statement and the page show the manifest's figures and the noise the
    # ledger recorded for the release's dates (not this process's epsilons); both files
    # are listed in the manifest
    statement = render_statement(manifest.as_dict(), ledger.spends_with_terms(report),
                                 cfg.metric_budgets, cfg.levels, cfg.min_area_km2, parts.title,
                                 parts.statement(cfg, manifest.as_dict()))
    manifest = replace(manifest, files=write_release_index(
        files_dir, manifest.as_dict(), staged.charts, title=parts.title,
        published=parts.page_section, data_docs=staged.gate.data_docs,
        release_dir=root.published_dir(report) / "releases" / release_id,
        data_root=root.root, uncharted_levels=staged.uncharted_levels,
        statement=statement))
    require_manifest(manifest.as_dict())  # the shipped manifest schema
    return manifest
