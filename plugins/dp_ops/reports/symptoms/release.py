"""The symptoms parts of a release (docs/design.md, Symptoms dataset, Release gates and
Outputs).

The flow itself (stage, validate, publish, rebuild when overtaken, manifest, promote) is
:mod:`dp_ops.steps.release_flow`. This module supplies what only the symptoms dataset
knows: the candidate is built from the per-day rows (series resolutions, weekly sums,
scaling), validated by :mod:`dp_ops.reports.symptoms.suites` and written as the daily and
weekly files per year with a chart per region (:mod:`dp_ops.reports.symptoms.charts`);
the scaling factors a release fixes for the first time are stored when it is published
(:class:`SymptomsRelease`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.api import Built, DataRoot, PublishedSection, ReleasePlan, StatementParts
from dp_ops.errors import PublishRefused
from dp_ops.faults import fault_point
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
from dp_ops.reports.symptoms.statement import symptoms_statement
from dp_ops.sources.search_activity import read_symptoms, symptom_list
from dp_ops.steps import release_flow
from dp_ops.steps.charts import charted_regions
from dp_ops.steps.derived import read_recorded, store_recorded
from dp_ops.steps.release import (
    build_key,
    epsilon_summary,
    inputs_sha256,
    latest_release_file,
    sha256_file,
    write_csv,
)
from dp_ops.steps.release_contract import arrow_table, load_columns
from dp_ops.steps.release_values import GateOutcome, Staged

# the columns of each published file (schemas/<report>.columns.json, beside this module)
CONTRACT = load_columns("dp_ops.reports.symptoms", REPORT)
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




# The interval tables' files: the data file's name and this suffix.
INTERVALS_SUFFIX = "_intervals"


def file_names(candidate: Candidate, code: str) -> dict[str, pd.DataFrame]:
    """``<year>_<CC>_daily_symptoms_dataset.csv`` and the weekly one, per year."""
    return _per_year({"daily": candidate.daily, "weekly": candidate.weekly}, code,
                     candidate.last_date, "")


def interval_file_names(candidate: Candidate, code: str) -> dict[str, pd.DataFrame]:
    """``<year>_<CC>_daily_symptoms_dataset_intervals.csv`` and the weekly one, per year:
    one row per published value with its 95% interval."""
    return _per_year({"daily": candidate.daily_intervals,
                      "weekly": candidate.weekly_intervals}, code, candidate.last_date,
                     INTERVALS_SUFFIX)


def _per_year(tables: Mapping[str, pd.DataFrame], code: str, last: date,
              suffix: str) -> dict[str, pd.DataFrame]:
    out: dict[str, pd.DataFrame] = {}
    for kind, table in tables.items():
        year_of = table["date"].str[:4]
        years = sorted(year_of.unique()) or [str(last.year)]
        for year in years:
            in_year = (year_of == year).to_numpy(bool)
            # one year (the usual case): the table itself, not a copy of it
            out[f"{year}_{code}_{kind}_symptoms_dataset{suffix}"] = (
                table if in_year.all() else table[in_year])
    return out


def write_release_files(candidate: Candidate, code: str, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name, frame in file_names(candidate, code).items():
        write_csv(frame, target / f"{name}.csv")
        fault_point("release.mid_write")
        kind = "daily" if name.endswith("_daily_symptoms_dataset") else "weekly"
        pq.write_table(arrow_table(frame, REPORT, f"*_{kind}_symptoms_dataset.parquet",
                                   CONTRACT),
                       target / f"{name}.parquet")
    for name, frame in interval_file_names(candidate, code).items():
        write_csv(frame, target / f"{name}.csv")
        kind = "daily" if "_daily_" in name else "weekly"
        pq.write_table(arrow_table(frame, REPORT,
                                   f"*_{kind}_symptoms_dataset{INTERVALS_SUFFIX}.parquet",
                                   CONTRACT),
                       target / f"{name}.parquet")
    resolutions = candidate.resolutions[["region_id", "symptom", "resolution"]]
    pq.write_table(arrow_table(resolutions, REPORT, RESOLUTIONS_FILE, CONTRACT),
                   target / RESOLUTIONS_FILE)
    scaling = candidate.scaling[list(SCALING_COLUMNS)]
    pq.write_table(arrow_table(scaling, REPORT, "scaling_factors.parquet", CONTRACT),
                   target / "scaling_factors.parquet")


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


def symptoms_build_key(root: DataRoot, cfg: SymptomsConfig, days: list[date], *,
                       inputs: str, scaling: str | None, frozen: str | None,
                       region: str | None) -> str:
    """What a staged symptoms release is built from (:func:`build_key`): the days and
    their per-day files, the stored scaling factors, the resolutions frozen by the latest
    release, the region table, the symptom list, the config, the charted levels and the
    on-call rerun's region."""
    from dp_ops.settings import execution_settings

    return build_key(
        REPORT, days=[days[0].isoformat(), days[-1].isoformat()], inputs=inputs,
        scaling=scaling, frozen=frozen,
        regions=sha256_file(root.regions_csv), symptoms=sha256_file(symptom_list(root)),
        config=asdict(cfg), chart_levels=execution_settings().chart_levels,
        region=region)


