"""The symptoms release page's "What is published" section (docs/design.md, Outputs),
from the release manifest: rows and regions in the daily and weekly files, values
published by resolution, and the release's parameters. The rest of the page is the
report-agnostic :mod:`dp_ops.steps.page`, which this is passed to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dp_ops.steps.page import card, escape, number, share, table


def published_symptoms(manifest: Mapping[str, Any]) -> str:
    """The ``<section id="published">`` of a symptoms release's page (its ``rows``,
    ``suppression`` and ``parameters`` figures)."""
    rows = manifest.get("rows") or {}
    supp = manifest.get("suppression") or {}
    values = supp.get("values") or {}
    series = supp.get("series") or {}
    out = ['<section id="published"><h2>What is published</h2>', '<div class="cards">',
           card(f"{int(rows.get('daily') or 0):,}", "rows in the daily file"),
           card(f"{int(rows.get('weekly') or 0):,}", "rows in the weekly file"),
           card(f"{int(supp.get('regions_in_daily_file') or 0):,}",
                "regions in the daily file"),
           card(f"{int(supp.get('regions_in_weekly_file') or 0):,}",
                "regions in the weekly file"), "</div>"]
    body = []
    for res in ("daily", "weekly"):
        v = values.get(res) or {}
        total, pub = int(v.get("values") or 0), int(v.get("published") or 0)
        body.append([escape(res), f"{int(series.get(res) or 0):,}", f"{pub:,}", f"{total:,}",
                     share(pub, total)])
    out += ["<h3>Values by resolution</h3>",
            table(["resolution", "series decided", "values published", "values",
                   "share published"], body, {1, 2, 3, 4}),
            f"<p>{int(supp.get('series_with_published_daily_values') or 0):,} series have "
            "daily values published. A (region, symptom) series goes to the daily file when "
            "its daily values are mostly reliable, else only to the weekly file; a value "
            "that fails the reliability rule is not published. "
            f"{int(supp.get('new_scaling_factors') or 0):,} scaling factors were fixed by "
            "this release.</p>"]
    params = manifest.get("parameters") or {}
    if params:
        out += ["<h3>Parameters</h3>", table(
            ["parameter", "value"],
            [[escape(k), number(v)] for k, v in sorted(params.items())], {1})]
    out.append("</section>")
    return "\n".join(out)
