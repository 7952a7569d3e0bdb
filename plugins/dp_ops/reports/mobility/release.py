"""Assemble, gate and publish a mobility release (docs/design.md, Release gates and Outputs).

``stage_and_validate`` builds the candidate release from the per-day report files (the
contiguous run of days from the first public date), validates it with Great Expectations
and writes it, with a chart per region (:mod:`dp_ops.reports.mobility.charts`), to
``staging/mobility/<run>/``. ``publish_staged`` checks the privacy accounting, adds the
release page (:mod:`dp_ops.steps.page`, with the section of
:mod:`dp_ops.reports.mobility.page`), then moves the staged directory to
``published/mobility/releases/<id>/`` with one rename and repoints the ``latest`` symlink
with another, so readers see either the old release or the new one, never a mix. A
failed gate leaves ``latest`` where it was.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

import dp_ops
from dp_ops.errors import BaselineMissing, PublishRefused
from dp_ops.faults import fault_point
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.reports.mobility.baseline import BASELINE_NAME
from dp_ops.reports.mobility.charts import write_mobility_charts
from dp_ops.reports.mobility.config import REPORT, MobilityConfig
from dp_ops.reports.mobility.estimates import CATEGORIES
from dp_ops.reports.mobility.page import published_mobility
from dp_ops.reports.mobility.report import CHANGE_COLUMNS, PUBLISHED_COLUMNS
from dp_ops.reports.mobility.spec import SPEC
from dp_ops.steps import release
from dp_ops.steps.charts import charted_regions
from dp_ops.steps.day_files import read_release_days, recorded_days, release_days
from dp_ops.steps.derived import verify_recorded
from dp_ops.steps.ledger_binding import (
    closing_ledger,
    ledger_anchor,
    open_ledger,
    require_sound,
)
from dp_ops.steps.page import INDEX_FILE, write_release_index
from dp_ops.steps.release import (
    INPUTS_KEY,
    checksums,
    content_release_id,
    current_release,
    epsilon_summary,
    holds_current_inputs,
    inputs_sha256,
    promote,
    publish_lock,
    read_staged,
    release_event,
    sha256_file,
    verify_checksums,
    write_csv,
    write_staged,
)
from dp_ops.steps.release_contract import (
    SCHEMA_VERSION,
    arrow_table,
    require_contract,
    require_manifest,
)
from dp_ops.steps.result import StepResult

__all__ = ["PublishRefused", "assemble", "epsilon_accounting", "publish_staged",
           "stage_and_validate", "staging_dir", "write_release_files"]

GLOBAL_CSV = "Global_Mobility_Report.csv"
GLOBAL_PARQUET = "Global_Mobility_Report.parquet"
REGION_DIR = "Region_Mobility_Report_CSVs"
SORT_KEYS = ["country_region_code", "sub_region_1", "sub_region_2", "metro_area", "date"]


def staging_dir(root: DataRoot, run_id: str) -> Path:
    return release.staging_dir(root, REPORT, run_id)


def assemble(tables: list[pa.Table]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(internal domain table, published table) of the days' verified rows."""
    # one Arrow table and one conversion (a pandas concat of a year of small frames is
    # several times slower)
    internal = pa.concat_tables(tables, promote_options="permissive").to_pandas()
    published = internal.loc[internal["publish_row"], list(PUBLISHED_COLUMNS)]
    published = published.sort_values(SORT_KEYS, kind="stable").reset_index(drop=True)
    for col in CHANGE_COLUMNS:
        published[col] = published[col].astype("Int64")
    return internal, published


def write_release_files(published: pd.DataFrame, target: Path) -> dict[str, dict[str, Any]]:
    """Global CSV and Parquet, and per-year, per-country CSVs; returns their checksums."""
    target.mkdir(parents=True, exist_ok=True)
    write_csv(published, target / GLOBAL_CSV)
    fault_point("release.mid_write")
    pq.write_table(arrow_table(published, REPORT, GLOBAL_PARQUET), target / GLOBAL_PARQUET)
    years = published["date"].str.slice(0, 4)
    for (year, code), part in published.groupby([years, "country_region_code"], sort=True):
        write_csv(part, target / REGION_DIR / f"{year}_{code}_Region_Mobility_Report.csv")
    return checksums(target)


