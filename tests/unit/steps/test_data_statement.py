"""The data statement: generated from the manifest and the public config only, with every
item a reader needs, and shown on the page."""

from __future__ import annotations

import math
from datetime import date

import numpy as np
import pytest

from dp_ops.privacy.noise import noise_generator, sample_discrete_laplace
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.mobility.statement import mobility_statement
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.reports.symptoms.statement import symptoms_statement
from dp_ops.steps.data_statement import (
    markdown_html,
    noise_std,
    render_statement,
    statement_section,
)
from dp_ops.steps.release import epsilon_summary

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
    text = render_statement(MANIFEST, cfg.metric_budgets, cfg.levels, cfg.min_area_km2,
                            "Community Mobility Report", mobility_statement(cfg, MANIFEST))
    for needed in ("Privacy unit", "one user-day", "delta = 0", "at most 8.58", "18.018",
                   "a normal daily run spends 8.57;",
                   "discrete Laplace", "| places | 0.44 | 1 | 4 |", "residential_sum",
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
    text = render_statement(manifest, cfg.metric_budgets, cfg.levels, cfg.min_area_km2,
                            "Search Trends Symptoms", symptoms_statement(cfg, manifest))
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
