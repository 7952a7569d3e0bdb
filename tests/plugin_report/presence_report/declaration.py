"""The presence report, declared (``dp_ops.reports.declared.Report``): what is specific to
it. The factory ingests the location history, bounds it with the report's own query,
noises one count per region and level, runs ``report_day`` and the release flow."""

from __future__ import annotations

from datetime import date
from importlib.resources import files
from pathlib import Path

import numpy as np
import pyarrow as pa

from dp_ops.engine.base import BoundingSql
from dp_ops.engine.sql import render_sql_file
from dp_ops.layout import DataRoot
from dp_ops.reports.declared import Report
from dp_ops.steps import noising
from dp_ops.steps.day_files import write_day_file
from dp_ops.steps.ledger_binding import closing_ledger, open_ledger
from dp_ops.steps.result import StepResult
from presence_report.config import METRIC, PresenceConfig
from presence_report.config import REPORT as NAME
from presence_report.release import PARTS
from presence_report.spec import SPEC

BOUNDING = BoundingSql(lambda stays: render_sql_file(
    Path(str(files("presence_report") / "sql" / "presence_bound_contributions.sql")),
    stays=stays))


def bounding_params(cfg: PresenceConfig, day: date) -> dict[str, object]:
    return {"day": day.isoformat(), "salt": cfg.bounding_salt, "levels": list(cfg.levels)}


def report_day(root: DataRoot, cfg: PresenceConfig, day: date, *, ledger_url: str) -> StepResult:
    """Every region's noisy count for ``day`` and whether it is published (noisy values and
    public region attributes only)."""
    from dp_ops.regions import read_regions

    regions = read_regions(root.regions_csv)
    with closing_ledger(open_ledger(root, ledger_url)) as ledger:
        cells = noising.load_noisy_cells(root, NAME, day, ledger.spends(NAME, day))
        rows = cells[["level", "region_id", "noisy_value"]].merge(
            regions[["region_id", "country_region_code", "area_km2"]], on="region_id",
            how="left", validate="one_to_one")
        rows.insert(0, "date", day.isoformat())
        rows["level"] = rows["level"].astype(np.int64)
        rows["publish_row"] = ((rows["area_km2"] >= cfg.min_area_km2)
                               & (rows["noisy_value"] >= cfg.min_users))
        rows = rows.sort_values(["level", "region_id"]).reset_index(drop=True)
        target = write_day_file(root, ledger, NAME, day,
                                pa.Table.from_pandas(rows, preserve_index=False))
    return StepResult(f"presence for {day}: {int(rows['publish_row'].sum())} of {len(rows)} "
                      f"region counts published; rows in {target}", (str(target),))


REPORT = Report[PresenceConfig](
    spec=SPEC,
    load_config=lambda: PresenceConfig.load("DP_PRESENCE_CONFIG"),
    bounding=BOUNDING,
    bounding_params=bounding_params,
    cells=lambda root, cfg: {METRIC: (METRIC,)},
    report_day=report_day,
    release=PARTS,
)