def _build(root: DataRoot, cfg: SymptomsConfig, ledger: Ledger, target: Path, *,
           run_id: str, region: str | None, days: list[date], digests: dict[date, str],
           inputs: str, scaling: pd.DataFrame, used_scaling: str | None,
           frozen: pd.DataFrame | None, key: str) -> Built:
    from dp_ops.gx.carried import table_digests
    from dp_ops.gx.result import require_pass
    from dp_ops.regions import read_regions
    from dp_ops.reports.symptoms.suites import (
        gate_rules,
        gate_tables,
        validate_symptoms_release,
    )

    regions = read_regions(root.regions_csv)
    symptoms = read_symptoms(symptom_list(root))
    recompute = None
    if region is not None:
        from dp_ops.steps.noising import region_chain

        recompute = {rid for _, rid in region_chain(regions, region)}
    candidate = build_candidate(load_period(root, cfg, days, digests), regions, symptoms, cfg,
                                scaling, frozen, recompute)
    day_labels = [d.isoformat() for d in days]
    mondays = [d.isoformat() for d in complete_weeks(days[0], days[-1])]
    # every file is built from the recorded inputs; GX sees the rows the gate of the
    # release now published did not validate (all of them for an on-call rerun)
    rules = gate_rules(cfg, symptoms)
    carried = None if region is not None else release_flow.carried_gate_rows(
        root, ledger, REPORT, rules, method_version=cfg.method_version, first_date=days[0])
    tables = gate_tables(candidate, regions, symptoms, cfg)
    validated = table_digests(tables)
    result = validate_symptoms_release(
        candidate, regions, symptoms, days=day_labels, mondays=mondays, gx_dir=root.gx_dir,
        cfg=cfg, run_name=f"symptoms-{run_id}", tables=tables, digests=validated,
        carried=carried)
    require_pass(result)  # raises GateFailed naming the failures and the Data Docs
    codes = regions.loc[regions["level"] == 0, "country_region_code"].astype(str).tolist()
    # charts first: they are part of the staged files and their checksums
    charted, uncharted = charted_regions(regions, cfg.levels)
    charts = write_symptom_charts(candidate.daily, candidate.weekly, charted, day_labels,
                                  target, intervals=(candidate.daily_intervals,
                                                     candidate.weekly_intervals))
    write_release_files(candidate, codes[0] if codes else "XX", target)
    new = candidate.scaling[candidate.scaling["new"]]
    return Built(
        rows={"daily": len(candidate.daily), "weekly": len(candidate.weekly)},
        suppression=release_summary(candidate),
        gate=GateOutcome(result.success, result.evaluated, result.data_docs_index),
        charts=[c.as_dict() for c in charts], uncharted_levels=uncharted,
        inputs_sha256=inputs, build_key=key,
        extras={"new_scaling": new[list(SCALING_COLUMNS)].to_dict(orient="records"),
                "scaling_sha256": used_scaling},
        gate_rows=None if validated is None else release_flow.GateRows(rules, validated))


def epsilon_accounting(ledger: Ledger, cfg: SymptomsConfig, first: date,
                       last: date) -> dict[str, Any]:
    totals = {d: eps for (_, d), eps in ledger.totals(REPORT).items() if first <= d <= last}
    summary = epsilon_summary(totals, normal_run=cfg.run_epsilon, cap=cfg.cap,
                              composition="basic (sum over A, B and levels of each date)")
    # as the ledger booked the period's daily draws (the config's figure would restate an
    # epsilon changed mid-period for every date)
    booked = ledger.largest_daily_epsilons(REPORT, first, last)
    summary["split_per_level"] = {k: round(v, 6) for k, v in sorted(booked.items())}
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


