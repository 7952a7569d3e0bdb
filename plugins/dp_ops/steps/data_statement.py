"""The data statement of a release: what a reader of the data needs to know, in words.

``DATASTATEMENT.md`` is written beside every release's files and shown as a section of its
page. It is generated from the release's manifest (dates, epsilon spent, what was
published), the spends the ledger recorded for the dates behind the release (the noise
table: :func:`noise_rows`, :func:`composed_rows`), the report's public configuration
(sensitivities, bounds, thresholds, the reliability rule) and the report's own paragraphs
(:class:`StatementParts`), never from private data: everything in it is public already,
or post-processing of the release. The release id is not in it (the id is a hash of the
release's files, written after it).

The epsilons are the ledger's, date by date, not the process's configuration: after a
``set-epsilon`` the dates noised before it keep the epsilon they were noised with, and a
date re-noised or spent on by a method update says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

from dp_ops.privacy.plan import CELLS_TERM, SENSITIVITY_TERM, MetricBudget
from dp_ops.release_signing import how_to_check

if TYPE_CHECKING:
    from dp_ops.privacy.ledger import Spend

# A spend as the statement reads it: the ledger's row and the policy terms in force when
# it was booked (:meth:`dp_ops.privacy.ledger.Ledger.spends_with_terms`).
Booked = tuple["Spend", Mapping[str, float]]

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


# the spend kinds whose noise the published values carry, as the table names them
DRAWS = {"noise": "daily", "renoise": "re-noise"}
METHOD_UPDATE = "method_update"
# composed totals are grouped at the manifest's precision (epsilon_summary rounds to 6)
TOTAL_DIGITS = 6


@dataclass(frozen=True)
class NoiseRow:
    """One parameter set of the noise behind a release and the dates it was drawn on:
    ``epsilon`` is what the ledger booked per user-day for one slot (metric group and
    level), ``cell_epsilon`` = ``epsilon / contributions`` that of each noisy cell."""

    metric: str
    draw: str
    epsilon: float
    sensitivity: int
    contributions: int
    levels: tuple[int, ...]
    days: tuple[date, ...]

    @property
    def cell_epsilon(self) -> float:
        return self.epsilon / self.contributions

    @property
    def scale(self) -> float:
        """The discrete Laplace scale ``sensitivity / cell epsilon``."""
        return self.sensitivity / self.cell_epsilon


def statement_days(manifest: Mapping[str, Any]) -> set[date]:
    """The dates whose noise feeds the release, as its manifest's accounting counts them:
    ``first_date``..``last_date`` and, for a report with a baseline, the manifest's
    ``inputs.baseline_window``."""
    first = date.fromisoformat(str(manifest["first_date"]))
    last = date.fromisoformat(str(manifest["last_date"]))
    days = {first + timedelta(days=i) for i in range((last - first).days + 1)}
    window = (manifest.get("inputs") or {}).get("baseline_window")
    if window:
        start, end = (date.fromisoformat(str(d)) for d in window)
        days |= {start + timedelta(days=i) for i in range((end - start).days + 1)}
    return days


def date_ranges(days: Iterable[date]) -> str:
    """``2020-02-15..2020-02-20, 2020-02-22``: runs of consecutive dates."""
    ordered = sorted(set(days))
    runs: list[tuple[date, date]] = []
    for day in ordered:
        if runs and day == runs[-1][1] + timedelta(days=1):
            runs[-1] = (runs[-1][0], day)
        else:
            runs.append((day, day))
    return ", ".join(a.isoformat() if a == b else f"{a.isoformat()}..{b.isoformat()}"
                     for a, b in runs)


def _budget(budgets: Mapping[str, MetricBudget], metric: str) -> MetricBudget:
    try:
        return budgets[metric]
    except KeyError:
        raise ValueError(f"ledger metric group {metric!r} has no budget in the report's "
                         f"configuration (known: {sorted(budgets)})") from None


def noise_rows(booked: Iterable[Booked], budgets: Sequence[MetricBudget]) -> list[NoiseRow]:
    """The noise laws of the published values, from the ledger's spends of the release's
    dates (``booked``): one row per (metric group, draw, booked epsilon, sensitivity, cells
    a user-day touches, levels) with every date it holds on. A re-noise is a row of its
    own (its dates are re-noised); method updates are no law of a published value
    (:func:`method_updates`). Sensitivity and cells are the terms in force when the spend
    was booked; ``budgets`` (the configuration) only where a policy predates them."""
    by_name = {b.name: b for b in budgets}
    levels: dict[tuple[str, str, float, int, int, date], set[int]] = {}
    for s, terms in booked:
        if s.kind not in DRAWS:
            continue
        metric = s.slot.metric
        if SENSITIVITY_TERM + metric in terms and CELLS_TERM + metric in terms:
            sensitivity = int(terms[SENSITIVITY_TERM + metric])
            cells = int(terms[CELLS_TERM + metric])
        else:
            budget = _budget(by_name, metric)
            sensitivity, cells = budget.sensitivity, budget.contributions
        key = (metric, DRAWS[s.kind], float(s.epsilon), sensitivity, cells, s.slot.day)
        levels.setdefault(key, set()).add(s.slot.level)
    grouped: dict[tuple[str, str, float, int, int, tuple[int, ...]], list[date]] = {}
    for (metric, draw, epsilon, sensitivity, cells, day), lv in levels.items():
        grouped.setdefault((metric, draw, epsilon, sensitivity, cells, tuple(sorted(lv))),
                           []).append(day)
    order = {b.name: i for i, b in enumerate(budgets)}
    rows = [NoiseRow(metric, draw, epsilon, sensitivity, cells, lv, tuple(sorted(days)))
            for (metric, draw, epsilon, sensitivity, cells, lv), days in grouped.items()]
    return sorted(rows, key=lambda r: (order.get(r.metric, len(order)), r.metric,
                                       r.draw != "daily", r.days[0], r.epsilon, r.levels))


def composed_rows(spends: Iterable[Spend]) -> list[tuple[float, tuple[date, ...]]]:
    """The composed epsilon per user-day of each date (the sum of its spends, every kind:
    basic composition), grouped: (total, its dates), in the order of the first date."""
    per_day: dict[date, list[float]] = {}
    for s in spends:
        per_day.setdefault(s.slot.day, []).append(s.epsilon)
    grouped: dict[float, list[date]] = {}
    for day, values in per_day.items():
        grouped.setdefault(round(math.fsum(values), TOTAL_DIGITS), []).append(day)
    return sorted(((total, tuple(sorted(days))) for total, days in grouped.items()),
                  key=lambda t: t[1][0])


def renoised(spends: Iterable[Spend]) -> dict[date, tuple[str, ...]]:
    """Each re-noised date with the region scopes re-noised on it."""
    out: dict[date, set[str]] = {}
    for s in spends:
        if s.kind == "renoise":
            out.setdefault(s.slot.day, set()).add(s.slot.region_scope)
    return {day: tuple(sorted(scopes)) for day, scopes in sorted(out.items())}


def method_updates(spends: Iterable[Spend]) -> dict[str, tuple[float, tuple[date, ...]]]:
    """Each method version with a spend: the epsilon it booked per user-day on each of its
    dates (summed over its slots of one date) and those dates."""
    per_day: dict[str, dict[date, list[float]]] = {}
    for s in spends:
        if s.kind == METHOD_UPDATE:
            per_day.setdefault(s.method_version, {}).setdefault(s.slot.day, []).append(
                s.epsilon)
    out = {}
    for version, days in sorted(per_day.items()):
        totals = {round(math.fsum(v), TOTAL_DIGITS) for v in days.values()}
        out[version] = (max(totals), tuple(sorted(days)))
    return out


def noise_table(rows: Sequence[NoiseRow]) -> str:
    """One row per parameter set: the epsilon the ledger booked per user-day and level,
    per cell, the sensitivity, the cells a user-day can touch, the noise's scale and
    standard deviation, the levels and the dates."""
    lines = ["| metric | draw | epsilon per user-day and level | epsilon per cell | "
             "sensitivity | cells per user-day | noise scale (sensitivity / epsilon) | "
             "noise standard deviation | levels | dates |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r.metric} | {r.draw} | {r.epsilon:.4g} | {r.cell_epsilon:.4g} | "
                     f"{r.sensitivity} | {r.contributions} | {r.scale:.4g} | "
                     f"{noise_std(r.cell_epsilon, r.sensitivity):.4g} | "
                     f"{', '.join(str(level) for level in r.levels)} | "
                     f"{date_ranges(r.days)} |")
    return "\n".join(lines)


def composed_table(rows: Sequence[tuple[float, tuple[date, ...]]]) -> str:
    lines = ["| composed epsilon per user-day | dates |", "|---:|---|"]
    lines += [f"| {total:g} | {date_ranges(days)} |" for total, days in rows]
    return "\n".join(lines)


def mechanism_text(renoises: Mapping[date, tuple[str, ...]]) -> str:
    """The mechanism bullet: true of what the release holds (re-noised dates or none)."""
    text = ("- **Mechanism:** every published aggregate is computed from cells to which "
            "discrete Laplace noise (two-sided geometric) was added, from a "
            "cryptographically secure source; the noisy cells are stored and reused. ")
    if renoises:
        text += (f"Noise was drawn again for {len(renoises)} date(s) of this release, each "
                 "by an approved re-noise recorded and paid for in the ledger (listed "
                 "below); every other cell was drawn once and never again. ")
    else:
        text += "No date of this release was re-noised: every cell was drawn once, never again. "
    return text + ("Everything after that (ratios, baselines, intervals, suppression) is "
                   "post-processing and spends nothing.")


def spends_text(booked: Sequence[Booked], budgets: Sequence[MetricBudget]) -> list[str]:
    """The statement's lines on the noise behind the release, from the ledger's spends of
    its dates: the noise table, the composed totals, re-noises and method updates."""
    spends = [s for s, _ in booked]
    lines = [noise_table(noise_rows(booked, budgets)), "",
             "Composed epsilon per user-day, date by date, as the ledger recorded it:", "",
             composed_table(composed_rows(spends)), ""]
    again = renoised(spends)
    updates = method_updates(spends)
    if again:
        lines += [f"- **Re-noised:** {day.isoformat()} (region(s) {', '.join(scopes)})"
                  for day, scopes in again.items()]
    else:
        lines.append("- **Re-noised:** no date.")
    if updates:
        lines += [f"- **Method update {version}:** {epsilon:g} per user-day on "
                  f"{date_ranges(days)}, to estimate its scaling factors (in the totals "
                  "above)" for version, (epsilon, days) in updates.items()]
    else:
        lines.append("- **Method updates:** none spent on these dates.")
    return lines


def render_statement(manifest: Mapping[str, Any], booked: Iterable[Booked],
                     budgets: Sequence[MetricBudget], levels: Sequence[int],
                     min_area_km2: float, title: str, parts: StatementParts) -> str:
    """The statement's Markdown for the release described by ``manifest``; ``booked``
    are the report's spends in the ledger with the terms in force for each (those of the
    dates behind the release are used: :func:`statement_days`)."""
    eps = manifest.get("epsilon") or {}
    behind = statement_days(manifest)
    recorded = [(s, terms) for s, terms in booked if s.slot.day in behind]
    level_text = ", ".join(str(level) for level in levels)
    lines = [
        f"# Data statement: {title}",
        "",
        f"Dates {manifest.get('first_date')} to {manifest.get('last_date')}; method "
        f"{manifest.get('method_version')}; written by dp-ops "
        f"{manifest.get('software_version')} under release contract "
        f"{manifest.get('schema_version')}. Generated from this release's manifest, the "
        "ledger's record of the noise behind it and the report's public configuration; "
        "nothing in it comes from private data.",
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
        mechanism_text(renoised(s for s, _ in recorded)),
        "",
        "The noise of the dates behind this release, as the ledger recorded it (one row "
        "per parameter set, with its dates):",
        "",
        *spends_text(recorded, budgets),
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


def statement_section(text: str) -> str:
    """The page's ``<section id="statement">``: the statement's text as HTML (the macro
    ``statement_section`` of ``templates/_page.html``, which the release page uses)."""
    from dp_ops.templating import environment

    macros = environment().get_template("_page.html").module
    return str(macros.statement_section(text, STATEMENT_FILE))  # type: ignore[attr-defined]
