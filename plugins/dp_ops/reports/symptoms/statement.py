"""The symptoms paragraphs of a release's data statement (:mod:`dp_ops.steps.data_statement`),
from the public config and the release's manifest only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dp_ops.api import StatementParts
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.reports.symptoms.reliability import INTERVAL_LEVEL


def published_table(manifest: Mapping[str, Any]) -> str:
    supp = manifest.get("suppression") or {}
    values = supp.get("values") or {}
    series = supp.get("series") or {}
    lines = [f"Series (region, symptom) decided daily: {int(series.get('daily', 0)):,}; "
             f"weekly: {int(series.get('weekly', 0)):,}.", "",
             "| resolution | values in the domain | published | share published |",
             "|---|---:|---:|---:|"]
    for res in ("daily", "weekly"):
        v = values.get(res) or {}
        lines.append(f"| {res} | {int(v.get('values', 0)):,} | {int(v.get('published', 0)):,}"
                     f" | {100 * float(v.get('published_share', 0.0)):.2f}% |")
    return "\n".join(lines)


def symptoms_statement(cfg: SymptomsConfig, manifest: Mapping[str, Any]) -> StatementParts:
    t, p = cfg.reliability_tolerance, cfg.reliability_probability
    return StatementParts(
        what=(
            "For each region and day (daily files) or week (weekly files, Monday to "
            "Sunday, dated by the Monday), and each symptom, the share of users who "
            "searched for the symptom among the users who searched anything, in the "
            "columns of Google's Search Trends Symptoms dataset. Values are scaled per "
            "region and resolution by a factor c fixed at the region's first release (its "
            f"largest value then was {cfg.scale_to:g}; `scaling_factors.parquet`), so they "
            "compare within a region and resolution, not across regions. An empty cell is "
            "a withheld value."),
        bounds=(
            "Before any noise, each user-day counts at most once in the number of users "
            "who searched anything (B) of a region, and in at most "
            f"{cfg.max_symptoms_per_day} symptoms (A), once each, in that same region; "
            "symptoms past the bound are dropped, chosen by a keyed hash. So the true "
            "counts satisfy 0 <= a <= b."),
        thresholds=(
            "A series is published daily only where at most "
            f"{100 * cfg.daily_unreliable_share:g}% of its daily values fail the rule (then "
            f"a majority vote over the {cfg.granularity_neighbours} regions of its level "
            "nearest in volume); otherwise weekly.",),
        rule=(
            f"A value is published only if, whatever the true counts are, the probability "
            f"that it is published and the true share is more than {100 * t:g}% away from "
            f"it is at most {100 * (1 - p):g}%. The decision inverts an exact test (level "
            f"{cfg.reliability_test_level:g}) of the true ratio, from the exact joint law of "
            "both noises. Of the values that pass, each day or week and level publishes "
            "the largest set whose expected share within the tolerance is at least "
            f"{100 * (1 - cfg.reliability_test_level):g}%, estimated from a fit of the "
            "law of that day's or week's true shares to its noisy values, so that the "
            "promise also holds among the values published (an estimate, not a "
            "worst-case bound)."),
        published=published_table(manifest),
        intervals=(
            "`<year>_<CC>_daily_symptoms_dataset_intervals.csv` and the weekly one (and "
            "`.parquet`) have one row per published value: the wide file's key columns, "
            "`symptom`, `value` and `low`/`high`, the ends of an interval that holds c "
            "times the true share with probability at least "
            f"{100 * INTERVAL_LEVEL:g}% whatever the true counts are (the ratios the same "
            f"exact test does not reject at level {1 - INTERVAL_LEVEL:.2g}, rounded outwards "
            "to the cent), widened to also hold the value's 95% posterior interval under "
            "the same fit as the selection. They are about the counts after contribution "
            "bounding. The first part holds for every value before it is known whether it "
            "is published; the second estimates it among the published values, where "
            "values of rarely published series (small regions, weekly values) are "
            "published more often when their noise happened to be large."),
        biases=(
            f"Contribution bounding lowers A, the count of searchers of a symptom, for "
            f"users who search more than {cfg.max_symptoms_per_day} symptoms a day, and "
            "does not lower B: published values are biased low where many users search "
            "many symptoms, and this is inherent to bounding each user's contribution. The "
            "scaling factor c is computed from noisy values, so a region's values share "
            "its error. The project's demo measures the bias against its synthetic truth "
            "(`make demo`, results file `benchmarks/results/demo.md`)."),
    )