class SymptomsRelease:
    """The symptoms parts of the release flow (:mod:`dp_ops.steps.release_flow`).

    Scaling factors are fixed at a (region, resolution)'s first release and reused. Two
    runs staged at the same time could each propose a factor for the same new region; the
    first to publish stores its own, and the other, finding the store changed under the
    publish lock (:meth:`state_moved`), is built again with the stored factor before it
    publishes, so a published value is always c x ratio with the c that is stored."""

    report = REPORT
    title = SPEC.title
    column_contract = CONTRACT
    page_section: PublishedSection = published_symptoms

    def plan(self, root: DataRoot, cfg: SymptomsConfig, ledger: Ledger, days: list[date],
             digests: dict[date, str], *, run_id: str, region: str | None) -> ReleasePlan:
        """With ``region`` (an on-call rerun), only that region and its ancestors are
        decided afresh. Every input is read as the ledger recorded it: the per-day files,
        the scaling factors, the resolutions frozen by the current release."""
        scaling, used_scaling = read_scaling(root, ledger)
        frozen, frozen_sha = frozen_resolutions(root, ledger)
        inputs = inputs_sha256(days, digests)
        key = symptoms_build_key(root, cfg, days, inputs=inputs, scaling=used_scaling,
                                 frozen=frozen_sha, region=region)
        return ReleasePlan(key, f"symptoms release candidate {days[0]}..{days[-1]}",
                           lambda target: _build(
                               root, cfg, ledger, target, run_id=run_id, region=region,
                               days=days,
                               digests=digests, inputs=inputs, scaling=scaling,
                               used_scaling=used_scaling, frozen=frozen, key=key))

    def inputs_sha256(self, ledger: Ledger, days: list[date],
                      digests: Mapping[date, str]) -> str:
        return inputs_sha256(days, digests)

    def state_moved(self, ledger: Ledger, staged: Staged) -> bool:
        # another release fixed a scaling factor since this one was staged
        return bool(staged.extras.get("scaling_sha256")
                    != ledger.derived_sha256(REPORT, SCALING_NAME))

    def epsilon(self, ledger: Ledger, cfg: SymptomsConfig, first: date,
                last: date) -> dict[str, Any]:
        return epsilon_accounting(ledger, cfg, first, last)

    def check_inputs(self, root: DataRoot, ledger: Ledger, cfg: SymptomsConfig) -> None:
        read_scaling(root, ledger)  # the stored factors are the recorded ones

    def manifest_inputs(self, root: DataRoot, ledger: Ledger,
                        cfg: SymptomsConfig) -> dict[str, Any]:
        return {"symptom_list_sha256": sha256_file(symptom_list(root))}

    def manifest_extras(self, root: DataRoot, ledger: Ledger, cfg: SymptomsConfig,
                        last: date) -> dict[str, Any]:
        return {"parameters": {
            "max_symptoms_per_day": cfg.max_symptoms_per_day,
            "reliability_tolerance": cfg.reliability_tolerance,
            "reliability_probability": cfg.reliability_probability,
            "granularity_neighbours": cfg.granularity_neighbours,
            "min_area_km2": cfg.min_area_km2, "scale_to": cfg.scale_to}}

    def release_id_parts(self, extras: Mapping[str, Any]) -> tuple[Any, ...]:
        return ()  # the parameters are in the files' values already

    def commit(self, root: DataRoot, ledger: Ledger, staged: Staged) -> None:
        """Store the scaling factors this release fixes for the first time."""
        stored, _ = read_scaling(root, ledger)
        _store_scaling(root, ledger, stored, list(staged.extras.get("new_scaling", [])))
        fault_point("publish.after_scaling")

    def statement(self, cfg: SymptomsConfig, manifest: Mapping[str, Any]) -> StatementParts:
        return symptoms_statement(cfg, manifest)

    def rows_text(self, rows: Mapping[str, int]) -> str:
        return f"{rows['daily']} daily and {rows['weekly']} weekly rows"


PARTS = SymptomsRelease()

