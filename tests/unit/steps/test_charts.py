"""Release charts and the release page: what a chart draws is the published table (gaps
where nothing is published, never interpolated), PNG bytes are reproducible, and
``index.html`` shows the manifest's figures, links every file, chart and the Data Docs,
escapes every text and names no run."""

from __future__ import annotations

import io
import re
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from dp_ops.regions import demo_regions
from dp_ops.reports.mobility.report import PUBLISHED_COLUMNS
from dp_ops.reports.symptoms.assemble import KEY_COLUMNS as SYMPTOM_KEYS
from dp_ops.steps import charts
from dp_ops.steps.page import INDEX_FILE, render_index, write_release_index
from dp_ops.steps.release import sha256_file

FIRST = date(2020, 2, 15)
DAYS = [(FIRST + timedelta(days=i)).isoformat() for i in range(21)]
CHANGE = [c for c in PUBLISHED_COLUMNS if c.endswith("_percent_change_from_baseline")]


@pytest.fixture(scope="module")
def regions() -> pd.DataFrame:
    return demo_regions()


def published_table(regions: pd.DataFrame, region_ids: list[str]) -> pd.DataFrame:
    """A published mobility table: every category -10 + day index, but parks suppressed
    on the 5th day, and no row at all (a region-day with nothing published) on the 10th."""
    rows = []
    for rid in region_ids:
        region = regions.set_index("region_id").loc[rid]
        for i, day in enumerate(DAYS):
            if i == 9:
                continue
            row: dict[str, Any] = {c: region[c] for c in PUBLISHED_COLUMNS
                                   if c in region.index}
            row["date"] = day
            for col in CHANGE:
                row[col] = -10 + i
            if i == 4:
                row["parks_percent_change_from_baseline"] = None
            rows.append(row)
    frame = pd.DataFrame(rows)[list(PUBLISHED_COLUMNS)]
    for col in CHANGE:
        frame[col] = frame[col].astype("Int64")
    return frame


def test_mobility_series_hold_gaps_where_nothing_is_published(regions: pd.DataFrame) -> None:
    table = published_table(regions, ["DM-01", "DM"])
    series = charts.mobility_series(table, regions, DAYS)
    assert [s.region_id for s in series] == ["DM", "DM-01"]  # index order: by level
    s = series[1]
    assert s.title == "Demoland / Harrow County" and s.level == 1
    parks = s.values[list(charts.CATEGORIES).index("parks")]
    assert np.isnan(parks[4]) and np.isnan(parks[9])  # suppressed; no row
    assert np.isnan(s.values[:, 9]).all()
    present = np.delete(np.arange(len(DAYS)), [4, 9])
    assert (parks[present] == -10 + present).all()  # the published integers, as they are
    retail = s.values[0]
    assert np.isnan(retail[9]) and not np.isnan(retail[[4, 8, 10]]).any()


def test_the_lines_given_to_matplotlib_break_at_the_gaps(regions: pd.DataFrame) -> None:
    table = published_table(regions, ["DM-01"])
    (series,) = charts.mobility_series(table, regions, DAYS)
    with charts._style():
        chart = charts.MobilityChart(DAYS)
        png = chart.render(series)
    parks = chart.lines[list(charts.CATEGORIES).index("parks")]
    y = np.asarray(parks.get_ydata(), dtype=float)
    assert np.isnan(y[4]) and np.isnan(y[9]) and np.isfinite(y[[3, 5, 8, 10]]).all()
    assert parks.get_drawstyle() == "default"  # straight segments between published days
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.size == charts.MOBILITY_SIZE


def test_a_lone_published_value_gets_a_marker() -> None:
    values = np.array([np.nan, 3.0, np.nan, 4.0, 5.0, np.nan, 6.0])
    lone = charts.isolated(values)
    assert np.isnan(lone[[0, 2, 3, 4, 5]]).all()
    assert lone[1] == 3.0 and lone[6] == 6.0