def suppression_summary(internal: pd.DataFrame) -> dict[str, Any]:
    """Row reasons, and per level and category the share of eligible region-days whose
    change is published (computed from noisy values only)."""
    reasons = internal["row_reason"].value_counts().sort_index()
    eligible = internal[~internal["row_reason"].isin(["area_under_minimum",
                                                       "contributors_under_minimum"])]
    shares: dict[str, dict[str, float]] = {}
    for level, part in eligible.groupby("level"):
        shares[str(int(level))] = {
            cat: round(float(part[f"{cat}_percent_change_from_baseline"].notna().mean()), 4)
            for cat in CATEGORIES}
    return {"row_reasons": {str(k): int(v) for k, v in reasons.items()},
            "published_share_of_eligible_by_level": shares}


def mobility_inputs_sha256(ledger: Ledger, days: list[date],
                           day_digests: Mapping[date, str]) -> str:
    """What a release of ``days`` is built from: the per-day files, the frozen baseline
    and the method-update factors, each by the sha256 the ledger recorded for it (no file
    is read: each is verified where it is used; :func:`dp_ops.steps.release.inputs_sha256`)."""
    extra = {BASELINE_NAME: ledger.derived_sha256(REPORT, BASELINE_NAME) or "",
             **ledger.derived_current(REPORT, "method_update/")}
    return inputs_sha256(days, day_digests, extra)


def stage_and_validate(root: DataRoot, cfg: MobilityConfig, *, run_id: str,
                       ledger_url: str) -> StepResult:
    """Assemble, validate and stage the release of the recorded report days. A gate that
    would build what another run staged already (same days, per-day files, baseline,
    method updates, region table and config: :func:`mobility_build_key`) copies that
    run's staged files and gate result instead (:func:`dp_ops.steps.release.one_build`)."""
    stage = staging_dir(root, run_id)
    if stage.exists():
        shutil.rmtree(stage)  # a retry rebuilds the staging area from scratch
    with closing_ledger(open_ledger(root, ledger_url)) as ledger:
        days, digests = release_days(ledger, REPORT, cfg.first_public_date)
        if not days:
            stage.mkdir(parents=True)
            write_staged(stage, {"empty": True, "run_id": run_id})
            return StepResult("nothing to release yet: no report days from "
                              f"{cfg.first_public_date}", (str(stage),))
        key = mobility_build_key(root, cfg, days, mobility_inputs_sha256(ledger, days, digests))
        return release.stage_once(
            root, REPORT, key, run_id=run_id, stage=stage,
            label=f"release candidate {days[0]}..{days[-1]}",
            build=lambda: _build(root, cfg, stage, ledger, run_id=run_id))


def mobility_build_key(root: DataRoot, cfg: MobilityConfig, days: list[date],
                       inputs: str) -> str:
    """What a staged mobility release is built from (:func:`release.build_key`): the days
    and ``inputs`` (:func:`mobility_inputs_sha256`), the region table, the config and the
    charted levels."""
    from dp_ops.settings import load_execution_settings

    return release.build_key(
        REPORT, days=[days[0].isoformat(), days[-1].isoformat()], inputs=inputs,
        regions=sha256_file(root.regions_csv), config=asdict(cfg),
        chart_levels=load_execution_settings().chart_levels)


