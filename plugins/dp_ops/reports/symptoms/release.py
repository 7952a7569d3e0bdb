"""Assemble, gate and publish a symptoms release (docs/design.md, Symptoms dataset, Release
gates and Outputs).

``stage_and_validate`` builds the candidate from the per-day rows (the unbroken run of
days from ``first_public_date``), validates it with Great Expectations and writes the
files and a chart per region (:mod:`dp_ops.reports.symptoms.charts`) to
``staging/symptoms/<run>/``. ``publish_staged`` checks the accounting, adds the release
page (:mod:`dp_ops.steps.page`, with the section of :mod:`dp_ops.reports.symptoms.page`),
stores the scaling factors this release fixes for the first time, and promotes the
staged directory to ``published/symptoms/releases/<id>`` with ``latest`` repointed
atomically.

Scaling factors are fixed at a (region, resolution)'s first release and reused. Two
runs staged at the same time could each propose a factor for the same new region; the
first to publish stores its own, and the other, finding the store changed under the
publish lock, assembles and validates again with the stored factor before it publishes,
so a published value is always c x ratio with the c that is stored.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

import dp_ops
from dp_ops.errors import PublishRefused
from dp_ops.faults import fault_point
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.reports.symptoms.assemble import (
    SCALING_COLUMNS,
    Candidate,
    build_candidate,
    complete_weeks,
)
from dp_ops.reports.symptoms.charts import write_symptom_charts
from dp_ops.reports.symptoms.config import REPORT, SymptomsConfig
from dp_ops.reports.symptoms.page import published_symptoms
from dp_ops.reports.symptoms.period import load_period
from dp_ops.reports.symptoms.spec import SPEC
from dp_ops.steps.charts import charted_regions
from dp_ops.steps.day_files import recorded_days, release_days
from dp_ops.steps.derived import read_recorded, store_recorded
from dp_ops.steps.ingest import read_symptoms
from dp_ops.steps.ledger_binding import (
    closing_ledger,
    ledger_anchor,
    open_ledger,
    require_sound,
)
from dp_ops.steps.page import INDEX_FILE, write_release_index
from dp_ops.steps.release import (
    INPUTS_KEY,
    build_key,
    checksums,
    content_release_id,
    current_release,
    epsilon_summary,
    holds_current_inputs,
    inputs_sha256,
    latest_release_file,
    promote,
    publish_lock,
    read_staged,
    release_event,
    sha256_file,
    stage_once,
    staging_dir,
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

RESOLUTIONS_FILE = "series_resolution.parquet"


SCALING_NAME = "scaling_factors"  # its name in the ledger's derived_state


def read_scaling(root: DataRoot, ledger: Ledger) -> tuple[pd.DataFrame, str | None]:
    """The stored scaling factors, verified against the ledger's record (the bytes read
    are the bytes checked), and the sha256 recorded for them (None: none yet)."""
    table = read_recorded(ledger, REPORT, SCALING_NAME, root.scaling_file(REPORT))
    if table is None:
        return pd.DataFrame({"region_id": pd.Series(dtype="str"),
                             "resolution": pd.Series(dtype="str"),
                             "c": pd.Series(dtype="float64"),
                             "first_release_last_date": pd.Series(dtype="str")}), None
    return (table.to_pandas()[list(SCALING_COLUMNS)],
            ledger.derived_sha256(REPORT, SCALING_NAME))


def frozen_resolutions(root: DataRoot, ledger: Ledger) -> tuple[pd.DataFrame | None,
                                                                 str | None]:
    """The series decisions of the current release (its ``series_resolution.parquet``,
    read as its manifest lists it, the manifest as the ledger recorded it) and their
    sha256; (None, None) before the first release."""
    found = latest_release_file(root, REPORT, ledger, RESOLUTIONS_FILE)
    if found is None:
        return None, None
    data, digest = found
    return pq.read_table(pa.BufferReader(data)).to_pandas(), digest




def file_names(candidate: Candidate, code: str) -> dict[str, pd.DataFrame]:
    """``<year>_<CC>_daily_symptoms_dataset.csv`` and the weekly one, per year."""
    out: dict[str, pd.DataFrame] = {}
    for kind, wide in (("daily", candidate.daily), ("weekly", candidate.weekly)):
        year_of = wide["date"].str[:4]
        years = sorted(year_of.unique()) or [str(candidate.last_date.year)]
        for year in years:
            in_year = (year_of == year).to_numpy(bool)
            # one year (the usual case): the table itself, not a copy of it
            out[f"{year}_{code}_{kind}_symptoms_dataset"] = (
                wide if in_year.all() else wide[in_year])
    return out


def write_release_files(candidate: Candidate, code: str, target: Path) -> dict[str, Any]:
    target.mkdir(parents=True, exist_ok=True)
    for name, frame in file_names(candidate, code).items():
        write_csv(frame, target / f"{name}.csv")
        fault_point("release.mid_write")
        kind = "daily" if name.endswith("_daily_symptoms_dataset") else "weekly"
        pq.write_table(arrow_table(frame, REPORT, f"*_{kind}_symptoms_dataset.parquet"),
                       target / f"{name}.parquet")
    resolutions = candidate.resolutions[["region_id", "symptom", "resolution"]]
    pq.write_table(arrow_table(resolutions, REPORT, RESOLUTIONS_FILE),
                   target / RESOLUTIONS_FILE)
    scaling = candidate.scaling[list(SCALING_COLUMNS)]
    pq.write_table(arrow_table(scaling, REPORT, "scaling_factors.parquet"),
                   target / "scaling_factors.parquet")
    return checksums(target)


def release_summary(candidate: Candidate) -> dict[str, Any]:
    """Series decisions and published shares (noisy values and decisions only)."""
    values = candidate.values
    by_res = {res: {**c, "published_share": round(c["published"] / c["values"], 4)
                    if c["values"] else 0.0} for res, c in candidate.counts.items()}
    counts = candidate.resolutions["resolution"].value_counts()
    daily_series = values[(values["resolution"] == "daily") & values["published"]]
    return {
        "series": {"daily": int(counts.get("daily", 0)), "weekly": int(counts.get("weekly", 0))},
        "series_with_published_daily_values": int(
            daily_series[["region_id", "symptom"]].drop_duplicates().shape[0]),
        "values": by_res,
        "regions_in_daily_file": int(candidate.daily["open_covid_region_code"].nunique()),
        "regions_in_weekly_file": int(candidate.weekly["open_covid_region_code"].nunique()),
        "new_scaling_factors": int(candidate.scaling["new"].sum()),
    }


def stage_and_validate(root: DataRoot, cfg: SymptomsConfig, *, run_id: str, ledger_url: str,
                       region: str | None = None) -> StepResult:
    """Build, validate and stage the candidate release. With ``region`` (an on-call
    rerun), only that region and its ancestors are decided afresh. A gate that would
    build what another run staged already (same days, inputs, scaling factors, frozen
    resolutions, reference files and config: :func:`build_key`) copies that run's staged
    files and gate result instead (:func:`dp_ops.steps.release.one_build`). Every input
    is read as the ledger recorded it: the per-day files, the scaling factors."""
    stage = staging_dir(root, REPORT, run_id)
    if stage.exists():
        shutil.rmtree(stage)  # a retry rebuilds the staging area from scratch
    with closing_ledger(open_ledger(root, ledger_url)) as ledger:
        days, digests = release_days(ledger, REPORT, cfg.first_public_date)
        if not days:
            write_staged(stage, {"empty": True, "run_id": run_id})
            return StepResult(f"nothing to release yet: no symptoms days from "
                              f"{cfg.first_public_date}", (str(stage),))
        scaling, used_scaling = read_scaling(root, ledger)
        frozen, frozen_sha = frozen_resolutions(root, ledger)
        inputs = inputs_sha256(days, digests)
        key = symptoms_build_key(root, cfg, days, inputs=inputs, scaling=used_scaling,
                                 frozen=frozen_sha, region=region)
        return stage_once(
            root, REPORT, key, run_id=run_id, stage=stage,
            label=f"symptoms release candidate {days[0]}..{days[-1]}",
            build=lambda: _build(root, cfg, stage, run_id=run_id, region=region, days=days,
                                 digests=digests, inputs=inputs, scaling=scaling,
                                 used_scaling=used_scaling, frozen=frozen, key=key))


def symptoms_build_key(root: DataRoot, cfg: SymptomsConfig, days: list[date], *,
                       inputs: str, scaling: str | None, frozen: str | None,
                       region: str | None) -> str:
    """What a staged symptoms release is built from (:func:`build_key`): the days and
    their per-day files, the stored scaling factors, the resolutions frozen by the latest
    release, the region table, the symptom list, the config, the charted levels and the
    on-call rerun's region."""
    from dp_ops.settings import load_execution_settings

    return build_key(
        REPORT, days=[days[0].isoformat(), days[-1].isoformat()], inputs=inputs,
        scaling=scaling, frozen=frozen,
        regions=sha256_file(root.regions_csv), symptoms=sha256_file(root.symptoms_txt),
        config=asdict(cfg), chart_levels=load_execution_settings().chart_levels,
        region=region)


