"""The symptoms release's charts and its section of the release page: a symptom is drawn
daily where it is published daily and as weekly steps otherwise, gaps stay gaps, and the
page shows the manifest's figures."""

from __future__ import annotations

import io
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from dp_demo.geography import demo_regions
from PIL import Image

from dp_ops.reports.symptoms import charts
from dp_ops.reports.symptoms.assemble import KEY_COLUMNS as SYMPTOM_KEYS
from dp_ops.reports.symptoms.page import published_symptoms
from dp_ops.reports.symptoms.spec import SPEC
from dp_ops.steps.charts import chart_style
from dp_ops.steps.page import render_index


@pytest.fixture(scope="module")
def regions() -> pd.DataFrame:
    return demo_regions()


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
    with chart_style():
        chart = charts.SymptomChart(days, top=2)
        png = chart.render(dm)
    assert chart.lines[0].get_drawstyle() == "steps-post"
    assert np.isnan(np.asarray(chart.lines[1].get_ydata(), dtype=float)[3])
    assert Image.open(io.BytesIO(png)).size == charts.SYMPTOMS_SIZE


def interval_tables(daily: pd.DataFrame, weekly: pd.DataFrame
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The interval tables of the wide files: each value from 2 under it to 3 over it."""
    out = []
    for wide in (daily, weekly):
        cols = [c for c in wide.columns if c.startswith("symptom:")]
        long = wide.melt(id_vars=list(SYMPTOM_KEYS), value_vars=cols, var_name="symptom",
                         value_name="value").dropna(subset=["value"])
        long["symptom"] = long["symptom"].str.removeprefix("symptom:")
        out.append(long.assign(low=long["value"] - 2, high=long["value"] + 3))
    return out[0], out[1]


def test_each_line_carries_its_intervals_and_the_chart_draws_their_band(
        regions: pd.DataFrame) -> None:
    daily, weekly, days = symptom_tables(regions)
    bands = interval_tables(daily, weekly)
    series = {s.region_id: s for s in charts.symptom_series(daily, weekly, regions, days,
                                                             top=2, intervals=bands)}
    cough, fever = series["DM"].lines
    assert fever.low is not None and fever.high is not None
    assert (fever.low[4], fever.high[4]) == (12.0, 17.0) and np.isnan(fever.low[3])
    assert cough.low is not None and cough.high is not None
    assert cough.low[0] == 48.0 and cough.high[0] == 53.0 and np.isnan(cough.high[1])
    plain = {s.region_id: s for s in charts.symptom_series(daily, weekly, regions, days,
                                                            top=2)}
    assert plain["DM"].lines[0].low is None
    with chart_style():
        chart = charts.SymptomChart(days, top=2)
        with_band = np.asarray(Image.open(io.BytesIO(chart.render(series["DM"]))).convert("RGB"))
        without = np.asarray(Image.open(io.BytesIO(chart.render(plain["DM"]))).convert("RGB"))
    changed = np.any(with_band != without, axis=2)
    assert changed.sum() > 500
    assert not changed[: int(0.15 * changed.shape[0])].any()  # title and caption unchanged


def test_charts_are_written_for_the_regions_in_either_file(regions: pd.DataFrame,
                                                           tmp_path: Path) -> None:
    daily, weekly, days = symptom_tables(regions)
    entries = charts.write_symptom_charts(daily, weekly, regions, days, tmp_path, top=2)
    assert len(entries) == len(regions)
    drawn = {e.region_id: e for e in entries if e.file}
    assert set(drawn) == {"DM", "DM-01"}
    assert drawn["DM"].alt == ("Top symptoms in Demoland, 2020-01-01 to 2020-01-14: "
                               "Cough (weekly), Fever (daily)")
    assert (drawn["DM"].width, drawn["DM"].height) == charts.SYMPTOMS_SIZE
    assert sorted(p.name for p in (tmp_path / "charts").iterdir()) == ["DM-01.png", "DM.png"]
    again = charts.write_symptom_charts(daily, weekly, regions, days, tmp_path / "b", top=2)
    assert [e.as_dict() for e in again] == [e.as_dict() for e in entries]
    for name in ("charts/DM.png", "charts/DM-01.png"):
        assert (tmp_path / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_index_of_a_symptoms_release() -> None:
    m: dict[str, Any] = {
        "report": "symptoms", "release_id": "2020-03-07-0123456789ab",
        "software_version": "0.1.0", "method_version": "v1", "first_date": "2020-02-15",
        "last_date": "2020-03-07", "method_updates": [],
        "rows": {"daily": 12, "weekly": 264},
        "suppression": {"series": {"daily": 3, "weekly": 30806},
                        "values": {"daily": {"values": 100, "published": 40},
                                   "weekly": {"values": 369672, "published": 1116}},
                        "regions_in_daily_file": 1, "regions_in_weekly_file": 22,
                        "series_with_published_daily_values": 3, "new_scaling_factors": 0},
        "parameters": {"max_symptoms_per_day": 3},
        "epsilon": {"privacy_unit": "user-day", "delta": 0, "composition": "basic",
                    "per_user_day_max": 1.68, "per_user_day_normal_run": 1.68,
                    "cap": 3.528, "dates_accounted": 81, "dates_over_normal_run": [],
                    "split_per_level": {"search_users": 0.112, "symptom_searches": 0.448}},
        "files": {"2020_DM_weekly_symptoms_dataset.csv": {"sha256": "ab" * 32, "bytes": 9}},
        "gate": {"success": True, "evaluated": 48},
    }
    page = render_index(m, [], title=SPEC.title, published=published_symptoms,
                        data_docs_href=None)
    for figure in ("Search Trends symptoms dataset", "264", "1,116", "369,672", "0.3%",
                   "40.0%", "30,806", "0.448", "max_symptoms_per_day",
                   'href="2020_DM_weekly_symptoms_dataset.csv"',
                   "No Data Docs site was recorded", "No region is published"):
        assert figure in page, figure
