"""The mobility report's expectation suites (the release gate, run by
:func:`dp_ops.gx.runner.run_suites`).

Nothing is published unless both tables of a candidate release pass, each checked by
two suites: a row-level one (every rule that holds for a set of rows when it holds for
each row) on the rows of the days not validated before, and a table-level one (row
counts, unique keys, every date for every region) on the key columns of the whole
release (:func:`validate_mobility_release`):

- ``published``: exactly the rows and columns that go to ``Global_Mobility_Report.csv``
  (Google's 15-column header, string keys, nullable ``Int64`` percent changes);
- ``internal``: the whole release domain, one row per (region, date) for every region of
  the release and every date of it, published or not, with the noisy values and public
  region attributes the publication decisions were taken on.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd
from great_expectations.expectations.row_conditions import Column

from dp_ops.gx.carried import check_whole, split_suite
from dp_ops.gx.result import GateResult
from dp_ops.gx.runner import run_suites
from dp_ops.gx.suites import day_start, rules_digest, suite
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.mobility.report import (
    CHANGE_COLUMNS,
    INTERVAL_COLUMNS,
    PUBLISHED_COLUMNS,
    ROW_KEY,
)

INTERNAL_EXTRA_COLUMNS: tuple[str, ...] = (
    "region_id",
    "level",
    "area_km2",
    "noisy_contributors",
    "residential_hours",
    "publish_row",
    "date_value",
)

# A percent change is 100 * (value / baseline - 1) >= -100; the top guards against a
# near-zero baseline slipping past suppression.
MIN_CHANGE_PERCENT = -100
MAX_CHANGE_PERCENT = 1000
# Type names as GX's pandas type check resolves them: "Int64Dtype" is pandas' nullable
# integer (NA = suppressed), "int64"/"int32" a column with nothing suppressed.
CHANGE_COLUMN_TYPES: tuple[str, ...] = ("Int64Dtype", "Int32Dtype", "int64", "int32")

SUITE_PUBLISHED = "mobility_release_published"
SUITE_INTERNAL = "mobility_release_internal"
SUITE_PUBLISHED_KEYS = "mobility_release_published_keys"
SUITE_INTERNAL_KEYS = "mobility_release_internal_keys"
# What identifies a row of the published CSV (unique over the release).
PUBLISHED_KEY_COLUMNS = ("iso_3166_2_code", "sub_region_1", "sub_region_2", "place_id", "date")
INTERNAL_KEY_COLUMNS = ("region_id", "date", "date_value")

# Rows that appear in the published CSV. ``Column(...) == True`` builds a GX condition
# object, it is not a Python comparison.
_PUBLISHED_ROWS = Column("publish_row") == True  # noqa: E712


def published_suite(cfg: MobilityConfig) -> gx.ExpectationSuite:
    """Row-level expectations on the table written to ``Global_Mobility_Report.csv``
    (each holds for a set of rows when it holds for each row: checked on the rows of the
    days not validated before); the table-level ones are :func:`published_keys_suite`."""
    expectations: list[gxe.Expectation] = []
    add = expectations.append
    add(gxe.ExpectTableColumnsToMatchOrderedList(column_list=list(PUBLISHED_COLUMNS)))
    for column in ROW_KEY:
        # "Not applicable" is the empty string, never a null.
        add(gxe.ExpectColumnValuesToNotBeNull(column=column))
    # The regex checks double as type checks: GX 1.24's type-list check cannot name
    # pandas 3's default "str" dtype, and a non-string column fails a regex expectation.
    add(gxe.ExpectColumnValuesToMatchRegex(column="country_region_code", regex=r"^[A-Z]{2}$"))
    add(gxe.ExpectColumnValuesToMatchStrftimeFormat(column="date", strftime_format="%Y-%m-%d"))
    add(gxe.ExpectColumnValuesToMatchRegex(column="date", regex=r"^\d{4}-\d{2}-\d{2}$"))
    # Checked on the CSV itself too, not only through the internal publish_row flags:
    # no day before the public start (so none of the baseline window) is published.
    add(gxe.ExpectColumnValuesToNotBeInSet(column="date", value_set=_days_before_public(cfg)))
    for column in CHANGE_COLUMNS:
        add(
            gxe.ExpectColumnValuesToBeInTypeList(
                column=column, type_list=list(CHANGE_COLUMN_TYPES)
            )
        )
        add(
            gxe.ExpectColumnValuesToBeBetween(
                column=column, min_value=MIN_CHANGE_PERCENT, max_value=MAX_CHANGE_PERCENT
            )
        )
    return suite(SUITE_PUBLISHED, expectations)


def internal_suite(cfg: MobilityConfig) -> gx.ExpectationSuite:
    """Row-level expectations on the release domain (published and unpublished
    region-days: the schema and the publication rules), checked on the rows of the days
    not validated before; the table-level ones are :func:`internal_keys_suite`."""
    expectations: list[gxe.Expectation] = []
    add = expectations.append
    add(
        gxe.ExpectTableColumnsToMatchSet(
            column_set=list(PUBLISHED_COLUMNS + INTERVAL_COLUMNS + INTERNAL_EXTRA_COLUMNS),
            exact_match=False,
        )
    )
    # Every published change has its interval (the sidecar file), low <= high.
    for column in CHANGE_COLUMNS:
        published_value = Column(column).is_not_null()
        for end in ("low", "high"):
            add(gxe.ExpectColumnValuesToNotBeNull(column=f"{column}_{end}",
                                                  row_condition=published_value))
        add(gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A=f"{column}_high", column_B=f"{column}_low", or_equal=True,
            ignore_row_if="either_value_is_missing"))
    for column in ("region_id", "date", "date_value", "publish_row"):
        add(gxe.ExpectColumnValuesToNotBeNull(column=column))

    # Publication rules, on the rows that reach the CSV. Range checks skip nulls, so a
    # missing area or contributor count is checked separately.
    where_published = _PUBLISHED_ROWS
    add(gxe.ExpectColumnValuesToNotBeNull(column="area_km2", row_condition=where_published))
    add(
        gxe.ExpectColumnValuesToBeBetween(
            column="area_km2", min_value=cfg.min_area_km2, row_condition=where_published
        )
    )
    add(
        gxe.ExpectColumnValuesToNotBeNull(
            column="noisy_contributors", row_condition=where_published
        )
    )
    add(
        gxe.ExpectColumnValuesToBeBetween(
            column="noisy_contributors",
            min_value=cfg.min_contributors,
            row_condition=where_published,
        )
    )
    # Null = residential not estimable that day (its change is then suppressed).
    add(
        gxe.ExpectColumnValuesToBeBetween(
            column="residential_hours", min_value=0, max_value=24, row_condition=where_published
        )
    )
    add(
        gxe.ExpectColumnValuesToBeBetween(
            column="date_value",
            min_value=day_start(cfg.baseline_end),
            strict_min=True,
            row_condition=where_published,
        )
    )
    add(
        gxe.ExpectColumnValuesToBeBetween(
            column="date_value",
            min_value=day_start(cfg.first_public_date),
            row_condition=where_published,
        )
    )
    return suite(SUITE_INTERNAL, expectations)


def published_keys_suite() -> gx.ExpectationSuite:
    """Table-level expectations on the published table's key columns, over the whole
    release. Run-time parameter ``published_rows``: the number of ``publish_row`` rows of
    the internal table, so that the CSV holds as many region-days as the gate checked."""
    return suite(SUITE_PUBLISHED_KEYS, [
        gxe.ExpectTableRowCountToEqual(value={"$PARAMETER": "published_rows"}),
        gxe.ExpectCompoundColumnsToBeUnique(column_list=list(PUBLISHED_KEY_COLUMNS)),
    ])


def internal_keys_suite() -> gx.ExpectationSuite:
    """Table-level expectations on the release domain's key columns, over the whole
    release. Run-time parameters: ``domain_rows`` = distinct regions x distinct dates of
    the table (with compound uniqueness of (region_id, date) this makes every date present
    for every region), and ``release_days`` = days from the first to the last date (an
    unbroken daily series)."""
    return suite(SUITE_INTERNAL_KEYS, [
        gxe.ExpectCompoundColumnsToBeUnique(column_list=["region_id", "date"]),
        gxe.ExpectTableRowCountToEqual(value={"$PARAMETER": "domain_rows"}),
        gxe.ExpectColumnUniqueValueCountToBeBetween(
            column="date_value",
            min_value={"$PARAMETER": "release_days"},
            max_value={"$PARAMETER": "release_days"},
        ),
    ])


def _days_before_public(cfg: MobilityConfig) -> list[str]:
    """Every metric day before the public series starts, baseline window included."""
    n = (cfg.first_public_date - cfg.first_metric_date).days
    return [(cfg.first_metric_date + timedelta(days=i)).isoformat() for i in range(n)]


def _internal_parameters(internal: pd.DataFrame) -> dict[str, int]:
    """Counts the suites compare against, taken from the table's own distinct values."""
    regions = internal["region_id"].nunique() if "region_id" in internal else 0
    dates = internal["date"].nunique() if "date" in internal else 0
    days = 0
    if "date_value" in internal and internal["date_value"].notna().any():
        values = pd.to_datetime(internal["date_value"])
        days = int((values.max() - values.min()).days) + 1
    published = 0
    if "publish_row" in internal:
        published = int(internal["publish_row"].fillna(False).astype(bool).sum())
    return {
        "domain_rows": int(regions * dates),
        "release_days": days,
        "published_rows": published,
    }


