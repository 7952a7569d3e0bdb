"""The data statement of a release: what a reader of the data needs to know, in words.

``DATASTATEMENT.md`` is written beside every release's files and shown as a section of its
page. It is generated from the release's manifest (dates, epsilon spent, what was
published), the report's public configuration (noise per metric, bounds, thresholds, the
reliability rule) and the report's own paragraphs (:class:`StatementParts`), never from
private data: everything in it is public already, or post-processing of the release.
The release id is not in it (the id is a hash of the release's files, written after it).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dp_ops.privacy.plan import MetricBudget
from dp_ops.release_signing import how_to_check

STATEMENT_FILE = "DATASTATEMENT.md"


@dataclass(frozen=True)
class StatementParts:
    """What only the report can say (Markdown). ``published`` is the share published per
    level and category or resolution, from the manifest; ``thresholds`` one line each."""

    what: str
    bounds: str
    thresholds: tuple[str, ...]
    rule: str
    published: str
    intervals: str
    biases: str


def noise_std(epsilon: float, sensitivity: int) -> float:
    """The standard deviation of the discrete Laplace noise ``P(Z = k) ~ a^|k|``, ``a =
    exp(-epsilon / sensitivity)``: ``sqrt(2 a) / (1 - a)``."""
    a = math.exp(-epsilon / sensitivity)
    return math.sqrt(2 * a) / (1 - a)


def noise_table(budgets: Sequence[MetricBudget]) -> str:
    """One row per metric group: its epsilon per cell, sensitivity, cells a user-day can
    touch, the noise's scale and standard deviation (the same at every level)."""
    rows = ["| metric | epsilon per cell | sensitivity | cells per user-day | noise scale "
            "(sensitivity / epsilon) | noise standard deviation |",
            "|---|---:|---:|---:|---:|---:|"]
    for b in budgets:
        rows.append(f"| {b.name} | {b.cell_epsilon:.4g} | {b.sensitivity} | "
                    f"{b.contributions} | {b.sensitivity / b.cell_epsilon:.4g} | "
                    f"{noise_std(b.cell_epsilon, b.sensitivity):.4g} |")
    return "\n".join(rows)


def render_statement(manifest: Mapping[str, Any], budgets: Sequence[MetricBudget],
                     levels: Sequence[int], min_area_km2: float, title: str,
                     parts: StatementParts) -> str:
    """The statement's Markdown for the release described by ``manifest``."""
    eps = manifest.get("epsilon") or {}
    level_text = ", ".join(str(level) for level in levels)
    lines = [
        f"# Data statement: {title}",
        "",
        f"Dates {manifest.get('first_date')} to {manifest.get('last_date')}; method "
        f"{manifest.get('method_version')}; written by dp-ops "
        f"{manifest.get('software_version')} under release contract "
        f"{manifest.get('schema_version')}. Generated from this release's manifest and "
        "the report's public configuration; nothing in it comes from private data.",
        "",
        "## What the data are",
        "",
        parts.what,
        "",
        "## Privacy",
        "",
        "- **Privacy unit:** one user-day (everything one user did on one calendar day).",
        "- **Guarantee:** pure epsilon-differential privacy per user-day; **delta = 0**.",
        f"- **Epsilon per user-day:** at most {eps.get('per_user_day_max')} on any date "
        f"behind this release (a normal daily run spends "
        f"{eps.get('per_user_day_normal_run')}; the cap "
        f"is {eps.get('cap')}). Composition: {eps.get('composition')}, over the region "
        f"levels {level_text}.",
        "- **Mechanism:** every published aggregate is computed from cells to which "
        "discrete Laplace noise (two-sided geometric) was added once, from a "
        "cryptographically secure source; the noisy cells are stored and reused, never "
        "drawn again. Everything after that (ratios, baselines, intervals, suppression) "
        "is post-processing and spends nothing.",
        "",
        noise_table(budgets),
        "",
        "## Contribution bounds",
        "",
        parts.bounds,
        "",
        "## Thresholds",
        "",
        f"- A region smaller than {min_area_km2:g} km\u00b2 is never published.",
        *[f"- {t}" for t in parts.thresholds],
        "",
        "## The reliability rule",
        "",
        parts.rule,
        "",
        "## What was published",
        "",
        parts.published,
        "",
        "## How to read the intervals",
        "",
        parts.intervals,
        "",
        "## Known biases",
        "",
        parts.biases,
        "",
        "## Checking this release",
        "",
        "`dp-ops verify-release <this directory>` checks every file against the sha256 in "
        "`manifest.json`, the manifest against its JSON Schema and the data files against "
        "their column schemas; it needs no private data, no ledger and no Airflow.",
        "",
        how_to_check(manifest),
        "",
    ]
    return "\n".join(lines)


def markdown_html(text: str) -> str:
    """The statement's Markdown as HTML (the subset it uses: headings, paragraphs, bullet
    lists, pipe tables, ``code`` and **bold**), escaped."""
    out: list[str] = []
    blocks = re.split(r"\n\s*\n", text.strip())
    for block in blocks:
        lines = block.splitlines()
        if lines[0].startswith("#"):
            depth = min(len(lines[0]) - len(lines[0].lstrip("#")) + 1, 4)
            out.append(f"<h{depth}>{_inline(lines[0].lstrip('#').strip())}</h{depth}>")
        elif all(line.startswith("|") for line in lines):
            cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
            head, body = cells[0], [r for r in cells[1:] if not set("".join(r)) <= set("-:")]
            out.append("<table><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head)
                       + "</tr></thead><tbody>"
                       + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row)
                                 + "</tr>" for row in body) + "</tbody></table>")
        elif all(line.startswith("- ") or line.startswith("  ") for line in lines):
            items: list[str] = []
            for line in lines:
                if line.startswith("- "):
                    items.append(line[2:])
                else:
                    items[-1] += " " + line.strip()
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
        else:
            out.append(f"<p>{_inline(' '.join(line.strip() for line in lines))}</p>")
    return "\n".join(out)


def _inline(text: str) -> str:
    escaped = html.escape(text, quote=False)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


def statement_section(text: str) -> str:
    """The page's ``<section id="statement">``: the statement's text as HTML."""
    body = markdown_html(text)
    # the statement's own title is the section's heading
    body = re.sub(r"^<h2>[^<]*</h2>", "", body, count=1)
    return (f'<section id="statement"><h2>Data statement</h2>'
            f'<p>Also in this release as <a href="{STATEMENT_FILE}">{STATEMENT_FILE}</a>.</p>'
            f"{body}</section>")
