"""Release gate of the symptoms dataset: Great Expectations suites (docs/design.md, Release
gates).

Three tables of a candidate release are validated, all of them what is (or is about to
be) published, never private values:

- ``daily`` and ``weekly``: the wide tables written to the CSVs: Google's exact header,
  keys present and unique, every date (week) of the release present for every region in
  the file, and no other date (the weekly file's dates are the Mondays of the complete
  weeks);
- ``values``: every non-empty cell of the two wide tables, melted back to one row per
  value and joined with the noisy A and B, the interval and the scaling factor it was
  derived from: values >= 0, no region under ``min_area_km2``, no value that fails the
  reliability rule, each value equal to c x max(A / B, 0) rounded to two decimals, weekly values
  dated by a Monday.

The machinery (file Data Context, checkpoints, Data Docs, locking) is
:func:`dp_ops.gx.runner.run_suites`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import great_expectations as gx
import great_expectations.expectations as gxe
import numpy as np
import pandas as pd
from great_expectations.expectations.row_conditions import Column

from dp_ops.gx.carried import Tables, validate_carrying
from dp_ops.gx.result import GateResult
from dp_ops.gx.runner import run_suites
from dp_ops.gx.suites import rules_digest, suite
from dp_ops.reports.symptoms.assemble import KEY_COLUMNS, Candidate, header
from dp_ops.reports.symptoms.config import SymptomsConfig

SUITE_PREFIX = "symptoms_release"
# a published value is the rounded c x max(A / B, 0) itself (assemble.py rounds the same
# float the same way), so it must equal it; the slack only absorbs a float read back
VALUE_SLACK = 1e-9


def wide_suite(name: str, symptoms: list[str]) -> gx.ExpectationSuite:
    """Run-time parameters ``<name>_rows`` (regions x dates), ``<name>_dates`` (the dates
    of the release; for the weekly file the Mondays of its complete weeks) and
    ``<name>_date_count``."""
    expectations: list[gxe.Expectation] = []
    add = expectations.append
    add(gxe.ExpectTableColumnsToMatchOrderedList(column_list=header(symptoms)))
    add(gxe.ExpectTableRowCountToEqual(value={"$PARAMETER": f"{name}_rows"}))
    for column in KEY_COLUMNS:
        add(gxe.ExpectColumnValuesToNotBeNull(column=column))
    add(gxe.ExpectColumnValuesToMatchRegex(column="country_region_code", regex=r"^[A-Z]{2}$"))
    add(gxe.ExpectColumnValuesToMatchRegex(column="date", regex=r"^\d{4}-\d{2}-\d{2}$"))
    add(gxe.ExpectCompoundColumnsToBeUnique(column_list=["open_covid_region_code", "date"]))
    add(gxe.ExpectColumnValuesToBeInSet(column="date",
                                        value_set={"$PARAMETER": f"{name}_dates"}))
    add(gxe.ExpectColumnUniqueValueCountToBeBetween(
        column="date", min_value={"$PARAMETER": f"{name}_date_count"},
        max_value={"$PARAMETER": f"{name}_date_count"}))
    return suite(f"{SUITE_PREFIX}_{name}", expectations)


def values_suite(cfg: SymptomsConfig, symptoms: list[str]) -> gx.ExpectationSuite:
    t = cfg.reliability_tolerance
    weekly = Column("resolution") == "weekly"
    expectations: list[gxe.Expectation] = []
    add = expectations.append
    for column in ("value", "region_id", "area_km2", "ratio", "lower", "upper", "c"):
        add(gxe.ExpectColumnValuesToNotBeNull(column=column))
    add(gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0))
    add(gxe.ExpectColumnValuesToBeBetween(column="area_km2", min_value=cfg.min_area_km2))
    add(gxe.ExpectColumnValuesToBeInSet(column="reliable", value_set=[True]))
    add(gxe.ExpectColumnValuesToBeBetween(column="lower_over_ratio", min_value=1 - t))
    add(gxe.ExpectColumnValuesToBeBetween(column="upper_over_ratio", max_value=1 + t))
    add(gxe.ExpectColumnValuesToBeBetween(column="c", min_value=0, strict_min=True))
    add(gxe.ExpectColumnValuesToBeBetween(column="value_error", max_value=VALUE_SLACK))
    add(gxe.ExpectColumnValuesToBeInSet(column="resolution", value_set=["daily", "weekly"]))
    add(gxe.ExpectColumnValuesToBeInSet(column="symptom", value_set=list(symptoms)))
    add(gxe.ExpectColumnValuesToBeInSet(column="weekday", value_set=[0], row_condition=weekly))
    add(gxe.ExpectCompoundColumnsToBeUnique(
        column_list=["resolution", "open_covid_region_code", "date", "symptom"]))
    return suite(f"{SUITE_PREFIX}_values", expectations)


def published_values(candidate: Candidate, regions: pd.DataFrame) -> pd.DataFrame:
    """Every non-empty cell of the wide tables, joined with the passing value it was
    derived from (a cell derived from none has no ratio and is not reliable)."""
    frames = []
    for resolution, wide in (("daily", candidate.daily), ("weekly", candidate.weekly)):
        cols = [c for c in wide.columns if c.startswith("symptom:")]
        values = wide[cols].to_numpy(np.float64, na_value=np.nan)
        row, col = np.nonzero(~np.isnan(values))
        frames.append(pd.DataFrame({
            "open_covid_region_code": wide["open_covid_region_code"].to_numpy()[row],
            "date": wide["date"].to_numpy()[row],
            "value": values[row, col],
            "symptom": np.array([c[len("symptom:"):] for c in cols], dtype=object)[col],
            "resolution": resolution}))
    long = pd.concat(frames, ignore_index=True)
    codes = regions[["region_id", "open_covid_region_code", "area_km2"]]
    long = long.merge(codes, on="open_covid_region_code", how="left")
    audit = candidate.values[["resolution", "region_id", "date", "symptom", "ratio", "lower",
                              "upper", "reliable", "c"]]
    long = long.merge(audit, on=["resolution", "region_id", "date", "symptom"], how="left")
    ratio = long["ratio"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        long["lower_over_ratio"] = long["lower"] / ratio
        long["upper_over_ratio"] = long["upper"] / ratio
    long["value_error"] = (long["value"] - (long["c"] * np.maximum(ratio, 0)).round(2)).abs()
    long["weekday"] = pd.to_datetime(long["date"]).dt.day_of_week
    long["reliable"] = long["reliable"].eq(True).astype(object)
    return long


def parameters(candidate: Candidate, days: list[str], mondays: list[str]) -> dict[str, Any]:
    daily_regions = candidate.daily["open_covid_region_code"].nunique()
    weekly_regions = candidate.weekly["open_covid_region_code"].nunique()
    return {
        "daily_rows": int(daily_regions * len(days)) if daily_regions else 0,
        "daily_dates": days,
        "daily_date_count": len(days) if daily_regions else 0,
        "weekly_rows": int(weekly_regions * len(mondays)) if weekly_regions else 0,
        "weekly_dates": mondays,
        "weekly_date_count": len(mondays) if weekly_regions else 0,
    }


def suites(cfg: SymptomsConfig, symptoms: list[str]) -> list[gx.ExpectationSuite]:
    """The gate's suites: the daily and weekly wide tables', then the values'."""
    return [wide_suite("daily", symptoms), wide_suite("weekly", symptoms),
            values_suite(cfg, symptoms)]


