"""What each release gate checks, rule by rule: the Great Expectations suites of both
reports, spelled out. The behaviour tests (test_mobility_suites.py,
test_symptoms_release.py) run GX on tables at each rule's boundary; this one pins the whole
rule set, so a rule dropped, loosened or pointed at another column is a failing test, not
a silently weaker gate. Changing a rule means changing this list, on purpose. Builds the
suites only (no validation); no test here is statistical."""

from __future__ import annotations

import os

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

from datetime import datetime, timedelta  # noqa: E402
from typing import Any  # noqa: E402

import great_expectations as gx  # noqa: E402
import pytest  # noqa: E402

from dp_ops.reports.mobility import suites as mobility  # noqa: E402
from dp_ops.reports.mobility.config import MobilityConfig  # noqa: E402
from dp_ops.reports.mobility.report import (  # noqa: E402
    CHANGE_COLUMNS,
    INTERVAL_COLUMNS,
    PUBLISHED_COLUMNS,
)
from dp_ops.reports.symptoms import suites as symptoms  # noqa: E402
from dp_ops.reports.symptoms.assemble import KEY_COLUMNS, header  # noqa: E402
from dp_ops.reports.symptoms.config import SymptomsConfig  # noqa: E402

# the arguments a rule is made of (GX's defaults for the rest are not ours to pin)
FIELDS = ("column", "column_list", "column_set", "exact_match", "min_value", "max_value",
          "strict_min", "strict_max", "regex", "strftime_format", "value_set", "type_list",
          "value", "row_condition", "column_A", "column_B", "or_equal", "ignore_row_if")
PUBLISHED_ROWS = {"type": "comparison", "column": {"name": "publish_row"}, "operator": "==",
                  "parameter": True}
WEEKLY = {"type": "comparison", "column": {"name": "resolution"}, "operator": "==",
          "parameter": "weekly"}


def rules(suite: gx.ExpectationSuite) -> list[tuple[str, dict[str, Any]]]:
    """Each expectation's type and the arguments of FIELDS it sets (defaults dropped:
    no condition, not strict, no bound; 0 is kept)."""
    out = []
    for e in suite.expectations:
        kw = e.dict()
        kept = {k: kw[k] for k in FIELDS if kw.get(k) is not None and kw.get(k) is not False}
        if kept.get("ignore_row_if") == "all_values_are_missing":  # GX's default
            del kept["ignore_row_if"]
        out.append((e.expectation_type, kept))
    return out


def between(column: str, lo: Any = None, hi: Any = None, **kw: Any) -> tuple[str, dict[str, Any]]:
    args: dict[str, Any] = {"column": column, **kw}
    if lo is not None:
        args["min_value"] = lo
    if hi is not None:
        args["max_value"] = hi
    return ("expect_column_values_to_be_between", args)


def published_value(column: str) -> dict[str, Any]:
    """The rows where ``column`` holds a value (a published change)."""
    return {"type": "nullity", "column": {"name": column}, "is_null": False}


def not_null(column: str, **kw: Any) -> tuple[str, dict[str, Any]]:
    return ("expect_column_values_to_not_be_null", {"column": column, **kw})


