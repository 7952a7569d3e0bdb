"""The mobility parts of a release (docs/design.md, Release gates and Outputs).

The flow itself (stage, validate, publish, rebuild when overtaken, manifest, promote) is
:mod:`dp_ops.steps.release_flow`. This module supplies what only mobility knows: the
release is assembled from the per-day report files (the contiguous run of days from the
first public date), validated by :mod:`dp_ops.reports.mobility.suites`, written as the
Google-style global CSV and Parquet and per-country CSVs with a chart per region
(:mod:`dp_ops.reports.mobility.charts`); it rests on the frozen baseline and states the
method updates in effect (:class:`MobilityRelease`).
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

from dp_ops.api import (
    Built,
    DataRoot,
    PublishedSection,
    ReleasePlan,
    StatementParts,
    read_release_days,
)
from dp_ops.errors import BaselineMissing, GateFailed
from dp_ops.faults import fault_point
from dp_ops.privacy.ledger import Ledger
from dp_ops.reports.mobility.baseline import BASELINE_NAME
from dp_ops.reports.mobility.charts import write_mobility_charts
from dp_ops.reports.mobility.config import REPORT, MobilityConfig
from dp_ops.reports.mobility.estimates import CATEGORIES
from dp_ops.reports.mobility.page import published_mobility
from dp_ops.reports.mobility.report import (
    CHANGE_COLUMNS,
    INTERVAL_COLUMNS,
    INTERVAL_FILE_COLUMNS,
    PUBLISHED_COLUMNS,
)
from dp_ops.reports.mobility.spec import SPEC
from dp_ops.reports.mobility.statement import mobility_statement
from dp_ops.steps import release
from dp_ops.steps.charts import charted_regions
from dp_ops.steps.derived import verify_recorded
from dp_ops.steps.release import (
    epsilon_summary,
    inputs_sha256,
    sha256_file,
    write_csv,
)
from dp_ops.steps.release_contract import arrow_table, load_columns
from dp_ops.steps.release_values import GateOutcome, Staged

__all__ = ["PARTS", "MobilityRelease", "assemble", "epsilon_accounting", "staging_dir",
           "write_release_files"]

# the columns of each published file (schemas/<report>.columns.json, beside this module)
CONTRACT = load_columns("dp_ops.reports.mobility", REPORT)

GLOBAL_CSV = "Global_Mobility_Report.csv"
GLOBAL_PARQUET = "Global_Mobility_Report.parquet"
# The sidecar: the same rows in the same order, each change's 95% interval
INTERVALS_CSV = "Global_Mobility_Report_intervals.csv"
INTERVALS_PARQUET = "Global_Mobility_Report_intervals.parquet"
REGION_DIR = "Region_Mobility_Report_CSVs"
SORT_KEYS = ["country_region_code", "sub_region_1", "sub_region_2", "metro_area", "date"]


def staging_dir(root: DataRoot, run_id: str) -> Path:
    return release.staging_dir(root, REPORT, run_id)


def assemble(tables: list[pa.Table]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(internal domain table, published table) of the days' verified rows; the
    published table's intervals are :func:`intervals_table`."""
    # one Arrow table and one conversion (a pandas concat of a year of small frames is
    # several times slower)
    internal = pa.concat_tables(tables, promote_options="permissive").to_pandas()
    published = _published_rows(internal, PUBLISHED_COLUMNS)
    for col in CHANGE_COLUMNS:
        published[col] = published[col].astype("Int64")
    return internal, published


