"""The report-agnostic part of release charts and the release page: chart file names,
date ticks, lone points, the charted levels, and ``index.html`` with the report's own
"What is published" section passed in (the reports' charts and sections are tested in
tests/unit/reports/*/test_*_charts.py)."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from dp_demo.geography import demo_regions

from dp_ops.steps import charts
from dp_ops.steps.page import INDEX_FILE, PublishedSection, render_index, write_release_index
from dp_ops.steps.release import sha256_file

FIRST = date(2020, 2, 15)
DAYS = [(FIRST + timedelta(days=i)).isoformat() for i in range(21)]


@pytest.fixture(scope="module")
def regions() -> pd.DataFrame:
    return demo_regions()


def test_a_lone_published_value_gets_a_marker() -> None:
    values = np.array([np.nan, 3.0, np.nan, 4.0, 5.0, np.nan, 6.0])
    lone = charts.isolated(values)
    assert np.isnan(lone[[0, 2, 3, 4, 5]]).all()
    assert lone[1] == 3.0 and lone[6] == 6.0


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


def test_entries_list_every_region_in_index_order(regions: pd.DataFrame) -> None:
    entries = charts.chart_entries(regions, {"DM-01": ("charts/DM-01.png", "alt")}, (10, 20))
    assert len(entries) == len(regions)
    assert [e.level for e in entries] == sorted(e.level for e in entries)
    assert entries[0].region_id == "DM" and entries[0].file is None
    (drawn,) = [e for e in entries if e.file]
    assert (drawn.region_id, drawn.alt, drawn.width, drawn.height) == ("DM-01", "alt", 10, 20)
    assert drawn.names == ("Demoland", "Harrow County")
    assert drawn.title == "Demoland / Harrow County"


# -- the release page ---------------------------------------------------------------------
def manifest(files: dict[str, Any]) -> dict[str, Any]:
    return {
        "report": "mobility", "release_id": "2020-03-07-0123456789ab",
        "run_id": "scheduled__2020-03-08T00:00:00+00:00", "software_version": "0.1.0",
        "method_version": "v1", "first_date": "2020-02-15", "last_date": "2020-03-07",
        "method_updates": [],
        "rows": {"published": 570, "domain": 3404},
        "epsilon": {"privacy_unit": "user-day", "delta": 0, "composition": "basic",
                    "per_user_day_max": 8.58, "per_user_day_normal_run": 8.58,
                    "cap": 18.018, "dates_accounted": 81, "dates_over_normal_run": [],
                    "sum_over_dates": 694.98},
        "files": files,
        "gate": {"success": True, "evaluated": 43,
                 "data_docs": "/data/gx/uncommitted/data_docs/local_site/index.html"},
    }


# a stand-in for a report's "What is published" section (tests/support/templates)
section = PublishedSection("support:published.html", lambda m: {
    "rows": m["rows"]["published"], "more": "& more"})


def test_index_holds_the_reports_section_links_every_file_and_names_no_run(
        tmp_path: Path) -> None:
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "DM-01.png").write_bytes(b"png")
    (tmp_path / "data file.csv").write_text("x\n")
    files = {p.relative_to(tmp_path).as_posix(): {"sha256": sha256_file(p),
                                                  "bytes": p.stat().st_size}
             for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    m = manifest(files)
    entries = [{"region_id": "DM-01", "level": 1, "title": "Demoland / <b>", "file":
                "charts/DM-01.png", "names": ["Demoland", "<b>"], "alt": "a \"b\"",
                "width": 720, "height": 420}]
    release_dir = Path("/data/published/mobility/releases") / m["release_id"]
    listed = write_release_index(tmp_path, m, entries, title="Community Mobility Report",
                                 published=section,
                                 data_docs=m["gate"]["data_docs"], release_dir=release_dir,
                                 data_root=Path("/data"))
    page = (tmp_path / INDEX_FILE).read_text(encoding="utf-8")
    assert listed[INDEX_FILE]["sha256"] == sha256_file(tmp_path / INDEX_FILE)
    assert set(listed) == set(files) | {INDEX_FILE}
    assert page.count('<section id="published">') == 1
    assert '<section id="published"><p>570 rows &amp; more</p></section>' in page
    assert page.index('id="privacy"') < page.index('id="published"') < page.index('id="files"')
    for figure in ("Community Mobility Report", "8.58", "18.018", "43 expectations",
                   "2020-02-15", "2020-03-07", "method v1", m["release_id"]):
        assert figure in page, figure
    assert 'href="data%20file.csv"' in page and '<img src="charts/DM-01.png"' in page
    # the Data Docs are named under the data root, never linked out of the release
    assert "gx/uncommitted/data_docs/local_site/index.html" in page
    assert "../" not in page
    assert "Demoland / &lt;b&gt;" in page and 'alt="a &quot;b&quot;"' in page
    assert "Demoland / <b>" not in page and "<b></a>" not in page
    assert '">&lt;b&gt;</a>' in page  # the region's own name, linked to its chart
    assert "scheduled__" not in page and "/data/" not in page


def test_chart_levels_setting_leaves_levels_out_and_the_page_says_so(
        regions: pd.DataFrame, monkeypatch: pytest.MonkeyPatch) -> None:
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
    monkeypatch.delenv("DP_CHART_LEVELS")
    charted, skipped = charts.charted_regions(regions, (0, 1, 2))
    assert len(charted) == len(regions) and skipped == []
    page = render_index(manifest({}), [], title="T", published=section,
                        uncharted_levels=[2])
    assert "Not charted in this deployment" in page and "Sub-region 2" in page
    assert charts.LEVEL_LABELS[2] == "Sub-region 2"
    page = render_index(manifest({}), [], title="T", published=section)
    assert "No region is published" in page and "No Data Docs site was recorded" in page


def test_region_texts_are_drawn_by_pillow_where_matplotlib_would_put_them() -> None:
    import io

    from PIL import Image

    def render(title: str) -> tuple[Any, charts.RegionText | None]:
        with charts.chart_style():
            fig = charts.BlitFigure((300, 120))
            text = fig.figure.text(0.05, 0.9, "", fontsize=10.5, fontweight="bold",
                                   va="top", animated=True)
            fig.background("only", lambda _key: None)
            text.set_text(title)
            fig.draw(text)
            kept = fig._texts[0] if fig._texts else None
            return np.asarray(Image.open(io.BytesIO(fig.png())).convert("L")), kept

    blank, _ = render("")
    titled, kept = render("Demoland")
    assert kept is not None
    # top-left anchored at (0.05, 0.9) of a 300 x 120 figure: 15 px in, 12 px down
    assert kept.anchor == "la" and kept.xy == pytest.approx((15.0, 12.0))
    assert kept.size == pytest.approx(10.5 * charts.DPI / 72)
    assert kept.font.endswith("DejaVuSans-Bold.ttf")
    assert (blank == 255).all()  # nothing else was drawn
    ink = np.argwhere(titled < 128)
    assert len(ink) > 50
    top, left = ink.min(axis=0)
    assert 10 <= top <= 16 and 14 <= left <= 18  # the text starts at its anchor
    assert render("Demoland")[0].tobytes() == titled.tobytes()  # reproducible