def row_rules(cfg: MobilityConfig) -> str:
    """The digest of the row-level rules: a day validated under other rules (another
    config) is validated again."""
    return rules_digest([internal_suite(cfg), published_suite(cfg)])


def _key_frame(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """The key columns the table-level suites read (those present: a missing one fails
    the row-level suites' column checks by name, and the uniqueness check here)."""
    return frame[[c for c in columns if c in frame.columns]]


def validate_mobility_release(
    internal: pd.DataFrame,
    published: pd.DataFrame,
    *,
    gx_dir: Path,
    cfg: MobilityConfig,
    run_name: str,
    new_dates: set[str] | None = None,
) -> GateResult:
    """Validate a candidate mobility release with Great Expectations.

    Builds (or reuses) a file Data Context at ``gx_dir``, runs four suites through
    checkpoints, renders the results into the local Data Docs site, and returns what
    failed. The row-level suites (:func:`internal_suite`, :func:`published_suite`) see
    the rows dated in ``new_dates`` (every row when it is None): the days whose per-day
    files no earlier gate validated under the same rules; the table-level suites
    (:func:`internal_keys_suite`, :func:`published_keys_suite`) see the key columns of
    the whole release, with GX when ``new_dates`` is None, else in pandas
    (:func:`dp_ops.gx.carried.check_whole`: the same rules, the same failure lines,
    without a GX run over a table that grows every day). ``run_name`` labels the run in
    Data Docs (e.g. the Airflow run id). Raises nothing on failed expectations: call
    :func:`require_pass` to stop the release.
    """
    keys = [(internal_keys_suite(), "internal_keys", _key_frame(internal, INTERNAL_KEY_COLUMNS)),
            (published_keys_suite(), "published_keys",
             _key_frame(published, PUBLISHED_KEY_COLUMNS))]
    parameters = _internal_parameters(internal)
    if new_dates is None:
        return run_suites(
            [(internal_suite(cfg), "internal", internal),
             (published_suite(cfg), "published", published), *keys],
            gx_dir=gx_dir, parameters=parameters, run_name=run_name)
    # the key suites are whole-table rules: checked in pandas over the whole release
    # (dp_ops.gx.carried.check_whole), not by GX on a table that grows every day
    rows = [(internal_suite(cfg), "internal", internal[internal["date"].isin(new_dates)]),
            (published_suite(cfg), "published", published[published["date"].isin(new_dates)])]
    splits = [split_suite(s) for s, _, _ in keys]
    if any(s is None for s in splits):
        return run_suites([*rows, *keys], gx_dir=gx_dir, parameters=parameters,
                          run_name=run_name)
    failed = [f for s, (_, _, frame) in zip(splits, keys, strict=True) if s is not None
              for f in check_whole(s, frame, parameters)]
    result = run_suites(rows, gx_dir=gx_dir, parameters=parameters, run_name=run_name)
    return GateResult(success=result.success and not failed,
                      failed=(*failed, *result.failed), data_docs_index=result.data_docs_index,
                      evaluated=result.evaluated + sum(len(s.whole) for s in splits if s),
                      validation_pages=result.validation_pages)