def gate_rules(cfg: SymptomsConfig, symptoms: list[str]) -> str:
    """The digest of what the gate checks (:func:`dp_ops.gx.suites.rules_digest`): rows a
    gate under other rules validated are validated again."""
    return rules_digest(suites(cfg, symptoms))


def validate_symptoms_release(candidate: Candidate, regions: pd.DataFrame,
                              symptoms: list[str], *, days: list[str], mondays: list[str],
                              gx_dir: Path, cfg: SymptomsConfig, run_name: str,
                              tables: GateTables | None = None, digests: Tables | None = None,
                              carried: Tables | None = None) -> GateResult:
    """Validate the candidate's two wide tables and its published values with GX
    (``tables``: :func:`gate_tables` of the candidate, when the caller has them). With
    ``carried`` (what the gate of the release now published validated) and ``digests``
    (the tables' row digests), GX sees only the rows not carried and the whole-table
    rules are checked in pandas (:func:`dp_ops.gx.carried.validate_carrying`)."""
    runs = tables if tables is not None else gate_tables(candidate, regions, symptoms, cfg)
    params = parameters(candidate, days, mondays)
    if carried is None:
        return run_suites(runs, gx_dir=gx_dir, parameters=params, run_name=run_name)
    result: GateResult = validate_carrying(runs, gx_dir=gx_dir, parameters=params,
                                           run_name=run_name, digests=digests,
                                           carried=carried)
    return result


GateTables = list[tuple[gx.ExpectationSuite, str, pd.DataFrame]]


def gate_tables(candidate: Candidate, regions: pd.DataFrame, symptoms: list[str],
                cfg: SymptomsConfig) -> GateTables:
    """(suite, asset name, table) of each table the gate validates."""
    daily, weekly, values = suites(cfg, symptoms)
    return [(daily, "symptoms_daily", candidate.daily),
            (weekly, "symptoms_weekly", candidate.weekly),
            (values, "symptoms_values", published_values(candidate, regions))]