def _build(root: DataRoot, cfg: MobilityConfig, stage: Path, ledger: Ledger, *,
           run_id: str) -> StepResult:
    # imported only when there is something to validate: GX takes seconds to import
    from dp_ops.regions import read_regions
    from dp_ops.reports.mobility.suites import row_rules, validate_mobility_release
    from dp_ops.steps.gate import record_validated, require_pass, validated_files

    # the rows as the ledger recorded them (each file's bytes checked, then parsed)
    days, digests, tables = read_release_days(root, ledger, REPORT, cfg.first_public_date)
    internal, published = assemble(tables)
    inputs = mobility_inputs_sha256(ledger, days, digests)
    # the row-level rules are checked on the days whose files no gate validated before
    rules = row_rules(cfg)
    day_files = {d.isoformat(): digests[d] for d in days}
    known = validated_files(root.gx_dir, REPORT, rules)
    new_dates = {label for label, digest in day_files.items() if known.get(label) != digest}
    result = validate_mobility_release(internal, published, gx_dir=root.gx_dir, cfg=cfg,
                                       run_name=f"mobility-{run_id}", new_dates=new_dates)
    require_pass(result)  # raises GateFailed naming the failures and the Data Docs
    record_validated(root.gx_dir, REPORT, rules, day_files)
    release_files = stage / "release"
    # charts first: they are part of the staged files and their checksums
    charted, uncharted = charted_regions(read_regions(root.regions_csv), cfg.levels)
    charts = write_mobility_charts(published, charted, [d.isoformat() for d in days],
                                   release_files)
    files = write_release_files(published, release_files)
    require_contract(REPORT, release_files)  # the shipped column schema (GateFailed)
    write_staged(stage, {
        "empty": False,
        "run_id": run_id,
        "first_date": days[0].isoformat(),
        "last_date": days[-1].isoformat(),
        "files": files,
        "rows": {"published": len(published), "domain": len(internal)},
        "suppression": suppression_summary(internal),
        "inputs_sha256": inputs,
        # the key of what was read (the files may have changed since the key of the lock)
        "build_key": mobility_build_key(root, cfg, days, inputs),
        "gate": {"success": result.success, "evaluated": result.evaluated,
                 "data_docs": result.data_docs_index},
        "charts": [c.as_dict() for c in charts],
        "uncharted_levels": uncharted,
    })
    return StepResult(f"release candidate {days[0]}..{days[-1]} passed the gate "
                      f"({result.evaluated} expectations); staged in {stage}; Data Docs: "
                      f"{result.data_docs_index}", (str(stage),))


def epsilon_accounting(ledger: Ledger, cfg: MobilityConfig, first: date,
                       last: date) -> dict[str, Any]:
    """Composed epsilon per user-day over every date whose noise feeds the release (the
    baseline window and the released days)."""
    totals = {d: eps for (_, d), eps in ledger.totals(REPORT).items()
              if d <= last and (d >= first or cfg.baseline_start <= d <= cfg.baseline_end)}
    return epsilon_summary(totals, normal_run=cfg.run_epsilon, cap=cfg.cap,
                           composition="basic (sum over metrics and levels of each date)")


def method_updates_in_effect(root: DataRoot, ledger: Ledger,
                             last: date) -> list[dict[str, Any]]:
    """The method updates whose factors scale this release's later days (manifest)."""
    from dp_ops.reports.mobility.method_update import read_method_updates

    updates = read_method_updates(root, ledger)
    if updates is None:
        return []
    out = []
    for (version, effective), part in updates.groupby(["method_version", "effective_date"]):
        if date.fromisoformat(str(effective)[:10]) <= last:
            out.append({"method_version": str(version), "effective_date": str(effective)[:10],
                        "categories": sorted(map(str, part["category"].unique())),
                        "groups": int(len(part))})
    return out


