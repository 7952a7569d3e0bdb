"""The mobility release's charts and its section of the release page: what a chart draws
is the published table (gaps where nothing is published, never interpolated), PNG bytes
are reproducible, and ``index.html`` shows the manifest's figures, links every file,
chart and the Data Docs, escapes every text and names no run."""

from __future__ import annotations

import io
import re
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from dp_demo.geography import demo_regions
from PIL import Image

from dp_ops.reports.mobility import charts
from dp_ops.reports.mobility.estimates import CATEGORIES
from dp_ops.reports.mobility.page import published_mobility
from dp_ops.reports.mobility.report import PUBLISHED_COLUMNS
from dp_ops.reports.mobility.spec import SPEC
from dp_ops.steps.charts import chart_style, charted_regions
from dp_ops.steps.page import INDEX_FILE, write_release_index
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
    parks = s.values[list(CATEGORIES).index("parks")]
    assert np.isnan(parks[4]) and np.isnan(parks[9])  # suppressed; no row
    assert np.isnan(s.values[:, 9]).all()
    present = np.delete(np.arange(len(DAYS)), [4, 9])
    assert (parks[present] == -10 + present).all()  # the published integers, as they are
    retail = s.values[0]
    assert np.isnan(retail[9]) and not np.isnan(retail[[4, 8, 10]]).any()


def test_the_lines_given_to_matplotlib_break_at_the_gaps(regions: pd.DataFrame) -> None:
    table = published_table(regions, ["DM-01"])
    (series,) = charts.mobility_series(table, regions, DAYS)
    with chart_style():
        chart = charts.MobilityChart(DAYS)
        png = chart.render(series)
    parks = chart.lines[list(CATEGORIES).index("parks")]
    y = np.asarray(parks.get_ydata(), dtype=float)
    assert np.isnan(y[4]) and np.isnan(y[9]) and np.isfinite(y[[3, 5, 8, 10]]).all()
    assert parks.get_drawstyle() == "default"  # straight segments between published days
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.size == charts.MOBILITY_SIZE


def intervals_of(published: pd.DataFrame, below: int = 6, above: int = 8) -> pd.DataFrame:
    """The intervals file of ``published``: each change from ``below`` under it to
    ``above`` over it (empty where the change is)."""
    frame = published[[c for c in PUBLISHED_COLUMNS if c not in CHANGE]].copy()
    for col in CHANGE:
        frame[f"{col}_low"] = published[col] - below
        frame[f"{col}_high"] = published[col] + above
    return frame


def test_each_series_carries_its_intervals_and_the_chart_draws_them_as_a_band(
        regions: pd.DataFrame) -> None:
    table = published_table(regions, ["DM-01"])
    (series,) = charts.mobility_series(table, regions, DAYS, intervals_of(table))
    parks = list(CATEGORIES).index("parks")
    assert series.low is not None and series.high is not None
    assert series.low[parks, 3] == -10 + 3 - 6 and series.high[parks, 3] == -10 + 3 + 8
    assert np.isnan(series.low[parks, 4]) and np.isnan(series.high[:, 9]).all()
    (plain,) = charts.mobility_series(table, regions, DAYS)
    assert plain.low is None
    with chart_style():
        chart = charts.MobilityChart(DAYS)
        with_band = np.asarray(Image.open(io.BytesIO(chart.render(series))).convert("RGB"))
        without = np.asarray(Image.open(io.BytesIO(chart.render(plain))).convert("RGB"))
    changed = np.any(with_band != without, axis=2)
    # the band tints pixels in every panel; nothing else of the chart moves
    assert changed.sum() > 2000
    height, width = changed.shape
    panel_rows = [changed[: height // 2], changed[height // 2:]]
    assert all(part.any() for part in panel_rows)
    assert not changed[: int(0.12 * height)].any()  # the title area is untouched


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
    assert (drawn.width, drawn.height) == charts.MOBILITY_SIZE
    assert sorted(p.name for p in (tmp_path / "charts").iterdir()) == ["DM-01-001.png"]


def test_only_the_charted_levels_are_drawn(regions: pd.DataFrame,
                                           monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setenv("DP_CHART_LEVELS", "0,1")
    charted, skipped = charted_regions(regions, (0, 1, 2))
    assert skipped == [2]
    table = published_table(regions, ["DM", "DM-01", "DM-01-001"])
    entries = charts.write_mobility_charts(table, charted, DAYS, tmp_path)
    assert {e.region_id for e in entries if e.file} == {"DM", "DM-01"}
    assert {e.level for e in entries} == {0, 1}


def test_every_category_has_a_label() -> None:
    assert list(charts.CATEGORY_LABELS) == list(CATEGORIES) == [
        c.removesuffix("_percent_change_from_baseline") for c in CHANGE]


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
                                 title=SPEC.title, published=published_mobility,
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
    # every file of the release is linked (charts as images), and nothing outside the
    # release (issue 14, finding 9: it linked ../../../../gx/..., inviting whoever serves
    # releases to serve the data root); the Data Docs are named, not linked
    hrefs = set(re.findall(r'(?:href|src)="([^"#]+)"', page))
    assert set(files) <= hrefs
    assert not any(h.startswith(("..", "/")) or "://" in h for h in hrefs), hrefs
    assert "gx/uncommitted/data_docs/local_site/index.html" in page
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


def test_the_published_section_orders_outcomes_and_categories() -> None:
    m = manifest({})
    m["suppression"]["published_share_of_eligible_by_level"] = {
        "2": {"workplaces": 0.25, "odd": 0.5}, "0": {"parks": 1.0, "retail_and_recreation": 0.0}}
    section = published_mobility.render(m)
    assert section.startswith('<section id="published">') and section.endswith("</section>")
    # published first, then by count
    outcomes = [section.index(t) for t in ("<td>published</td>", "too few contributing",
                                           "all six suppressed", "minimum area")]
    assert outcomes == sorted(outcomes)
    # categories in the report's order, unknown ones last; levels by number, labelled
    head = re.search(r"<th>level</th>(.*?)</tr>", section)
    assert head is not None
    assert re.findall(r">([^<]+)</th>", head.group(1)) == [
        "Retail &amp; recreation", "Parks", "Workplaces", "odd"]
    assert section.index("<td>Country</td>") < section.index("<td>Sub-region 2</td>")