def test_png_bytes_are_reproducible_and_carry_no_metadata(regions: pd.DataFrame,
                                                          tmp_path: Path) -> None:
    table = published_table(regions, ["DM", "DM-01", "DM-02"])
    a = charts.write_mobility_charts(table, regions, DAYS, tmp_path / "a")
    # another process state: a different region drawn first, a fresh figure
    b = charts.write_mobility_charts(table[table["sub_region_1"] == "Harrow County"],
                                     regions, DAYS, tmp_path / "b")
    drawn_a = {e.region_id: e.file for e in a if e.file}
    drawn_b = {e.region_id: e.file for e in b if e.file}
    assert set(drawn_a) == {"DM", "DM-01", "DM-02"} and set(drawn_b) == {"DM-01"}
    file = drawn_a["DM-01"]
    assert file == "charts/DM-01.png"
    assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
    data = (tmp_path / "a" / file).read_bytes()
    for chunk in (b"tEXt", b"iTXt", b"zTXt", b"tIME"):
        assert chunk not in data
    assert len(data) < 100_000


def test_entries_cover_every_region_and_mark_those_not_drawn(regions: pd.DataFrame,
                                                             tmp_path: Path) -> None:
    table = published_table(regions, ["DM-01-001"])
    entries = charts.write_mobility_charts(table, regions, DAYS, tmp_path)
    assert len(entries) == len(regions)
    (drawn,) = [e for e in entries if e.file]
    assert drawn.region_id == "DM-01-001"
    assert drawn.names == ("Demoland", "Harrow County", "Demopolis")
    assert "Demopolis" in drawn.alt and "retail & recreation" in drawn.alt
    assert sorted(p.name for p in (tmp_path / "charts").iterdir()) == ["DM-01-001.png"]


def test_chart_file_names_stay_safe_and_distinct() -> None:
    assert charts.chart_file("DM-01-001") == "charts/DM-01-001.png"
    odd = charts.chart_file("../x/y")
    assert odd.startswith("charts/") and "/" not in odd.removeprefix("charts/")
    assert charts.chart_file("a/b") != charts.chart_file("a_b")


def test_date_ticks_thin_out_for_long_releases() -> None:
    ticks, labels = charts.date_ticks(DAYS, max_ticks=4)
    assert labels == ["Feb 15", "Mar 1"]
    year = [(date(2020, 2, 15) + timedelta(days=i)).isoformat() for i in range(366)]
    ticks, labels = charts.date_ticks(year, max_ticks=4)
    assert len(ticks) <= 4 and labels[0] == "Apr 2020"