def test_the_mobility_row_rules() -> None:
    cfg = MobilityConfig(min_area_km2=3.0, min_contributors=100)
    published = {"row_condition": PUBLISHED_ROWS}
    assert mobility.internal_suite(cfg).name == "mobility_release_internal"
    assert rules(mobility.internal_suite(cfg)) == [
        ("expect_table_columns_to_match_set", {"column_set": [
            *PUBLISHED_COLUMNS, *INTERVAL_COLUMNS, "region_id", "level", "area_km2",
            "noisy_contributors", "residential_hours", "publish_row", "date_value"]}),
        *(rule for c in CHANGE_COLUMNS for rule in (
            not_null(f"{c}_low", row_condition=published_value(c)),
            not_null(f"{c}_high", row_condition=published_value(c)),
            ("expect_column_pair_values_a_to_be_greater_than_b", {
                "column_A": f"{c}_high", "column_B": f"{c}_low", "or_equal": True,
                "ignore_row_if": "either_value_is_missing"}))),
        not_null("region_id"), not_null("date"), not_null("date_value"),
        not_null("publish_row"),
        not_null("area_km2", **published),
        between("area_km2", 3.0, **published),
        not_null("noisy_contributors", **published),
        between("noisy_contributors", 100.0, **published),
        between("residential_hours", 0.0, 24.0, **published),
        between("date_value", datetime.combine(cfg.baseline_end, datetime.min.time()),
                strict_min=True, **published),
        between("date_value", datetime.combine(cfg.first_public_date, datetime.min.time()),
                **published),
    ]
    before_public = [(cfg.first_metric_date + timedelta(days=i)).isoformat()
                     for i in range((cfg.first_public_date - cfg.first_metric_date).days)]
    assert before_public[0] == "2020-01-01" and before_public[-1] == "2020-02-14"
    assert mobility.published_suite(cfg).name == "mobility_release_published"
    assert rules(mobility.published_suite(cfg)) == [
        ("expect_table_columns_to_match_ordered_list", {"column_list": list(PUBLISHED_COLUMNS)}),
        *(not_null(c) for c in PUBLISHED_COLUMNS[:9]),
        ("expect_column_values_to_match_regex",
         {"column": "country_region_code", "regex": r"^[A-Z]{2}$"}),
        ("expect_column_values_to_match_strftime_format",
         {"column": "date", "strftime_format": "%Y-%m-%d"}),
        ("expect_column_values_to_match_regex",
         {"column": "date", "regex": r"^\d{4}-\d{2}-\d{2}$"}),
        ("expect_column_values_to_not_be_in_set", {"column": "date",
                                                   "value_set": before_public}),
        *(rule for c in CHANGE_COLUMNS for rule in (
            ("expect_column_values_to_be_in_type_list",
             {"column": c, "type_list": ["Int64Dtype", "Int32Dtype", "int64", "int32"]}),
            between(c, -100.0, 1000.0))),
    ]


def test_the_mobility_table_rules() -> None:
    assert mobility.internal_keys_suite().name == "mobility_release_internal_keys"
    assert rules(mobility.internal_keys_suite()) == [
        ("expect_compound_columns_to_be_unique", {"column_list": ["region_id", "date"]}),
        ("expect_table_row_count_to_equal", {"value": {"$PARAMETER": "domain_rows"}}),
        ("expect_column_unique_value_count_to_be_between", {
            "column": "date_value", "min_value": {"$PARAMETER": "release_days"},
            "max_value": {"$PARAMETER": "release_days"}}),
    ]
    assert mobility.published_keys_suite().name == "mobility_release_published_keys"
    assert rules(mobility.published_keys_suite()) == [
        ("expect_table_row_count_to_equal", {"value": {"$PARAMETER": "published_rows"}}),
        ("expect_compound_columns_to_be_unique", {"column_list": [
            "iso_3166_2_code", "sub_region_1", "sub_region_2", "place_id", "date"]}),
    ]


def test_the_mobility_row_rules_follow_the_config() -> None:
    cfg = MobilityConfig(min_area_km2=4.5, min_contributors=250)
    got = dict((r[1]["column"], r[1].get("min_value")) for r in rules(mobility.internal_suite(cfg))
               if r[0] == "expect_column_values_to_be_between")
    assert got["area_km2"] == 4.5 and got["noisy_contributors"] == 250.0


@pytest.mark.parametrize("name", ["daily", "weekly"])
def test_the_symptoms_wide_table_rules(name: str) -> None:
    names = ["Fever", "Cough"]
    assert symptoms.wide_suite(name, names).name == f"symptoms_release_{name}"
    assert rules(symptoms.wide_suite(name, names)) == [
        ("expect_table_columns_to_match_ordered_list", {"column_list": header(names)}),
        ("expect_table_row_count_to_equal", {"value": {"$PARAMETER": f"{name}_rows"}}),
        *(not_null(c) for c in KEY_COLUMNS),
        ("expect_column_values_to_match_regex",
         {"column": "country_region_code", "regex": r"^[A-Z]{2}$"}),
        ("expect_column_values_to_match_regex",
         {"column": "date", "regex": r"^\d{4}-\d{2}-\d{2}$"}),
        ("expect_compound_columns_to_be_unique",
         {"column_list": ["open_covid_region_code", "date"]}),
        ("expect_column_values_to_be_in_set",
         {"column": "date", "value_set": {"$PARAMETER": f"{name}_dates"}}),
        ("expect_column_unique_value_count_to_be_between", {
            "column": "date", "min_value": {"$PARAMETER": f"{name}_date_count"},
            "max_value": {"$PARAMETER": f"{name}_date_count"}}),
    ]


