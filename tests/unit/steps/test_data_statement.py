"""The data statement: generated from the manifest, the ledger's record of the noise behind
the release and the public config, with every item a reader needs, and shown on the page.

The noise table's figures are checked as numbers, parsed back from the Markdown: each
date must sit in the row of the epsilon the ledger recorded for it (a set-epsilon between
two dates of a release splits them), with that row's scale and standard deviation, and the
composed totals and re-noised dates must be the ledger's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date, timedelta

import numpy as np
import pytest
from support.approvals import reserve_approved
from support.dates import date_range

from dp_ops.privacy.ledger import ALL_REGIONS, Ledger, Slot, Spend, SpendRequest
from dp_ops.privacy.noise import noise_generator, sample_discrete_laplace
from dp_ops.privacy.plan import MetricBudget
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.mobility.statement import mobility_statement
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.reports.symptoms.statement import symptoms_statement
from dp_ops.steps.data_statement import (
    Booked,
    composed_rows,
    date_ranges,
    noise_rows,
    noise_std,
    render_statement,
    statement_days,
    statement_section,
)
from dp_ops.steps.release import epsilon_summary
from dp_ops.templating import markdown_html

MANIFEST = {
    "schema_version": "1.2", "report": "mobility", "method_version": "v1",
    "software_version": "0.1.0", "first_date": "2020-02-15", "last_date": "2020-03-31",
    "inputs": {"baseline_window": ["2020-01-03", "2020-02-06"]},
    # the accounting as the release flow writes it (so a renamed key fails here)
    "epsilon": epsilon_summary({date(2020, 2, 15): 8.58, date(2020, 2, 16): 8.57},
                               normal_run=8.57, cap=18.018,
                               composition="basic (sum over metrics and levels of each date)"),
    "suppression": {"row_reasons": {"published": 1944, "all_values_unreliable": 1184,
                                    "contributors_under_minimum": 230},
                    "published_share_of_eligible_by_level": {
                        "0": {"parks": 1.0, "residential": 1.0},
                        "2": {"parks": 0.179, "residential": 0.448}}},
    "method_updates": [],
}
TITLE = "Community Mobility Report"


def daily_spends(report: str, budgets: Sequence[MetricBudget], days: Sequence[date],
                 levels: Sequence[int]) -> list[Booked]:
    """The spends of normal daily runs as the ledger holds them, with no policy terms (for
    the text tests; the figure tests below write a real ledger)."""
    return [(Spend(i, Slot(report, day, level, b.name), 0, b.epsilon, "noise", "v1", "daily",
                   "", "2020-01-01T00:00:00+00:00"), {})
            for i, (day, level, b) in enumerate(
                (d, lv, b) for d in days for lv in levels for b in budgets)]


def table(text: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the Markdown table whose first header cell is ``first_header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith(f"| {first_header} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")),
                             strict=True)))
    return rows


def noise_table_rows(text: str, metric: str) -> list[dict[str, str]]:
    return [r for r in table(text, "metric") if r["metric"] == metric]


def noise_daily(ledger: Ledger, cfg: MobilityConfig, days: Sequence[date], *, cap: float,
                run_id: str = "daily") -> None:
    """A normal daily run of each of ``days`` under ``cfg``'s epsilons, as the noise step
    reserves it (every level, every metric group)."""
    for day in days:
        ledger.reserve([SpendRequest(Slot("mobility", day, level, b.name), b)
                        for level in cfg.levels for b in cfg.metric_budgets],
                       run_id=f"{run_id}_{day}", kind="noise", cap=cap,
                       method_version=cfg.method_version, terms=cfg.policy_terms)


def release_manifest(first: date, last: date, ledger: Ledger, cfg: MobilityConfig,
                     cap: float) -> dict[str, object]:
    totals = {d: e for (_, d), e in ledger.totals("mobility").items() if first <= d <= last}
    return {**MANIFEST, "first_date": first.isoformat(), "last_date": last.isoformat(),
            "inputs": {}, "epsilon": epsilon_summary(
                totals, normal_run=cfg.run_epsilon, cap=cap,
                composition="basic (sum over metrics and levels of each date)")}


def test_the_noise_standard_deviation_is_the_laws() -> None:
    """sqrt(2a)/(1-a) against the pmf summed exactly, and against draws (fixed key; the
    bound is 6 standard errors of the sample's variance, false failure < 1e-8)."""
    for epsilon, sensitivity in ((0.44, 1), (0.22, 720), (1.0, 3)):
        a = math.exp(-epsilon / sensitivity)
        k = np.arange(-200 * sensitivity, 200 * sensitivity + 1)
        pmf = (1 - a) / (1 + a) * a ** np.abs(k)
        assert noise_std(epsilon, sensitivity) == pytest.approx(
            math.sqrt(float((pmf * k**2).sum())), rel=1e-9)
    draws = sample_discrete_laplace(200_000, epsilon=0.44, sensitivity=1,
                                    rng=noise_generator(key=3)).astype(float)
    assert draws.std() == pytest.approx(noise_std(0.44, 1), rel=0.02)


def test_a_mobility_statement_says_what_a_reader_needs() -> None:
    cfg = MobilityConfig()
    spends = daily_spends("mobility", cfg.metric_budgets,
                          date_range(date(2020, 1, 3), date(2020, 3, 31)), cfg.levels)
    text = render_statement(MANIFEST, spends, cfg.metric_budgets, cfg.levels,
                            cfg.min_area_km2, TITLE, mobility_statement(cfg, MANIFEST))
    for needed in ("Privacy unit", "one user-day", "delta = 0", "at most 8.58", "18.018",
                   "a normal daily run spends 8.57;", "discrete Laplace",
                   "| places | daily | 1.76 | 0.44 | 1 | 4 | 2.273 |",
                   "| 2020-01-03..2020-02-06, 2020-02-15..2020-03-31 |",
                   "every cell was drawn once, never again", "residential_sum",
                   f"{cfg.max_place_pairs} (region, place category)", "3 km",
                   "fewer than 100 contributing users", "more than 10 points",
                   "under 5%", "2020-01-03 to 2020-02-06", "17.9%", "44.8%",
                   "_percent_change_from_baseline_low", "at least 95%",
                   "Contribution bounding lowers counts", "dp-ops verify-release"):
        assert needed in text, needed
    assert "release_id" not in text and "1944" not in text.replace("1,944", "")


def test_a_symptoms_statement_names_its_rule_and_intervals() -> None:
    cfg = SymptomsConfig()
    manifest = {**MANIFEST, "report": "symptoms", "suppression": {
        "series": {"daily": 12, "weekly": 300},
        "values": {"daily": {"values": 1000, "published": 30, "published_share": 0.03},
                   "weekly": {"values": 200, "published": 20, "published_share": 0.1}}}}
    spends = daily_spends("symptoms", cfg.metric_budgets,
                          date_range(date(2020, 2, 15), date(2020, 3, 31)), cfg.levels)
    text = render_statement(manifest, spends, cfg.metric_budgets, cfg.levels,
                            cfg.min_area_km2, "Search Trends Symptoms",
                            symptoms_statement(cfg, manifest))
    (a_row,) = noise_table_rows(text, "symptom_searches")
    # A's slot books epsilon_A per level; each of its cells gets epsilon_A / k
    assert float(a_row["epsilon per cell"]) == pytest.approx(
        cfg.symptom_epsilon / cfg.max_symptoms_per_day, rel=1e-3)
    assert a_row["cells per user-day"] == str(cfg.max_symptoms_per_day)
    for needed in ("more than 25% away", "at most 50%", "level 0.45", "at most 3 symptoms",
                   "| weekly | 200 | 20 | 10.00% |", "_symptoms_dataset_intervals.csv",
                   "at least 95%", "biased low"):
        assert needed in text, needed


def test_the_statement_renders_as_a_page_section_escaped() -> None:
    text = "# Data statement: T\n\nA <b> `code` **bold**\n\n- one\n- two\n  more\n\n" \
           "| a | b |\n|---|---:|\n| 1 | <x> |\n"
    html = markdown_html(text)
    assert "<h2>Data statement: T</h2>" in html
    assert "<p>A &lt;b&gt; <code>code</code> <strong>bold</strong></p>" in html
    assert "<ul><li>one</li><li>two more</li></ul>" in html
    assert "<th>a</th><th>b</th>" in html and "<td>&lt;x&gt;</td>" in html
    section = statement_section(text)
    assert section.startswith('<section id="statement"><h2>Data statement</h2>')
    assert "Data statement: T" not in section and 'href="DATASTATEMENT.md"' in section


def test_a_set_epsilon_between_two_dates_shows_each_date_with_its_recorded_epsilon(
        ledger: Ledger) -> None:
    """Issue 48, route 7: after `set-epsilon` the statement showed the new epsilon and
    scale for every date of the release. Each date must sit in the row of what the ledger
    recorded for it, with that row's own figures, and the composed totals must be the
    ledger's (their maximum is the manifest's)."""
    old, new = MobilityConfig(), MobilityConfig(place_epsilon=0.3, workplace_epsilon=0.5)
    cap = old.cap
    first, changed, last = date(2020, 2, 15), date(2020, 2, 18), date(2020, 2, 19)
    noise_daily(ledger, old, date_range(first, changed - timedelta(days=1)), cap=cap)
    for term in ("epsilon.places", "epsilon.workplaces"):
        ledger.set_policy("mobility", terms={term: new.policy_terms[term]},
                          reason="test: less noise", run_id="cli")
    noise_daily(ledger, new, date_range(changed, last), cap=cap)
    manifest = release_manifest(first, last, ledger, old, cap)
    # the process that publishes is configured with the new epsilons
    text = render_statement(manifest, ledger.spends_with_terms("mobility"),
                            new.metric_budgets,
                            new.levels, new.min_area_km2, TITLE,
                            mobility_statement(new, manifest))

    for metric, before, after in (("places", 0.44, 0.3), ("workplaces", 0.44, 0.5)):
        rows = noise_table_rows(text, metric)
        assert [r["dates"] for r in rows] == ["2020-02-15..2020-02-17",
                                              "2020-02-18..2020-02-19"], metric
        budget = old.budget(metric)
        for row, cell in zip(rows, (before, after), strict=True):
            assert float(row["epsilon per cell"]) == pytest.approx(cell, rel=1e-3)
            assert float(row["epsilon per user-day and level"]) == pytest.approx(
                cell * budget.contributions, rel=1e-3)
            assert float(row["noise scale (sensitivity / epsilon)"]) == pytest.approx(
                budget.sensitivity / cell, rel=1e-3)
            assert float(row["noise standard deviation"]) == pytest.approx(
                noise_std(cell, budget.sensitivity), rel=1e-3)
            assert row["levels"] == "0, 1, 2" and row["draw"] == "daily"
    # an unchanged group is one row over every date
    (contributors,) = noise_table_rows(text, "contributors")
    assert contributors["dates"] == "2020-02-15..2020-02-19"
    assert float(contributors["epsilon per cell"]) == pytest.approx(0.22, rel=1e-3)

    totals = table(text, "composed epsilon per user-day")
    assert [(float(t["composed epsilon per user-day"]), t["dates"]) for t in totals] == [
        (pytest.approx(old.run_epsilon, rel=1e-9), "2020-02-15..2020-02-17"),
        (pytest.approx(new.run_epsilon, rel=1e-9), "2020-02-18..2020-02-19")]
    assert max(t for t, _ in composed_rows(ledger.spends("mobility"))) == pytest.approx(
        manifest["epsilon"]["per_user_day_max"], abs=1e-6)  # type: ignore[index]
    assert "No date of this release was re-noised" in text


def test_one_date_with_its_own_epsilon_is_a_row_of_its_own() -> None:
    """A date booked at another epsilon (one level, one date) is split from its
    neighbours, and the levels of its row are exactly those it was booked at."""
    cfg = MobilityConfig()
    days = date_range(date(2020, 3, 1), date(2020, 3, 5))
    spends = daily_spends("mobility", [cfg.budget("workplaces")], days, cfg.levels)
    odd = [b for b in spends if b[0].slot.day == date(2020, 3, 3) and b[0].slot.level == 2]
    spends = [b for b in spends if b not in odd] + [
        (Spend(999, odd[0][0].slot, 0, 0.11, "noise", "v1", "daily", "", ""), {})]
    rows = noise_rows(spends, cfg.metric_budgets)
    assert [(r.epsilon, r.levels, date_ranges(r.days)) for r in rows] == [
        (0.44, (0, 1, 2), "2020-03-01..2020-03-02, 2020-03-04..2020-03-05"),
        (0.11, (2,), "2020-03-03"),
        (0.44, (0, 1), "2020-03-03")]
    assert rows[1].scale == pytest.approx(1 / 0.11)


def test_re_noised_dates_and_method_updates_are_named_with_their_spends(
        ledger: Ledger) -> None:
    """A release holding an approved re-noise no longer says its noise was never drawn
    again: it names the date and region, shows the re-noise's epsilon in a row of its
    own, and counts it (and a method update's spend) in those dates' totals."""
    cfg = MobilityConfig()
    cap = cfg.cap
    days = date_range(date(2020, 3, 2), date(2020, 3, 6))
    noise_daily(ledger, cfg, days, cap=cap)
    places = cfg.budget("places").epsilon
    reserve_approved(ledger, [SpendRequest(Slot("mobility", date(2020, 3, 4), 2, "places",
                                                "R7"), cfg.budget("places"))],
                     run_id="oncall", kind="renoise", cap=cap, method_version="v1",
                     reason="a late partition", terms=cfg.policy_terms)
    update = cfg.method_update_fraction * cfg.budget("workplaces").epsilon
    reserve_approved(ledger, [SpendRequest(Slot("mobility", day, level, "workplaces"),
                                           cfg.budget("workplaces"),
                                           fraction=cfg.method_update_fraction)
                              for day in days[-2:] for level in cfg.levels],
                     run_id="update", kind="method_update", cap=cap, method_version="v2",
                     terms=cfg.policy_terms)
    manifest = release_manifest(days[0], days[-1], ledger, cfg, cap)
    text = render_statement(manifest, ledger.spends_with_terms("mobility"),
                            cfg.metric_budgets, cfg.levels, cfg.min_area_km2, TITLE,
                            mobility_statement(cfg, manifest))

    assert "never drawn again" not in text.replace("drawn once and never again", "")
    assert "Noise was drawn again for 1 date(s)" in text
    assert "- **Re-noised:** 2020-03-04 (region(s) R7)" in text
    daily, again = noise_table_rows(text, "places")
    assert (daily["draw"], daily["dates"]) == ("daily", "2020-03-02..2020-03-06")
    assert (again["draw"], again["dates"], again["levels"]) == ("re-noise", "2020-03-04", "2")
    assert float(again["epsilon per user-day and level"]) == pytest.approx(places, rel=1e-3)
    # the method update's spend is no law of a published value: not a row of the table
    assert [r["draw"] for r in noise_table_rows(text, "workplaces")] == ["daily"]
    assert (f"- **Method update v2:** {round(3 * update, 6):g} per user-day on "
            "2020-03-05..2020-03-06") in text
    totals = {t["dates"]: float(t["composed epsilon per user-day"])
              for t in table(text, "composed epsilon per user-day")}
    assert totals == {"2020-03-02..2020-03-03": pytest.approx(cfg.run_epsilon),
                      "2020-03-04": pytest.approx(cfg.run_epsilon + places),
                      "2020-03-05..2020-03-06": pytest.approx(cfg.run_epsilon + 3 * update)}


def test_the_dates_behind_a_release_are_its_period_and_baseline_window() -> None:
    assert statement_days(MANIFEST) == {*date_range(date(2020, 1, 3), date(2020, 2, 6)),
                                        *date_range(date(2020, 2, 15), date(2020, 3, 31))}
    no_window = {**MANIFEST, "inputs": {}, "first_date": "2020-03-01",
                 "last_date": "2020-03-02"}
    assert statement_days(no_window) == {date(2020, 3, 1), date(2020, 3, 2)}
    assert date_ranges([date(2020, 3, 3), date(2020, 3, 1), date(2020, 3, 2),
                        date(2020, 3, 5)]) == "2020-03-01..2020-03-03, 2020-03-05"
    assert date_ranges([]) == ""
    assert ALL_REGIONS == "*"  # the daily scope, which the re-noise list leaves out
