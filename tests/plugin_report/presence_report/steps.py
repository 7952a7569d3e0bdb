"""The presence report's task functions (``dp_ops.reports.protocol.ReportSteps``): the
factory's DAGs and ``python -m dp_ops run presence`` call exactly these, once the factory
has ingested the sources its spec names:

    bound -> noise (budget-checked) -> report -> gate -> publish
"""

from __future__ import annotations

from datetime import date
from importlib.resources import files
from pathlib import Path

import numpy as np
import pyarrow as pa

from dp_ops.engine.base import BoundingSql
from dp_ops.engine.sql import render_sql_file
from dp_ops.layout import DataRoot
from dp_ops.steps import noising
from dp_ops.steps.bound import bound_clean_day
from dp_ops.steps.day_files import write_day_file
from dp_ops.steps.ledger_binding import closing_ledger, open_ledger
from dp_ops.steps.noise_request import NoiseRequest
from dp_ops.steps.result import StepResult
from presence_report.config import METRIC, REPORT, PresenceConfig

BOUNDING = BoundingSql(lambda stays: render_sql_file(
    Path(str(files("presence_report") / "sql" / "presence_bound_contributions.sql")),
    stays=stays))


def load_config() -> PresenceConfig:
    """Defaults, overridden by the JSON file named in ``DP_PRESENCE_CONFIG``."""
    return PresenceConfig.load("DP_PRESENCE_CONFIG")


def prepare(cfg: PresenceConfig) -> int:
    from dp_ops.privacy.noise import prepare_samplers

    return prepare_samplers((b.cell_epsilon, b.sensitivity) for b in cfg.metric_budgets)


def first_noised_date(cfg: PresenceConfig) -> date:
    return cfg.first_public_date


def needs_baseline(cfg: PresenceConfig, day: date) -> bool:
    return False


def skipped_after_noise(root: DataRoot, cfg: PresenceConfig, day: date) -> frozenset[str]:
    return frozenset()


def bound_contributions(root: DataRoot, cfg: PresenceConfig, day: date, *,
                        shard: int | None = None) -> StepResult:
    params: dict[str, object] = {"day": day.isoformat(), "salt": cfg.bounding_salt,
                                 "levels": list(cfg.levels)}
    return bound_clean_day(root, REPORT, "location_history", day, BOUNDING, params, shard=shard)


def noise_plan(root: DataRoot, cfg: PresenceConfig) -> noising.NoisePlan:
    return noising.NoisePlan(
        report=REPORT, budgets=cfg.metric_budgets, group_cells={METRIC: (METRIC,)},
        levels=cfg.levels, cap=cfg.cap,
        method_version=cfg.method_version, first_public_date=cfg.first_public_date,
        policy_terms=cfg.policy_terms)


def noise(root: DataRoot, cfg: PresenceConfig, request: NoiseRequest, *,
          ledger_url: str) -> StepResult:
    return noising.noise_day(root, noise_plan(root, cfg), request, ledger_url=ledger_url)


def report(root: DataRoot, cfg: PresenceConfig, day: date, *, ledger_url: str) -> StepResult:
    """Every region's noisy count for ``day`` and whether it is published (noisy values and
    public region attributes only)."""
    from dp_ops.regions import read_regions

    regions = read_regions(root.regions_csv)
    with closing_ledger(open_ledger(root, ledger_url)) as ledger:
        cells = noising.load_noisy_cells(root, REPORT, day, ledger.spends(REPORT, day))
        rows = cells[["level", "region_id", "noisy_value"]].merge(
            regions[["region_id", "country_region_code", "area_km2"]], on="region_id",
            how="left", validate="one_to_one")
        rows.insert(0, "date", day.isoformat())
        rows["level"] = rows["level"].astype(np.int64)
        rows["publish_row"] = ((rows["area_km2"] >= cfg.min_area_km2)
                               & (rows["noisy_value"] >= cfg.min_users))
        rows = rows.sort_values(["level", "region_id"]).reset_index(drop=True)
        target = write_day_file(root, ledger, REPORT, day,
                                pa.Table.from_pandas(rows, preserve_index=False))
    return StepResult(f"presence for {day}: {int(rows['publish_row'].sum())} of {len(rows)} "
                      f"region counts published; rows in {target}", (str(target),))


def gate(root: DataRoot, cfg: PresenceConfig, *, run_id: str, ledger_url: str,
         region: str | None = None) -> StepResult:
    from dp_ops.steps import release_flow
    from presence_report.release import PARTS

    return release_flow.stage_and_validate(PARTS, root, cfg, run_id=run_id,
                                           ledger_url=ledger_url, region=region)


def publish(root: DataRoot, cfg: PresenceConfig, *, run_id: str,
            ledger_url: str) -> StepResult:
    from dp_ops.steps import release_flow
    from presence_report.release import PARTS

    return release_flow.publish_staged(PARTS, root, cfg, run_id=run_id, ledger_url=ledger_url)


__all__ = ["bound_contributions", "first_noised_date", "gate", "load_config",
           "needs_baseline", "noise", "noise_plan", "prepare", "publish", "report",
           "skipped_after_noise"]