def test_the_symptoms_value_rules() -> None:
    cfg = SymptomsConfig(min_area_km2=3.0, reliability_tolerance=0.25)
    assert symptoms.values_suite(cfg, ["Fever"]).name == "symptoms_release_values"
    assert rules(symptoms.values_suite(cfg, ["Fever", "Cough"])) == [
        *(not_null(c) for c in ("value", "region_id", "area_km2", "ratio", "lower", "upper",
                                "c")),
        between("value", 0.0),
        between("area_km2", 3.0),
        ("expect_column_values_to_be_in_set", {"column": "reliable", "value_set": [True]}),
        between("lower_over_ratio", 0.75),
        between("upper_over_ratio", hi=1.25),
        between("c", 0.0, strict_min=True),
        between("value_error", hi=1e-9),
        ("expect_column_values_to_be_in_set",
         {"column": "resolution", "value_set": ["daily", "weekly"]}),
        ("expect_column_values_to_be_in_set",
         {"column": "symptom", "value_set": ["Fever", "Cough"]}),
        ("expect_column_values_to_be_in_set",
         {"column": "weekday", "value_set": [0], "row_condition": WEEKLY}),
        ("expect_compound_columns_to_be_unique",
         {"column_list": ["resolution", "open_covid_region_code", "date", "symptom"]}),
    ]
    loose = SymptomsConfig(min_area_km2=5.0, reliability_tolerance=0.1)
    got = {r[1]["column"]: r[1] for r in rules(symptoms.values_suite(loose, ["Fever"]))
           if r[0] == "expect_column_values_to_be_between"}
    assert got["area_km2"]["min_value"] == 5.0
    assert got["lower_over_ratio"]["min_value"] == pytest.approx(0.9, abs=1e-12)
    assert got["upper_over_ratio"]["max_value"] == pytest.approx(1.1, abs=1e-12)



def test_the_mobility_gate_counts_come_from_the_table_itself() -> None:
    import pandas as pd

    from dp_ops.reports.mobility.suites import _internal_parameters

    full = pd.DataFrame({
        "region_id": ["a", "b", "a", "b", "a", "b"],
        "date": ["2020-03-01", "2020-03-01", "2020-03-02", "2020-03-02", "2020-03-04",
                 "2020-03-04"],
        "date_value": pd.to_datetime(["2020-03-01", "2020-03-01", "2020-03-02",
                                      "2020-03-02", "2020-03-04", "2020-03-04"]),
        "publish_row": [True, False, None, True, True, False]})
    assert _internal_parameters(full) == {"domain_rows": 6, "release_days": 4,
                                          "published_rows": 3}
    assert _internal_parameters(pd.DataFrame()) == {"domain_rows": 0, "release_days": 0,
                                                    "published_rows": 0}
    # an undecided row (NA) is not published, whatever the column's dtype
    for undecided in (pd.array([True, False, pd.NA, True, True, False], dtype="boolean"),
                      [1.0, 0.0, float("nan"), 1.0, 1.0, 0.0]):
        assert _internal_parameters(full.assign(publish_row=undecided))["published_rows"] == 3
    no_regions = full.drop(columns=["region_id"]).assign(date_value=pd.NaT)
    assert _internal_parameters(no_regions) == {"domain_rows": 0, "release_days": 0,
                                                "published_rows": 3}
    no_dates = full.drop(columns=["date", "date_value", "publish_row"])
    assert _internal_parameters(no_dates) == {"domain_rows": 0, "release_days": 0,
                                              "published_rows": 0}


def test_the_internal_tables_column_rule_names_at_least_its_columns() -> None:
    """The internal table carries the published columns and the internal ones, and may
    carry more (the rule is "at least these", as Data Docs shows it: an exact_match left
    unset would be rendered as "exactly")."""
    import great_expectations.expectations as gxe

    from dp_ops.reports.mobility.config import MobilityConfig
    from dp_ops.reports.mobility.report import PUBLISHED_COLUMNS
    from dp_ops.reports.mobility.suites import INTERNAL_EXTRA_COLUMNS, internal_suite

    (rule,) = [e for e in internal_suite(MobilityConfig()).expectations
               if isinstance(e, gxe.ExpectTableColumnsToMatchSet)]
    assert rule.exact_match is False
    assert sorted(rule.column_set or []) == sorted(PUBLISHED_COLUMNS + INTERVAL_COLUMNS
                                                   + INTERNAL_EXTRA_COLUMNS)