def symptom_tables(regions: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """DM publishes Fever daily (with a gap) and Cough, Rash weekly; DM-01 only weekly."""
    symptoms = ["Cough", "Fever", "Rash"]
    columns = [f"symptom:{s}" for s in symptoms]
    days = [(date(2020, 1, 1) + timedelta(days=i)).isoformat() for i in range(14)]
    mondays = ["2020-01-06"]  # the one whole week of 2020-01-01 .. 2020-01-14

    def meta(rid: str) -> dict[str, Any]:
        r = regions.set_index("region_id").loc[rid]
        return {"open_covid_region_code": r["open_covid_region_code"],
                "country_region_code": r["country_region_code"],
                "country_region": r["country_region"], "sub_region_1": r["sub_region_1"],
                "sub_region_1_code": r["sub_region_1_code"],
                "sub_region_2": r["sub_region_2"], "sub_region_2_code": r["sub_region_2_code"]}

    daily = pd.DataFrame([{**meta("DM"), "date": d, "symptom:Cough": np.nan,
                           "symptom:Fever": np.nan if i == 3 else 10.0 + i,
                           "symptom:Rash": np.nan} for i, d in enumerate(days)])
    weekly = pd.DataFrame([
        {**meta("DM"), "date": mondays[0], "symptom:Cough": 50.0, "symptom:Fever": 11.0,
         "symptom:Rash": 2.0},
        {**meta("DM-01"), "date": mondays[0], "symptom:Cough": np.nan, "symptom:Fever": 7.0,
         "symptom:Rash": 9.0}])
    return (daily[[*SYMPTOM_KEYS, *columns]], weekly[[*SYMPTOM_KEYS, *columns]], days)


def test_symptom_series_are_daily_where_daily_and_weekly_otherwise(
        regions: pd.DataFrame) -> None:
    daily, weekly, days = symptom_tables(regions)
    series = {s.region_id: s for s in charts.symptom_series(daily, weekly, regions, days,
                                                             top=2)}
    assert set(series) == {"DM", "DM-01"}
    dm = series["DM"]
    # Cough: weekly mean 50; Fever: daily, mean over 14 days with the gap as zero
    assert [(line.symptom, line.resolution) for line in dm.lines] == [
        ("Cough", "weekly"), ("Fever", "daily")]
    fever = dm.lines[1]
    assert np.isnan(fever.y[3]) and fever.y[4] == 14.0 and len(fever.y) == len(days)
    cough = dm.lines[0]
    # one step from Monday 2020-01-06 (day 5) to the next Monday, then nothing
    assert list(cough.x) == [4.5, 11.5] and cough.y[0] == 50.0 and np.isnan(cough.y[1])
    assert [line.symptom for line in series["DM-01"].lines] == ["Rash", "Fever"]
    with charts._style():
        chart = charts.SymptomChart(days, top=2)
        png = chart.render(dm)
    assert chart.lines[0].get_drawstyle() == "steps-post"
    assert np.isnan(np.asarray(chart.lines[1].get_ydata(), dtype=float)[3])
    assert Image.open(io.BytesIO(png)).size == charts.SYMPTOMS_SIZE


# -- the release page ---------------------------------------------------------------------
def manifest(files: dict[str, Any]) -> dict[str, Any]:
    return {
        "report": "mobility", "release_id": "2020-03-07-0123456789ab",
        "run_id": "scheduled__2020-03-08T00:00:00+00:00", "software_version": "0.1.0",
        "method_version": "v1", "first_date": "2020-02-15", "last_date": "2020-03-07",
        "method_updates": [],
        "rows": {"published": 570, "domain": 3404},
        "suppression": {"row_reasons": {"published": 570, "contributors_under_minimum": 1462,
                                        "all_values_unreliable": 1326,
                                        "area_under_minimum": 46},
                        "published_share_of_eligible_by_level": {
                            "0": {"parks": 1.0, "residential": 0.5}}},
        "epsilon": {"privacy_unit": "user-day", "delta": 0, "composition": "basic",
                    "per_user_day_max": 8.58, "per_user_day_normal_run": 8.58,
                    "cap": 18.018, "dates_accounted": 81, "dates_over_normal_run": [],
                    "sum_over_dates": 694.98},
        "files": files,
        "gate": {"success": True, "evaluated": 43,
                 "data_docs": "/data/gx/uncommitted/data_docs/local_site/index.html"},
    }


def test_index_shows_the_figures_links_everything_and_escapes(regions: pd.DataFrame,
                                                              tmp_path: Path) -> None:
    hostile = regions[regions["region_id"].isin(["DM", "DM-01"])].copy()
    hostile.loc[hostile["region_id"] == "DM-01", "sub_region_1"] = "<script>alert(1)</script>"
    table = published_table(hostile, ["DM", "DM-01"])
    entries = charts.write_mobility_charts(table, hostile, DAYS, tmp_path)
    (tmp_path / "Global_Mobility_Report.csv").write_text("x\n")
    files = {p.relative_to(tmp_path).as_posix(): {"sha256": sha256_file(p),
                                                  "bytes": p.stat().st_size}
             for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    m = manifest(files)
    release_dir = Path("/data/published/mobility/releases") / m["release_id"]
    listed = write_release_index(tmp_path, m, [e.as_dict() for e in entries],
                                 data_docs=m["gate"]["data_docs"], release_dir=release_dir,
                                 data_root=Path("/data"))
    page = (tmp_path / INDEX_FILE).read_text(encoding="utf-8")
    assert listed[INDEX_FILE]["sha256"] == sha256_file(tmp_path / INDEX_FILE)
    assert set(listed) == set(files) | {INDEX_FILE}
    # the manifest's figures
    for figure in ("8.58", "18.018", "570", "3,404", "1,462", "1,326", "46", "16.7%",
                   "43 expectations", "2020-02-15", "2020-03-07", "method v1",
                   m["release_id"], "too few contributing users"):
        assert figure in page, figure
    # every file of the release is linked (charts as images), and the Data Docs
    hrefs = set(re.findall(r'(?:href|src)="([^"#]+)"', page))
    assert set(files) <= hrefs
    assert "../../../../gx/uncommitted/data_docs/local_site/index.html" in hrefs
    for e in entries:
        if e.file:
            assert f'<img src="{e.file}"\n alt="' in page
            assert f'width="{e.width}" height="{e.height}"' in page
    # escaped everywhere: text, alt text, no script, nothing that names the run
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "scheduled__" not in page and "/data/" not in page
    assert "<script" not in page.lower().replace("&lt;script", "")
    # a chart's file name (which holds its region id) shares no line with a number: the
    # leak scan of published files pairs a region id and a value on one line
    ids = re.compile(r"(?<![\w-])(DM|DM-01)(?![\w-])")
    number = re.compile(r"(?<![\w.:/+-])(-?\d+(?:\.\d+)?)(?![\w.:/]|[-+]\d)")
    for line in page.splitlines():
        assert not (ids.search(line) and number.search(line)), line[:200]


def test_index_of_a_symptoms_release(tmp_path: Path) -> None:
    m = manifest({"2020_DM_weekly_symptoms_dataset.csv": {"sha256": "ab" * 32, "bytes": 9}})
    m.update(report="symptoms", rows={"daily": 12, "weekly": 264},
             suppression={"series": {"daily": 3, "weekly": 30806},
                          "values": {"daily": {"values": 100, "published": 40},
                                     "weekly": {"values": 369672, "published": 1116}},
                          "regions_in_daily_file": 1, "regions_in_weekly_file": 22,
                          "series_with_published_daily_values": 3, "new_scaling_factors": 0},
             parameters={"max_symptoms_per_day": 3})
    m["epsilon"]["split_per_level"] = {"search_users": 0.112, "symptom_searches": 0.448}
    page = render_index(m, [], data_docs_href=None)
    for figure in ("Search Trends symptoms dataset", "264", "1,116", "369,672", "0.3%",
                   "40.0%", "30,806", "0.448", "max_symptoms_per_day",
                   'href="2020_DM_weekly_symptoms_dataset.csv"',
                   "No Data Docs site was recorded", "No region is published"):
        assert figure in page, figure


def test_chart_levels_setting_leaves_levels_out_and_the_page_says_so(
        regions: pd.DataFrame, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from dp_ops.errors import ConfigError
    from dp_ops.settings import load_execution_settings

    assert load_execution_settings({}).chart_levels is None  # default: every level
    assert load_execution_settings({"DP_CHART_LEVELS": "1,0"}).chart_levels == (0, 1)
    assert load_execution_settings({"DP_CHART_LEVELS": "none"}).chart_levels == ()
    with pytest.raises(ConfigError, match="DP_CHART_LEVELS='x'"):
        load_execution_settings({"DP_CHART_LEVELS": "x"})
    monkeypatch.setenv("DP_CHART_LEVELS", "0,1")
    charted, skipped = charts.charted_regions(regions, (0, 1, 2))
    assert set(charted["level"]) == {0, 1} and skipped == [2]
    table = published_table(regions, ["DM", "DM-01", "DM-01-001"])
    entries = charts.write_mobility_charts(table, charted, DAYS, tmp_path)
    assert {e.region_id for e in entries if e.file} == {"DM", "DM-01"}
    assert {e.level for e in entries} == {0, 1}
    monkeypatch.delenv("DP_CHART_LEVELS")
    charted, skipped = charts.charted_regions(regions, (0, 1, 2))
    assert len(charted) == len(regions) and skipped == []
    page = render_index(manifest({}), [], uncharted_levels=[2])
    assert "Not charted in this deployment" in page and "Sub-region 2" in page
