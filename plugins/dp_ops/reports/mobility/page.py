"""The mobility release page's "What is published" section (docs/design.md, Outputs),
from the release manifest: region-days published, region-days by outcome, and per level
and category the share of eligible region-days whose change is published. Its template is
``templates/published.html`` of this package; the rest of the page is the report-agnostic
:mod:`dp_ops.steps.page`, which this is passed to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dp_ops.api import PublishedSection
from dp_ops.reports.mobility.charts import CATEGORY_LABELS
from dp_ops.steps.charts import LEVEL_LABELS
from dp_ops.templating import share

ROW_REASONS = {
    "published": "published",
    "all_values_unreliable": "no change reliable enough (all six suppressed)",
    "contributors_under_minimum": "too few contributing users",
    "area_under_minimum": "region under the minimum area",
}


def published_values(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The section's values from a mobility release's manifest (its ``rows`` and
    ``suppression`` figures)."""
    rows = manifest.get("rows") or {}
    supp = manifest.get("suppression") or {}
    reasons = {str(k): int(v) for k, v in (supp.get("row_reasons") or {}).items()}
    domain = int(rows.get("domain") or sum(reasons.values()))
    order = sorted(reasons, key=lambda k: (k != "published", -reasons[k], k))
    shares = supp.get("published_share_of_eligible_by_level") or {}
    categories = sorted({c for v in shares.values() for c in v},
                        key=lambda c: (list(CATEGORY_LABELS).index(c)
                                       if c in CATEGORY_LABELS else 99, c))
    return {
        "published": int(rows.get("published") or 0), "domain": domain,
        "outcomes": [[ROW_REASONS.get(k, k), f"{reasons[k]:,}", share(reasons[k], domain)]
                     for k in order],
        "categories": [CATEGORY_LABELS.get(c, c) for c in categories],
        "shares": [[LEVEL_LABELS.get(int(level), f"Level {level}"),
                    *[share(float(values.get(c, 0.0)), 1.0) for c in categories]]
                   for level, values in sorted(shares.items(), key=lambda kv: int(kv[0]))],
        "share_columns": list(range(1, len(categories) + 1)),
    }


published_mobility = PublishedSection("dp_ops.reports.mobility:published.html",
                                      published_values)
