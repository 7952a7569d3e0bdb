"""The baseline is the median of the five same-weekday values, and the row rules suppress a
region-day exactly below the area and contributor minimums: small hand-built frames
through the pipeline's own functions (``compute_baseline``, ``apply_row_rules``), so that
a mean instead of a median, or a minimum off by one, fails here in the fast tier (issue
35's critical mutants). No test here is statistical."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest

from dp_ops.reports.mobility.baseline import compute_baseline
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.mobility.report import (
    CHANGE_COLUMNS,
    INTERVAL_COLUMNS,
    KEY_COLUMNS,
    apply_row_rules,
)

CFG = MobilityConfig()


def test_the_baseline_is_the_median_of_the_five_days() -> None:
    """Five Tuesdays of one series whose median (30) is far from their mean (192): the
    baseline and both interval ends are the medians, row by row."""
    tuesdays = [d for d in CFG.baseline_dates if d.weekday() == 1]
    assert len(tuesdays) == 5
    values = [500.0, 10.0, 400.0, 30.0, 20.0]
    window = pd.DataFrame({
        "level": np.int8(2), "region_id": "R", "category": "parks", "weekday": 1,
        "date": [pd.Timestamp(d) for d in tuesdays],
        "value": values,
        "lo": [v - 5 for v in values],
        "hi": [v + 7 for v in values],
        "cells": 1, "epsilon": CFG.place_epsilon, "sensitivity": 1,
    })
    (row,) = compute_baseline(window, residential_miss_per_side=0.0).itertuples()
    assert (row.baseline, row.baseline_lo, row.baseline_hi) == (30.0, 25.0, 37.0)


def _rows(area: float, contributors: int) -> pd.DataFrame:
    regions = pd.DataFrame({"region_id": ["R"], "level": [2], "area_km2": [area],
                            **{c: [""] for c in KEY_COLUMNS}})
    changes = pd.DataFrame({"level": np.array([2], np.int8), "region_id": ["R"],
                            "contributors": [contributors], "residential": [12.0],
                            **{c: [5.0] for c in CHANGE_COLUMNS},
                            **{c: [1.0 if c.endswith("_low") else 9.0]
                               for c in INTERVAL_COLUMNS}})
    day = CFG.first_public_date + timedelta(days=1)
    assert isinstance(day, date)
    return apply_row_rules(changes, regions, day, CFG)


@pytest.mark.parametrize(("area", "contributors", "reason"), [
    (CFG.min_area_km2, CFG.min_contributors, "published"),
    (CFG.min_area_km2, CFG.min_contributors - 1, "contributors_under_minimum"),
    (CFG.min_area_km2 - 0.01, CFG.min_contributors, "area_under_minimum"),
])
def test_a_region_day_is_suppressed_exactly_below_the_minimums(
        area: float, contributors: int, reason: str) -> None:
    """At the minimums (3 km^2, 100 DP-contributing users) a region-day is published;
    one user fewer, or 0.01 km^2 less, and every value of it is withheld."""
    (row,) = _rows(area, contributors).to_dict("records")
    assert row["row_reason"] == reason
    assert row["publish_row"] == (reason == "published")
    published = [row[c] for c in CHANGE_COLUMNS if not pd.isna(row[c])]
    assert published == ([5] * len(CHANGE_COLUMNS) if reason == "published" else [])
    # a withheld row's intervals are withheld with its values
    intervals = [row[c] for c in INTERVAL_COLUMNS if not pd.isna(row[c])]
    assert intervals == ([1, 9] * len(CHANGE_COLUMNS) if reason == "published" else [])
