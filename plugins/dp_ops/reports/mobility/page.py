"""The mobility release page's "What is published" section (docs/design.md, Outputs),
from the release manifest: region-days published, region-days by outcome, and per level
and category the share of eligible region-days whose change is published. The rest of
the page is the report-agnostic :mod:`dp_ops.steps.page`, which this is passed to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dp_ops.reports.mobility.charts import CATEGORY_LABELS
from dp_ops.steps.charts import LEVEL_LABELS
from dp_ops.steps.page import card, escape, share, table

ROW_REASONS = {
    "published": "published",
    "all_values_unreliable": "no change reliable enough (all six suppressed)",
    "contributors_under_minimum": "too few contributing users",
    "area_under_minimum": "region under the minimum area",
}


def published_mobility(manifest: Mapping[str, Any]) -> str:
    """The ``<section id="published">`` of a mobility release's page (its ``rows`` and
    ``suppression`` figures)."""
    rows = manifest.get("rows") or {}
    supp = manifest.get("suppression") or {}
    reasons = {str(k): int(v) for k, v in (supp.get("row_reasons") or {}).items()}
    domain = int(rows.get("domain") or sum(reasons.values()))
    published = int(rows.get("published") or 0)
    out = ['<section id="published"><h2>What is published</h2>', '<div class="cards">',
           card(f"{published:,}", "region-days published"),
           card(f"{domain:,}", "region-days in the release"),
           card(share(published, domain), "share published"), "</div>"]
    order = sorted(reasons, key=lambda k: (k != "published", -reasons[k], k))
    out += ["<h3>Region-days by outcome</h3>", table(
        ["outcome", "region-days", "share"],
        [[escape(ROW_REASONS.get(k, k)), f"{reasons[k]:,}", share(reasons[k], domain)]
         for k in order], {1, 2})]
    shares = supp.get("published_share_of_eligible_by_level") or {}
    if shares:
        categories = sorted({c for v in shares.values() for c in v},
                            key=lambda c: (list(CATEGORY_LABELS).index(c)
                                           if c in CATEGORY_LABELS else 99, c))
        body = [[escape(LEVEL_LABELS.get(int(level), f"Level {level}")),
                 *[share(float(values.get(c, 0.0)), 1.0) for c in categories]]
                for level, values in sorted(shares.items(), key=lambda kv: int(kv[0]))]
        out += ["<h3>Changes published, as a share of the region-days that passed the area "
                "and contributor rules</h3>",
                table(["level", *[CATEGORY_LABELS.get(c, c) for c in categories]], body,
                      set(range(1, len(categories) + 1)))]
    out.append("</section>")
    return "\n".join(out)