def _build(root: DataRoot, cfg: SymptomsConfig, stage: Path, *, run_id: str,
           region: str | None, days: list[date], digests: dict[date, str], inputs: str,
           scaling: pd.DataFrame, used_scaling: str | None, frozen: pd.DataFrame | None,
           key: str) -> StepResult:
    from dp_ops.regions import read_regions
    from dp_ops.reports.symptoms.suites import validate_symptoms_release

    regions = read_regions(root.regions_csv)
    symptoms = read_symptoms(root.symptoms_txt)
    recompute = None
    if region is not None:
        from dp_ops.steps.noising import region_chain

        recompute = {rid for _, rid in region_chain(regions, region)}
    candidate = build_candidate(load_period(root, cfg, days, digests), regions, symptoms, cfg,
                                scaling, frozen, recompute)
    day_labels = [d.isoformat() for d in days]
    mondays = [d.isoformat() for d in complete_weeks(days[0], days[-1])]
    result = validate_symptoms_release(candidate, regions, symptoms, days=day_labels,
                                       mondays=mondays, gx_dir=root.gx_dir, cfg=cfg,
                                       run_name=f"symptoms-{run_id}")
    from dp_ops.steps.gate import require_pass

    require_pass(result)  # raises GateFailed naming the failures and the Data Docs
    codes = regions.loc[regions["level"] == 0, "country_region_code"].astype(str).tolist()
    # charts first: they are part of the staged files and their checksums
    charted, uncharted = charted_regions(regions, cfg.levels)
    charts = write_symptom_charts(candidate.daily, candidate.weekly, charted, day_labels,
                                  stage / "release")
    files = write_release_files(candidate, codes[0] if codes else "XX", stage / "release")
    require_contract(REPORT, stage / "release")  # the shipped column schema (GateFailed)
    new = candidate.scaling[candidate.scaling["new"]]
    write_staged(stage, {
        "empty": False,
        "run_id": run_id,
        "region": region,
        "first_date": days[0].isoformat(),
        "last_date": days[-1].isoformat(),
        "files": files,
        "rows": {"daily": len(candidate.daily), "weekly": len(candidate.weekly)},
        "summary": release_summary(candidate),
        "new_scaling": new[list(SCALING_COLUMNS)].to_dict(orient="records"),
        "scaling_sha256": used_scaling,
        "inputs_sha256": inputs,
        "build_key": key,
        "gate": {"success": result.success, "evaluated": result.evaluated,
                 "data_docs": result.data_docs_index},
        "charts": [c.as_dict() for c in charts],
        "uncharted_levels": uncharted,
    })
    return StepResult(f"symptoms release candidate {days[0]}..{days[-1]} passed the gate "
                      f"({result.evaluated} expectations); staged in {stage}; Data Docs: "
                      f"{result.data_docs_index}", (str(stage),))