def publish_staged(root: DataRoot, cfg: MobilityConfig, *, run_id: str,
                   ledger_url: str) -> StepResult:
    stage = staging_dir(root, run_id)
    staged = read_staged(stage, run_id)
    if staged["empty"]:
        return StepResult("nothing to publish yet (no report days)")
    with closing_ledger(open_ledger(root, ledger_url)) as ledger:
        require_sound(root, ledger)
        with publish_lock(root, REPORT):
            current = current_release(root, REPORT, ledger)
            if (current and current["last_date"] > staged["last_date"]
                    and holds_current_inputs(current, lambda days: mobility_inputs_sha256(
                        ledger, days, recorded_days(ledger, REPORT)))):
                # a release of later days, built from the per-day files, baseline and
                # method updates as they are now, is out: it holds this run's values, and a
                # rebuild would give the same files
                shutil.rmtree(stage, ignore_errors=True)
                return StepResult(
                    f"mobility release {current['release_id']} ({current['first_date']}.."
                    f"{current['last_date']}), published since this run staged, holds this "
                    f"run's days {staged['first_date']}..{staged['last_date']} from the same "
                    "inputs: latest stays, nothing to rebuild")
            if current and current["last_date"] > staged["last_date"]:
                # a release covering later days was published since this run staged:
                # rebuild from the current report days, so that this run's values are
                # published (a run never ends "done" having spent and skipped publishing)
                stage_and_validate(root, cfg, run_id=run_id, ledger_url=ledger_url)
                staged = read_staged(stage, run_id)
        if not staged["gate"]["success"]:
            raise PublishRefused(f"staged release {stage} did not pass the gate")
        files_dir = stage / "release"
        verify_checksums(files_dir, staged["files"])
        first = date.fromisoformat(staged["first_date"])
        last = date.fromisoformat(staged["last_date"])
        epsilon = epsilon_accounting(ledger, cfg, first, last)
        if epsilon["per_user_day_max"] > cfg.cap + 1e-9:
            raise PublishRefused(f"release {first}..{last} rests on a composed epsilon per "
                                 f"user-day of {epsilon['per_user_day_max']}, over the cap "
                                 f"{cfg.cap:.4f}; not published")
        # the baseline behind the release must be the recorded one (no need to parse it)
        if not verify_recorded(ledger, REPORT, BASELINE_NAME, root.baseline_file(REPORT)):
            raise BaselineMissing(f"the mobility baseline {root.baseline_file(REPORT)} does "
                                  "not exist yet; nothing to publish against")
        updates = method_updates_in_effect(root, ledger, last)
        anchor = ledger_anchor(ledger)
        # the same files under another method-update or accounting state are another release
        release_id = content_release_id(last, staged["files"], updates, epsilon)
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "report": REPORT,
            "release_id": release_id,
            "run_id": run_id,
            "software_version": dp_ops.__version__,
            "method_version": cfg.method_version,
            "first_date": staged["first_date"],
            "last_date": staged["last_date"],
            "inputs": {"region_table_sha256": sha256_file(root.regions_csv),
                       "baseline_sha256": ledger.derived_sha256(REPORT, BASELINE_NAME),
                       "baseline_window": [cfg.baseline_start.isoformat(),
                                           cfg.baseline_end.isoformat()],
                       **({INPUTS_KEY: staged["inputs_sha256"]}
                          if staged.get("inputs_sha256") else {})},
            "method_updates": updates,
            "rows": staged["rows"],
            "suppression": staged["suppression"],
            "epsilon": epsilon,
            "ledger": anchor,
            "files": staged["files"],
            "gate": staged["gate"],
        }
        # the page shows the manifest's figures; it is listed in the manifest itself
        manifest["files"] = write_release_index(
            files_dir, manifest, staged.get("charts", []), title=SPEC.title,
            published=published_mobility,
            data_docs=staged["gate"]["data_docs"],
            release_dir=root.published_dir(REPORT) / "releases" / release_id,
            data_root=root.root, uncharted_levels=staged.get("uncharted_levels", []))
        require_manifest(manifest)  # the shipped manifest schema
        with publish_lock(root, REPORT):
            current = current_release(root, REPORT, ledger)
            if current and current["last_date"] > staged["last_date"]:
                raise PublishRefused(
                    f"release {current['release_id']} covering {current['last_date']} was "
                    f"published while this run's release (to {last}) was prepared; not "
                    "published. A retry of this task rebuilds it from the current state")
            target = promote(root, REPORT, files_dir, release_id, manifest, stage, ledger)
            event = release_event(root, current, release_id, target)
    shutil.rmtree(stage, ignore_errors=True)
    return StepResult(f"published mobility release {release_id} ({first}..{last}, "
                      f"{staged['rows']['published']} rows, epsilon per user-day max "
                      f"{epsilon['per_user_day_max']}) at {root.latest_release(REPORT)}; "
                      f"report page {target / INDEX_FILE}", (str(target),), event=event)