def _published_rows(internal: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    rows = internal.loc[internal["publish_row"], list(columns)]
    return rows.sort_values(SORT_KEYS, kind="stable").reset_index(drop=True)


def require_intervals(tables: list[pa.Table], days: list[date]) -> None:
    """Refuse day files written before intervals were kept (naming the days and the
    remedy): their rows would publish changes without their intervals."""
    missing = [d for d, t in zip(days, tables, strict=True)
               if not set(INTERVAL_COLUMNS) <= set(t.column_names)]
    if missing:
        shown = ", ".join(d.isoformat() for d in missing[:5])
        raise GateFailed(
            f"{len(missing)} mobility report day file(s) have no change intervals ({shown}"
            f"{', ...' if len(missing) > 5 else ''}): they were written by an earlier "
            "version; re-run the report step for those days (dp-ops run mobility --from "
            f"{missing[0]} --to {missing[-1]}: it reuses the stored noise and spends nothing)")


def intervals_table(internal: pd.DataFrame) -> pd.DataFrame:
    """The sidecar's rows: the published rows' keys, in the published order, and each
    change's interval (empty where the change is)."""
    intervals = _published_rows(internal, INTERVAL_FILE_COLUMNS)
    for col in INTERVAL_COLUMNS:
        intervals[col] = intervals[col].astype("Int64")
    return intervals


def write_release_files(published: pd.DataFrame, target: Path,
                        intervals: pd.DataFrame | None = None) -> None:
    """Global CSV and Parquet, their intervals sidecar, and per-year, per-country CSVs."""
    target.mkdir(parents=True, exist_ok=True)
    write_csv(published, target / GLOBAL_CSV)
    fault_point("release.mid_write")
    pq.write_table(arrow_table(published, REPORT, GLOBAL_PARQUET, CONTRACT),
                   target / GLOBAL_PARQUET)
    if intervals is not None:
        write_csv(intervals, target / INTERVALS_CSV)
        pq.write_table(arrow_table(intervals, REPORT, INTERVALS_PARQUET, CONTRACT),
                       target / INTERVALS_PARQUET)
    years = published["date"].str.slice(0, 4)
    for (year, code), part in published.groupby([years, "country_region_code"], sort=True):
        write_csv(part, target / REGION_DIR / f"{year}_{code}_Region_Mobility_Report.csv")


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


def mobility_build_key(root: DataRoot, cfg: MobilityConfig, days: list[date],
                       inputs: str) -> str:
    """What a staged mobility release is built from (:func:`release.build_key`): the days
    and ``inputs`` (:func:`mobility_inputs_sha256`), the region table, the config and the
    charted levels."""
    from dp_ops.settings import execution_settings

    return release.build_key(
        REPORT, days=[days[0].isoformat(), days[-1].isoformat()], inputs=inputs,
        regions=sha256_file(root.regions_csv), config=asdict(cfg),
        chart_levels=execution_settings().chart_levels)


def _build(root: DataRoot, cfg: MobilityConfig, ledger: Ledger, target: Path, *,
           run_id: str) -> Built:
    # imported only when there is something to validate: GX takes seconds to import
    from dp_ops.gx.result import require_pass
    from dp_ops.gx.validated import record_validated, validated_files
    from dp_ops.regions import read_regions
    from dp_ops.reports.mobility.suites import row_rules, validate_mobility_release

    # the rows as the ledger recorded them (each file's bytes checked, then parsed)
    days, digests, tables = read_release_days(root, ledger, REPORT, cfg.first_public_date)
    require_intervals(tables, days)
    internal, published = assemble(tables)
    inputs = mobility_inputs_sha256(ledger, days, digests)
    # the row-level rules are checked on the days whose files no gate validated before
    rules = row_rules(cfg)
    day_files = {d.isoformat(): digests[d] for d in days}
    known = validated_files(root.gx_dir, REPORT, rules, key=ledger.key())
    new_dates = {label for label, digest in day_files.items() if known.get(label) != digest}
    result = validate_mobility_release(internal, published, gx_dir=root.gx_dir, cfg=cfg,
                                       run_name=f"mobility-{run_id}", new_dates=new_dates)
    require_pass(result)  # raises GateFailed naming the failures and the Data Docs
    record_validated(root.gx_dir, REPORT, rules, day_files, key=ledger.key())
    # charts first: they are part of the staged files and their checksums
    charted, uncharted = charted_regions(read_regions(root.regions_csv), cfg.levels)
    intervals = intervals_table(internal)
    charts = write_mobility_charts(published, charted, [d.isoformat() for d in days], target,
                                   intervals)
    write_release_files(published, target, intervals)
    return Built(
        rows={"published": len(published), "domain": len(internal)},
        suppression=suppression_summary(internal),
        gate=GateOutcome(result.success, result.evaluated, result.data_docs_index),
        charts=[c.as_dict() for c in charts], uncharted_levels=uncharted,
        # the key of what was read (the files may have changed since the key of the lock)
        inputs_sha256=inputs, build_key=mobility_build_key(root, cfg, days, inputs))


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


class MobilityRelease:
    """The mobility parts of the release flow (:mod:`dp_ops.steps.release_flow`): the
    release rests on the frozen baseline and states the method updates in effect."""

    report = REPORT
    title = SPEC.title
    column_contract = CONTRACT
    page_section: PublishedSection = published_mobility

    def plan(self, root: DataRoot, cfg: MobilityConfig, ledger: Ledger, days: list[date],
             digests: dict[date, str], *, run_id: str, region: str | None) -> ReleasePlan:
        # regions are computed independently: an on-call rerun's region changes nothing
        key = mobility_build_key(root, cfg, days, mobility_inputs_sha256(ledger, days, digests))
        return ReleasePlan(key, f"mobility release candidate {days[0]}..{days[-1]}",
                           lambda target: _build(root, cfg, ledger, target, run_id=run_id))

    def inputs_sha256(self, ledger: Ledger, days: list[date],
                      digests: Mapping[date, str]) -> str:
        return mobility_inputs_sha256(ledger, days, digests)

    def state_moved(self, ledger: Ledger, staged: Staged) -> bool:
        return False  # the baseline and method updates are in the inputs' sha256

    def epsilon(self, ledger: Ledger, cfg: MobilityConfig, first: date,
                last: date) -> dict[str, Any]:
        return epsilon_accounting(ledger, cfg, first, last)

    def check_inputs(self, root: DataRoot, ledger: Ledger, cfg: MobilityConfig) -> None:
        # the baseline behind the release must be the recorded one (no need to parse it)
        if not verify_recorded(ledger, REPORT, BASELINE_NAME, root.baseline_file(REPORT)):
            raise BaselineMissing(f"the mobility baseline {root.baseline_file(REPORT)} does "
                                  "not exist yet; nothing to publish against")

    def manifest_inputs(self, root: DataRoot, ledger: Ledger,
                        cfg: MobilityConfig) -> dict[str, Any]:
        return {"baseline_sha256": ledger.derived_sha256(REPORT, BASELINE_NAME),
                "baseline_window": [cfg.baseline_start.isoformat(),
                                    cfg.baseline_end.isoformat()]}

    def manifest_extras(self, root: DataRoot, ledger: Ledger, cfg: MobilityConfig,
                        last: date) -> dict[str, Any]:
        return {"method_updates": method_updates_in_effect(root, ledger, last)}

    def release_id_parts(self, extras: Mapping[str, Any]) -> tuple[Any, ...]:
        # the same files under another method-update state are another release
        return (extras["method_updates"],)

    def commit(self, root: DataRoot, ledger: Ledger, staged: Staged) -> None:
        return None  # the baseline and the method updates are recorded where they are made

    def statement(self, cfg: MobilityConfig, manifest: Mapping[str, Any]) -> StatementParts:
        return mobility_statement(cfg, manifest)

    def rows_text(self, rows: Mapping[str, int]) -> str:
        return f"{rows['published']} rows"


PARTS = MobilityRelease()

