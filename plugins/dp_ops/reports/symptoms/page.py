"""The symptoms release page's "What is published" section (docs/design.md, Outputs),
from the release manifest: rows and regions in the daily and weekly files, values
published by resolution, and the release's parameters. Its template is
``templates/published.html`` of this package; the rest of the page is the report-agnostic
:mod:`dp_ops.steps.page`, which this is passed to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dp_ops.api import PublishedSection
from dp_ops.templating import number, share


def published_values(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The section's values from a symptoms release's manifest (its ``rows``,
    ``suppression`` and ``parameters`` figures)."""
    rows = manifest.get("rows") or {}
    supp = manifest.get("suppression") or {}
    values = supp.get("values") or {}
    series = supp.get("series") or {}
    resolutions = []
    for res in ("daily", "weekly"):
        v = values.get(res) or {}
        total, pub = int(v.get("values") or 0), int(v.get("published") or 0)
        resolutions.append([res, f"{int(series.get(res) or 0):,}", f"{pub:,}", f"{total:,}",
                            share(pub, total)])
    params = manifest.get("parameters") or {}
    return {
        "daily_rows": int(rows.get("daily") or 0), "weekly_rows": int(rows.get("weekly") or 0),
        "daily_regions": int(supp.get("regions_in_daily_file") or 0),
        "weekly_regions": int(supp.get("regions_in_weekly_file") or 0),
        "resolutions": resolutions,
        "daily_series": int(supp.get("series_with_published_daily_values") or 0),
        "new_factors": int(supp.get("new_scaling_factors") or 0),
        "parameters": [[k, number(v)] for k, v in sorted(params.items())],
    }


published_symptoms = PublishedSection("dp_ops.reports.symptoms:published.html",
                                      published_values)
