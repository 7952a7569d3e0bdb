"""The presence report's parts of the factory's one release flow
(``dp_ops.steps.release_flow.ReleaseParts``): the release is every published region count
of the recorded days, checked by its own Great Expectations suite and column schema."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from datetime import date
from importlib.resources import files
from pathlib import Path
from typing import Any

import great_expectations.expectations as gxe
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.gx.result import require_pass
from dp_ops.gx.runner import run_suites
from dp_ops.gx.suites import suite
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.steps.data_statement import StatementParts
from dp_ops.steps.day_files import read_release_days
from dp_ops.steps.page import PublishedSection
from dp_ops.steps.release import (
    build_key,
    epsilon_summary,
    inputs_sha256,
    sha256_file,
    write_csv,
)
from dp_ops.steps.release_contract import arrow_table
from dp_ops.steps.release_flow import Built, ReleasePlan
from dp_ops.steps.release_values import GateOutcome, Staged
from presence_report.config import REPORT, PresenceConfig
from presence_report.spec import SPEC

CSV, PARQUET = "Presence_Counts.csv", "Presence_Counts.parquet"
COLUMNS = ["date", "region_id", "level", "country_region_code", "present_users"]
CONTRACT: dict[str, Any] = json.loads(
    (files("presence_report") / "schemas" / "presence.columns.json").read_text())


def _suites(cfg: PresenceConfig) -> list[Any]:
    """The release gate: every published count comes from a region of at least
    ``min_area_km2`` and is at least ``min_users``; one row per region and day."""
    return [suite("presence_release", [
        gxe.ExpectColumnValuesToBeBetween(column="area_km2", min_value=cfg.min_area_km2),
        gxe.ExpectColumnValuesToBeBetween(column="present_users", min_value=cfg.min_users),
        gxe.ExpectCompoundColumnsToBeUnique(column_list=["region_id", "date"]),
        gxe.ExpectColumnValuesToBeInSet(column="level", value_set=list(cfg.levels)),
    ])]


def _build(root: DataRoot, cfg: PresenceConfig, ledger: Ledger, target: Path, *,
           run_id: str, key: str) -> Built:
    days, digests, tables = read_release_days(root, ledger, REPORT, cfg.first_public_date)
    rows = pa.concat_tables(tables).to_pandas()
    published = rows[rows["publish_row"]].rename(columns={"noisy_value": "present_users"})
    (gate_suite,) = _suites(cfg)
    result = run_suites([(gate_suite, "presence_published", published)], gx_dir=root.gx_dir,
                        parameters={}, run_name=f"presence-{run_id}")
    require_pass(result)
    out = published[COLUMNS].sort_values(["date", "level", "region_id"]).reset_index(drop=True)
    target.mkdir(parents=True, exist_ok=True)
    write_csv(out, target / CSV)
    pq.write_table(arrow_table(out, REPORT, PARQUET, CONTRACT), target / PARQUET)
    return Built(
        rows={"published": len(out), "domain": len(rows)},
        suppression={"published_share": round(len(out) / len(rows), 4) if len(rows) else 0.0},
        gate=GateOutcome(result.success, result.evaluated, result.data_docs_index),
        charts=[], uncharted_levels=[], inputs_sha256=inputs_sha256(days, digests),
        build_key=key)


def published_values(manifest: Mapping[str, Any]) -> dict[str, Any]:
    rows = manifest.get("rows") or {}
    return {"published": int(rows.get("published") or 0),
            "domain": int(rows.get("domain") or 0),
            "min_area_km2": str((manifest.get("parameters") or {}).get("min_area_km2"))}


published_section = PublishedSection("presence_report:published.html", published_values)


class PresenceRelease:
    report = REPORT
    title = SPEC.title
    column_contract = CONTRACT

    page_section = published_section

    def plan(self, root: DataRoot, cfg: PresenceConfig, ledger: Ledger, days: list[date],
             digests: dict[date, str], *, run_id: str, region: str | None) -> ReleasePlan:
        key = build_key(REPORT, days=[days[0].isoformat(), days[-1].isoformat()],
                        inputs=inputs_sha256(days, digests), config=asdict(cfg),
                        regions=sha256_file(root.regions_csv))
        return ReleasePlan(key, f"presence release candidate {days[0]}..{days[-1]}",
                           lambda target: _build(root, cfg, ledger, target, run_id=run_id,
                                                 key=key))

    def inputs_sha256(self, ledger: Ledger, days: list[date],
                      digests: Mapping[date, str]) -> str:
        return inputs_sha256(days, digests)

    def state_moved(self, ledger: Ledger, staged: Staged) -> bool:
        return False

    def epsilon(self, ledger: Ledger, cfg: PresenceConfig, first: date,
                last: date) -> dict[str, Any]:
        totals = {d: e for (_, d), e in ledger.totals(REPORT).items() if first <= d <= last}
        return epsilon_summary(totals, normal_run=cfg.run_epsilon, cap=cfg.cap,
                               composition="basic (sum over levels of each date)")

    def check_inputs(self, root: DataRoot, ledger: Ledger, cfg: PresenceConfig) -> None:
        return None

    def manifest_inputs(self, root: DataRoot, ledger: Ledger,
                        cfg: PresenceConfig) -> dict[str, Any]:
        return {}

    def manifest_extras(self, root: DataRoot, ledger: Ledger, cfg: PresenceConfig,
                        last: date) -> dict[str, Any]:
        return {"parameters": {"min_users": cfg.min_users, "min_area_km2": cfg.min_area_km2,
                               "epsilon_per_level": cfg.epsilon}}

    def release_id_parts(self, extras: Mapping[str, Any]) -> tuple[Any, ...]:
        return ()

    def commit(self, root: DataRoot, ledger: Ledger, staged: Staged) -> None:
        return None

    def statement(self, cfg: PresenceConfig, manifest: Mapping[str, Any]) -> StatementParts:
        rows = manifest.get("rows") or {}
        return StatementParts(
            what="For each region and day, the number of users with at least one stay in "
                 "it (a noisy count).",
            bounds="Each user-day counts once per level, in one region.",
            thresholds=(f"A count under {cfg.min_users} is not published.",),
            rule="A count is published when its noisy value is at least the threshold.",
            published=f"Published counts: {int(rows.get('published', 0)):,}.",
            intervals="This report publishes no intervals.",
            biases="Counts of small regions are withheld more often.")

    def rows_text(self, rows: Mapping[str, int]) -> str:
        return f"{rows['published']} region counts"


PARTS = PresenceRelease()
__all__ = ["PARTS", "PresenceRelease"]