def epsilon_accounting(ledger: Ledger, cfg: SymptomsConfig, first: date,
                       last: date) -> dict[str, Any]:
    totals = {d: eps for (_, d), eps in ledger.totals(REPORT).items() if first <= d <= last}
    summary = epsilon_summary(totals, normal_run=cfg.run_epsilon, cap=cfg.cap,
                              composition="basic (sum over A, B and levels of each date)")
    summary["split_per_level"] = {k: round(v, 6) for k, v in cfg.ledger_epsilons.items()}
    return summary


def _store_scaling(root: DataRoot, ledger: Ledger, stored: pd.DataFrame,
                   proposed: list[dict[str, Any]]) -> None:
    """Append new factors; existing ones are never changed (call under the lock). The new
    version's sha256 is recorded in the ledger before it replaces the old one."""
    if not proposed:
        return
    table = pd.concat([stored, pd.DataFrame(proposed)[list(SCALING_COLUMNS)]],
                      ignore_index=True)
    if table.duplicated(["region_id", "resolution"]).any():
        raise PublishRefused("a scaling factor would be stored twice; not published")
    store_recorded(ledger, REPORT, SCALING_NAME, pa.Table.from_pandas(table, preserve_index=False),
                   root.scaling_file(REPORT), frozen=False)


def publish_staged(root: DataRoot, cfg: SymptomsConfig, *, run_id: str,
                   ledger_url: str) -> StepResult:
    stage = staging_dir(root, REPORT, run_id)
    staged = read_staged(stage, run_id)
    if staged["empty"]:
        return StepResult("nothing to publish yet (no symptoms days)")
    with publish_lock(root, REPORT), closing_ledger(open_ledger(root, ledger_url)) as ledger:
        require_sound(root, ledger)
        stored_scaling, scaling_now = read_scaling(root, ledger)  # verified
        current = current_release(root, REPORT, ledger)
        if current and staged.get("region") is None and (
                current["first_date"], current["last_date"]) == (
                staged["first_date"], staged["last_date"]):
            first = date.fromisoformat(staged["first_date"])
            last = date.fromisoformat(staged["last_date"])
            if content_release_id(last, staged["files"], epsilon_accounting(
                    ledger, cfg, first, last)) == current["release_id"]:
                # another run (a gate beside this one built the same files) published
                # exactly this release, with the scaling factors it stored: nothing to do
                # (a rebuild for the changed factors would give these files again)
                shutil.rmtree(stage, ignore_errors=True)
                return StepResult(
                    f"symptoms release {current['release_id']} ({first}..{last}) is out "
                    f"already: run {current['run_id']} published these staged files with "
                    "the same accounting; latest stays")
        overtaken = bool(current and current["last_date"] > staged["last_date"])
        if overtaken and staged.get("region") is None and holds_current_inputs(
                current, lambda days: inputs_sha256(days, recorded_days(ledger, REPORT))):
            # a release of later days, built from the per-day files as they are now, is
            # out: it holds this run's values, and a rebuild would give the same files
            assert current is not None
            shutil.rmtree(stage, ignore_errors=True)
            return StepResult(
                f"symptoms release {current['release_id']} ({current['first_date']}.."
                f"{current['last_date']}), published since this run staged, holds this "
                f"run's days {staged['first_date']}..{staged['last_date']} from the same "
                "per-day files: latest stays, nothing to rebuild")
        if staged.get("scaling_sha256") != scaling_now or overtaken:
            # the stored factors changed since staging (another release fixed one first),
            # or a release covering later days was published meanwhile: rebuild from the
            # current state, so that this run's values are published, not skipped
            stage_and_validate(root, cfg, run_id=run_id, ledger_url=ledger_url,
                               region=staged.get("region"))
            staged = read_staged(stage, run_id)
            if staged.get("scaling_sha256") != ledger.derived_sha256(REPORT, SCALING_NAME):
                raise PublishRefused("the stored scaling factors changed while this release "
                                     "was rebuilt under the publish lock; not published")
        if not staged["gate"]["success"]:
            raise PublishRefused(f"staged release {stage} did not pass the gate")
        files_dir = stage / "release"
        verify_checksums(files_dir, staged["files"])
        first = date.fromisoformat(staged["first_date"])
        last = date.fromisoformat(staged["last_date"])
        epsilon = epsilon_accounting(ledger, cfg, first, last)
        anchor = ledger_anchor(ledger)
        if epsilon["per_user_day_max"] > cfg.cap + 1e-9:
            raise PublishRefused(f"symptoms release {first}..{last} rests on a composed "
                                 f"epsilon per user-day of {epsilon['per_user_day_max']}, "
                                 f"over the cap {cfg.cap:.4f}; not published")
        release_id = content_release_id(last, staged["files"], epsilon)
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
                       "symptom_list_sha256": sha256_file(root.symptoms_txt),
                       **({INPUTS_KEY: staged["inputs_sha256"]}
                          if staged.get("inputs_sha256") else {})},
            "parameters": {"max_symptoms_per_day": cfg.max_symptoms_per_day,
                           "reliability_tolerance": cfg.reliability_tolerance,
                           "reliability_probability": cfg.reliability_probability,
                           "granularity_neighbours": cfg.granularity_neighbours,
                           "min_area_km2": cfg.min_area_km2, "scale_to": cfg.scale_to},
            "rows": staged["rows"],
            "suppression": staged["summary"],
            "epsilon": epsilon,
            "ledger": anchor,
            "files": staged["files"],
            "gate": staged["gate"],
        }
        # the page shows the manifest's figures; it is listed in the manifest itself
        manifest["files"] = write_release_index(
            files_dir, manifest, staged.get("charts", []), title=SPEC.title,
            published=published_symptoms,
            data_docs=staged["gate"]["data_docs"],
            release_dir=root.published_dir(REPORT) / "releases" / release_id,
            data_root=root.root, uncharted_levels=staged.get("uncharted_levels", []))
        require_manifest(manifest)  # the shipped manifest schema, before anything changes
        _store_scaling(root, ledger, stored_scaling, staged["new_scaling"])
        fault_point("publish.after_scaling")
        target = promote(root, REPORT, files_dir, release_id, manifest, stage,
                         ledger)
        event = release_event(root, current, release_id, target)
    shutil.rmtree(stage, ignore_errors=True)
    return StepResult(f"published symptoms release {release_id} ({first}..{last}; "
                      f"{staged['rows']['daily']} daily and {staged['rows']['weekly']} weekly "
                      f"rows; epsilon per user-day max {epsilon['per_user_day_max']}) at "
                      f"{root.latest_release(REPORT)}; report page {target / INDEX_FILE}",
                      (str(target),), event=event)
