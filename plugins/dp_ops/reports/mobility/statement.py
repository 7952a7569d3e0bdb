"""The mobility paragraphs of a release's data statement (:mod:`dp_ops.steps.data_statement`),
from the public config and the release's manifest only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dp_ops.api import StatementParts
from dp_ops.reports.mobility.charts import CATEGORY_LABELS
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.steps.charts import LEVEL_LABELS


def published_table(manifest: Mapping[str, Any]) -> str:
    """Region-days by outcome, and per level and category the share of eligible
    region-days whose change is published (the manifest's ``suppression``)."""
    supp = manifest.get("suppression") or {}
    reasons = {str(k): int(v) for k, v in (supp.get("row_reasons") or {}).items()}
    total = sum(reasons.values())
    lines = [f"Region-days in the release: {total:,}; published rows: "
             f"{reasons.get('published', 0):,}.", "",
             "| outcome | region-days |", "|---|---:|"]
    lines += [f"| {k.replace('_', ' ')} | {v:,} |" for k, v in sorted(reasons.items())]
    shares = supp.get("published_share_of_eligible_by_level") or {}
    if shares:
        cats = [c for c in CATEGORY_LABELS if any(c in v for v in shares.values())]
        lines += ["", "Share of the region-days that passed the area and contributor rules "
                  "whose change is published:", "",
                  "| level | " + " | ".join(CATEGORY_LABELS[c] for c in cats) + " |",
                  "|---|" + "---:|" * len(cats)]
        for level, values in sorted(shares.items(), key=lambda kv: int(kv[0])):
            label = LEVEL_LABELS.get(int(level), f"Level {level}")
            lines.append(f"| {label} | " + " | ".join(
                f"{100 * float(values.get(c, 0.0)):.1f}%" for c in cats) + " |")
    return "\n".join(lines)


def mobility_statement(cfg: MobilityConfig, manifest: Mapping[str, Any]) -> StatementParts:
    window = (manifest.get("inputs") or {}).get("baseline_window") or [
        cfg.baseline_start.isoformat(), cfg.baseline_end.isoformat()]
    updates = manifest.get("method_updates") or []
    points, miss = cfg.max_error_points, cfg.max_error_probability
    return StatementParts(
        what=(
            "For each region and day, the change in percent against a baseline of visits "
            "to five kinds of places (retail and recreation, grocery and pharmacy, parks, "
            "transit stations, workplaces) and of the time spent at home (residential), "
            "in the columns of Google's Community Mobility Reports. The baseline of a day "
            "is the median of its weekday over the five weeks "
            f"{window[0]} to {window[1]}, computed once from noisy values and frozen. A "
            "change is a whole number of points (rounded half up); an empty cell is a "
            "withheld value. "
            + (f"Method updates in effect: {len(updates)} (listed in `manifest.json`, "
               "`method_updates`)." if updates else "No method update is in effect.")),
        bounds=(
            "Before any noise, each user-day is bounded: it counts once among a region's "
            f"contributors, in at most {cfg.max_place_pairs} (region, place category) "
            "pairs of the place counts, at a workplace only after at least "
            f"{cfg.workplace_min_hours:g} hour(s) there, and adds between 0 and 24 hours "
            f"at home (on a grid of {cfg.residential_grid_per_hour} units an hour) to the "
            "residential sum. Visits past the bound are dropped, chosen by a keyed hash, "
            "not by the user."),
        thresholds=(
            f"A region-day with fewer than {cfg.min_contributors} contributing users (a "
            "noisy count) is not published.",),
        rule=(
            f"A change is published only if, whatever the true values are, the probability "
            f"that it is published and more than {points:g} points from the true change is "
            f"under {100 * miss:g}%. The decision inverts an exact test of the ratio of the "
            "day's value to its baseline, built from the exact law of the day's noise and a "
            "bound on the noisy baseline's error that holds for any true values; the whole "
            "probability is spent on that one event."),
        published=published_table(manifest),
        intervals=(
            "`Global_Mobility_Report_intervals.csv` (and `.parquet`) has the rows of "
            "`Global_Mobility_Report.csv` in the same order and, for each category, "
            "`<category>_percent_change_from_baseline_low` and `_high`: the ends, in points, "
            f"of an interval that holds the true change with probability at least "
            f"{100 * (1 - miss):g}% whatever the true values are. It is the set of changes "
            "the test that decides publication does not reject, rounded outwards to whole "
            "points; it is empty where the change is. Every point of it lies within "
            f"{points:g} points of the published change. It is about the change of the "
            "bounded counts (after contribution bounding), not of unbounded ones."),
        biases=(
            "Contribution bounding lowers counts: the visits past a user-day's bound are "
            "not counted, so days when heavy users visit many places are undercounted more "
            "than quiet days. A change compares two bounded counts, so the bias cancels "
            "where the dropped share is the same on the day and in its baseline, and not "
            "otherwise. Small regions are withheld more often (their noise is large "
            "against their counts), so the published values over-represent large regions. "
            "The project's demo measures these against its synthetic truth (`make demo`, "
            "results file `benchmarks/results/demo.md`)."),
    )
