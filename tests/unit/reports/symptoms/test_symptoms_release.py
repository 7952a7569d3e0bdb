"""Assembling, gating and publishing a symptoms release from constructed noisy rows:
Google's header, scaling factors fixed at first release and reused, weekly rows dated
by Mondays, the GX gate blocking a bad release, and the budget split."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from dp_demo.generator import default_symptoms
from dp_demo.geography import demo_regions
from support.dates import date_range
from support.day_records import digests, write_days
from support.spend_requests import spend_request
from support.symptoms_rows import CFG, SYMPTOMS, constructed_rows

from dp_ops.engine.files import write_parquet_atomic
from dp_ops.errors import DerivedStateTampered, GateFailed, PublishRefused
from dp_ops.gx.result import require_pass
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.regions import write_regions
from dp_ops.reports.symptoms import release
from dp_ops.reports.symptoms.assemble import (
    KEY_COLUMNS,
    Candidate,
    build_candidate,
    complete_weeks,
    header,
)
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.reports.symptoms.daily import with_reliability
from dp_ops.reports.symptoms.suites import validate_symptoms_release
from dp_ops.sources.search_activity import symptom_list
from dp_ops.steps import release_flow
from dp_ops.steps.release import read_staged, staging_dir

HEADER_FILE = Path(__file__).resolve().parents[3] / "data" / "google_weekly_symptoms_header.csv"
START = date(2020, 1, 1)  # a Wednesday


@pytest.fixture(scope="module")
def regions() -> pd.DataFrame:
    return demo_regions()


@pytest.fixture(scope="module")
def three_weeks(regions: pd.DataFrame) -> pd.DataFrame:
    return constructed_rows(regions, date_range(START, date(2020, 1, 26)))  # Wed 1 .. Sun 26 Jan


def _empty_scaling() -> pd.DataFrame:
    return pd.DataFrame({"region_id": pd.Series(dtype="str"),
                         "resolution": pd.Series(dtype="str"),
                         "c": pd.Series(dtype="float64"),
                         "first_release_last_date": pd.Series(dtype="str")})


def test_header_is_googles(regions: pd.DataFrame, three_weeks: pd.DataFrame) -> None:
    google = HEADER_FILE.read_text(encoding="utf-8").strip().split(",")
    symptoms = default_symptoms()
    assert len(symptoms) == 422
    assert header(symptoms) == google
    assert google[:8] == list(KEY_COLUMNS)
    candidate = build_candidate(three_weeks, regions, SYMPTOMS, CFG, _empty_scaling())
    assert list(candidate.daily.columns) == header(SYMPTOMS)
    assert list(candidate.weekly.columns) == header(SYMPTOMS)


def test_weekly_rows_are_complete_weeks_dated_by_monday(regions: pd.DataFrame,
                                                        three_weeks: pd.DataFrame) -> None:
    candidate = build_candidate(three_weeks, regions, SYMPTOMS, CFG, _empty_scaling())
    mondays = sorted(candidate.weekly["date"].unique())
    assert mondays == ["2020-01-06", "2020-01-13", "2020-01-20"]  # 1-5 Jan is partial
    assert [d.isoformat() for d in complete_weeks(date(2020, 1, 1), date(2020, 1, 26))] == mondays
    # every published weekly value is dated by the Monday of a complete week
    weekly = candidate.values[candidate.values["resolution"] == "weekly"]
    assert len(weekly) > 0 and set(weekly["date"]) <= set(mondays)
    # (weekly A and B are the sums of the week's seven daily noisy values:
    # test_matrix_weekly_sums_match_the_reference_implementation)


def test_values_follow_the_rules(regions: pd.DataFrame, three_weeks: pd.DataFrame) -> None:
    candidate = build_candidate(three_weeks, regions, SYMPTOMS, CFG, _empty_scaling())
    values = candidate.values
    published = values[values["published"]]
    assert len(published) > 0
    assert published["reliable"].all()
    assert (published["value"] >= 0).all()
    np.testing.assert_allclose(published["value"],
                               (published["c"] * published["ratio"]).round(2))
    # a daily value is published only for a series decided daily
    daily_pub = published[published["resolution"] == "daily"]
    decided = candidate.resolutions.set_index(["region_id", "symptom"])["resolution"]
    assert all(decided[(r, s)] == "daily" for r, s in zip(daily_pub["region_id"],
                                                          daily_pub["symptom"], strict=True))
    # the region under 3 km2 is never in either file
    small = regions.loc[regions["area_km2"] < CFG.min_area_km2, "open_covid_region_code"]
    assert len(small) > 0
    for wide in (candidate.daily, candidate.weekly):
        assert not wide["open_covid_region_code"].isin(small).any()
    # the largest published value of each new (region, resolution) is scaled to 100
    peaks = published.groupby(["region_id", "resolution"])["value"].max()
    assert np.allclose(peaks, 100.0, atol=0.006)
    # a common symptom is daily in the country; a rare one weekly in a small region
    assert decided[("DM", "Fever")] == "daily"
    # the country votes alone: the regions of the other levels are not comparable to it
    votes = candidate.resolutions.set_index(["region_id", "symptom"])
    assert (votes.loc["DM", "voters"] == 1).all() and (votes.loc["DM", "level"] == 0).all()
    smallest = regions[(regions["level"] == 2) & (regions["area_km2"] >= 3)].sort_values(
        "area_km2").iloc[0]["region_id"]
    assert decided[(smallest, "Anosmia")] == "weekly"


def test_every_region_in_a_file_has_every_date(regions: pd.DataFrame,
                                               three_weeks: pd.DataFrame) -> None:
    candidate = build_candidate(three_weeks, regions, SYMPTOMS, CFG, _empty_scaling())
    counts = candidate.daily.groupby("open_covid_region_code")["date"].nunique()
    assert (counts == 26).all()
    assert not candidate.daily.duplicated(["open_covid_region_code", "date"]).any()


def _pivoted(values: pd.DataFrame, regions: pd.DataFrame, dates: list[str]) -> pd.DataFrame:
    """The wide table by a plain pandas pivot (the reference for the block-built one)."""
    shown = values.loc[values["published"], "region_id"].unique()
    part = values[values["region_id"].isin(shown)]
    columns = [f"symptom:{s}" for s in SYMPTOMS]
    grid = pd.MultiIndex.from_product([sorted(shown), dates], names=["region_id", "date"])
    wide = (part.assign(column="symptom:" + part["symptom"])
            .pivot(index=["region_id", "date"], columns="column", values="value")
            .reindex(index=grid, columns=columns))
    wide.columns.name = None
    meta = regions[["region_id", *[c for c in KEY_COLUMNS if c != "date"]]]
    wide = meta.merge(wide.reset_index(), on="region_id", how="inner")
    wide = wide.sort_values(["open_covid_region_code", "date"], kind="stable")
    return wide[[*KEY_COLUMNS, *columns]].reset_index(drop=True)


def test_the_wide_tables_are_the_pivot_of_the_published_values(
        regions: pd.DataFrame, three_weeks: pd.DataFrame) -> None:
    """The files' tables are placed value by value into one float block: the same table,
    cell for cell and type for type, as pandas' pivot; two values for one cell raise."""
    from dp_ops.reports.symptoms.assemble import _wide, eligible_regions

    candidate = build_candidate(three_weeks, regions, SYMPTOMS, CFG, _empty_scaling())
    eligible = eligible_regions(regions, CFG)
    for resolution, table in (("daily", candidate.daily), ("weekly", candidate.weekly)):
        values = candidate.values[candidate.values["resolution"] == resolution]
        dates = sorted(table["date"].unique())
        assert len(values) > 10
        pd.testing.assert_frame_equal(table, _pivoted(values, eligible, dates))
    values = candidate.values[candidate.values["resolution"] == "daily"]
    with pytest.raises(ValueError, match="two published values"):
        _wide(pd.concat([values, values.iloc[:1]]), eligible, SYMPTOMS,
              sorted(candidate.daily["date"].unique()))


def test_scaling_factor_is_reused_by_a_later_release(regions: pd.DataFrame) -> None:
    first_rows = constructed_rows(regions, date_range(START, date(2020, 1, 14)))
    first = build_candidate(first_rows, regions, SYMPTOMS, CFG, _empty_scaling())
    stored = first.scaling[first.scaling["new"]].drop(columns="new")
    assert len(stored) > 0
    # later days search twice as much Fever: values rise above 100 with the stored c
    later_rows = constructed_rows(regions, date_range(START, date(2020, 1, 21)), key=6)
    boost = (later_rows["symptom"] == "Fever") & (later_rows["date"] >= date(2020, 1, 15))
    later_rows.loc[boost, "a_noisy"] *= 2
    later_rows = with_reliability(later_rows.drop(columns=["ratio", "lower", "upper",
                                                           "reliable"]), CFG)
    second = build_candidate(later_rows, regions, SYMPTOMS, CFG, stored)
    merged = stored.merge(second.scaling, on=["region_id", "resolution"], suffixes=("", "_2"))
    assert len(merged) == len(stored)
    assert (merged["c"] == merged["c_2"]).all()  # the stored factor, not a new one
    assert not merged["new"].any()
    assert second.values.loc[second.values["published"], "value"].max() > 100


def test_gx_gate_passes_a_good_release_and_blocks_a_bad_one(
        regions: pd.DataFrame, three_weeks: pd.DataFrame, tmp_path: Path) -> None:
    candidate = build_candidate(three_weeks, regions, SYMPTOMS, CFG, _empty_scaling())
    days = [d.isoformat() for d in date_range(START, date(2020, 1, 26))]
    mondays = [d.isoformat() for d in complete_weeks(START, date(2020, 1, 26))]
    kwargs = {"days": days, "mondays": mondays, "gx_dir": tmp_path / "gx", "cfg": CFG}
    good = validate_symptoms_release(candidate, regions, SYMPTOMS, run_name="good", **kwargs)
    assert good.success, good.failed
    require_pass(good)

    # publish an unreliable value (an empty cell: a failing daily value or a day of a
    # weekly series), and a row for a region under 3 km2
    daily = candidate.daily.copy()
    columns = [c for c in daily.columns if c.startswith("symptom:")]
    row, col = np.argwhere(daily[columns].isna().to_numpy())[0]
    daily.iloc[row, daily.columns.get_loc(columns[col])] = 42.0
    small = regions[regions["area_km2"] < CFG.min_area_km2].iloc[0]
    extra = daily.iloc[[0]].copy()
    extra["open_covid_region_code"] = small["open_covid_region_code"]
    daily = pd.concat([daily, extra], ignore_index=True)
    bad = type(candidate)(**{**candidate.__dict__, "daily": daily})
    result = validate_symptoms_release(bad, regions, SYMPTOMS, run_name="bad", **kwargs)
    assert not result.success
    text = "\n".join(result.failed)
    assert "reliable" in text and "area_km2" in text and "expect_table_row_count" in text
    with pytest.raises(GateFailed, match="Data Docs"):
        require_pass(result)
    assert result.data_docs_index and Path(result.data_docs_index).is_file()


def _gate_at_the_thresholds(candidate: Candidate, regions: pd.DataFrame, gx_dir: Path,
                            below: bool) -> list[str]:
    """Validate ``candidate`` with one published value moved to the gate's numeric limits
    (or just past them, ``below``) and return what failed: its region's area at
    ``min_area_km2`` (or 0.01 km^2 under it), its hull's ends at (1 -/+ t) R moved 0.001 R
    inside the band (or 0.001 R outside it). The band's limits themselves are not hit
    exactly: (1 - t) R / R need not round back to 1 - t."""
    t = CFG.reliability_tolerance
    inside = -0.001 if below else 0.001
    values = candidate.values.copy()
    row = values.index[values["published"]][0]
    ratio = values.at[row, "ratio"]
    values.at[row, "lower"] = (1 - t + inside) * ratio
    values.at[row, "upper"] = (1 + t - inside) * ratio
    moved = regions.copy()
    moved.loc[moved["region_id"] == values.at[row, "region_id"], "area_km2"] = (
        CFG.min_area_km2 - (0.01 if below else 0.0))
    days = [d.isoformat() for d in date_range(START, date(2020, 1, 26))]
    mondays = [d.isoformat() for d in complete_weeks(START, date(2020, 1, 26))]
    result = validate_symptoms_release(
        type(candidate)(**{**candidate.__dict__, "values": values}), moved, SYMPTOMS,
        days=days, mondays=mondays, gx_dir=gx_dir, cfg=CFG, run_name=f"limits-{below}")
    assert result.success is not bool(result.failed)
    return list(result.failed)


def test_gx_gate_fails_just_past_its_area_and_band_limits(
        regions: pd.DataFrame, three_weeks: pd.DataFrame, tmp_path: Path) -> None:
    """Issue 35: the gate's own boundaries, not values far past them: a published region of
    2.99 km^2 (at the defaults) and a hull reaching 0.1% of R past the +/-25% band each
    fail their expectation (the symptoms gate has no minimum-users check: the count a
    value needs is the reliability rule's, checked through ``reliable`` and the band)."""
    candidate = build_candidate(three_weeks, regions, SYMPTOMS, CFG, _empty_scaling())
    failed = _gate_at_the_thresholds(candidate, regions, tmp_path / "gx", below=True)
    between = "symptoms_release_values: expect_column_values_to_be_between"
    for column in ("area_km2", "lower_over_ratio", "upper_over_ratio"):
        assert sum(f.startswith(f"{between} [{column}]") for f in failed) == 1, (column, failed)
    assert len(failed) == 3, failed


def test_gx_gate_passes_at_its_area_and_band_limits(
        regions: pd.DataFrame, three_weeks: pd.DataFrame, tmp_path: Path) -> None:
    """Issue 35: a published region of exactly ``min_area_km2`` (3.00 km^2) and a hull
    0.1% of R inside the band pass: the area limit is inclusive."""
    candidate = build_candidate(three_weeks, regions, SYMPTOMS, CFG, _empty_scaling())
    assert _gate_at_the_thresholds(candidate, regions, tmp_path / "gx", below=False) == []


def test_budget_split_sums_to_the_configured_total() -> None:
    for total, share, k in ((1.68, 0.2, 3), (1.0, 0.5, 1), (2.5, 0.1, 5)):
        cfg = SymptomsConfig(total_epsilon=total, volume_share=share, max_symptoms_per_day=k)
        per_level = cfg.ledger_epsilons
        assert math.isclose(math.fsum(per_level.values()) * len(cfg.levels), total,
                            rel_tol=1e-12)
        assert math.isclose(cfg.run_epsilon, total, rel_tol=1e-12)
        a = cfg.budget("symptom_searches")
        assert a.contributions == k and math.isclose(a.cell_epsilon * k,
                                                     per_level["symptom_searches"])
        assert math.isclose(per_level["search_users"], total / 3 * share)


def _url(root: DataRoot) -> str:
    """The ledger of a test's data root (``<tmp>/data``): ``<tmp>/ledger.sqlite``."""
    return f"sqlite:///{root.root.parent / 'ledger.sqlite'}"


def _stage(root: DataRoot, rows: pd.DataFrame, regions: pd.DataFrame, run_id: str) -> None:
    write_days(root, rows, url=_url(root))  # as the report step writes them: recorded
    release_flow.stage_and_validate(release.PARTS, root, CFG, run_id=run_id, ledger_url=_url(root))


def _publishable(regions: pd.DataFrame, tmp_path: Path) -> tuple[DataRoot, str, pd.DataFrame]:
    """A data root with the reference files, its ledger URL and 14 days of report rows."""
    root = DataRoot(tmp_path / "data")
    write_regions(regions, root.regions_csv)
    symptom_list(root).write_text("\n".join(SYMPTOMS) + "\n")
    rows = constructed_rows(regions, date_range(START, date(2020, 1, 14)))
    return root, f"sqlite:///{tmp_path / 'ledger.sqlite'}", rows


@pytest.mark.slow
def test_publish_stores_factors_and_a_racing_stage_adopts_them(
        regions: pd.DataFrame, tmp_path: Path) -> None:
    """Two runs staged before either published: the second to publish rebuilds with the
    factors the first stored, so the stored c is the one behind every published value."""
    root, url, rows = _publishable(regions, tmp_path)
    _stage(root, rows[rows["date"] <= date(2020, 1, 7)], regions, "run-a")
    _stage(root, rows, regions, "run-b")  # days 1..14, proposes its own factors
    release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-a", ledger_url=url)
    stored_a = release.read_scaling(root, Ledger(url))[0]
    assert len(stored_a) > 0
    release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-b", ledger_url=url)
    stored = release.read_scaling(root, Ledger(url))[0]
    # run-a's factors are unchanged; run-b only added pairs run-a did not have
    merged = stored_a.merge(stored, on=["region_id", "resolution"], suffixes=("", "_b"))
    assert (merged["c"] == merged["c_b"]).all()
    latest = root.latest_release("symptoms")
    manifest = json.loads((latest / "manifest.json").read_text())
    assert manifest["last_date"] == "2020-01-14"
    published = pd.read_parquet(latest / "scaling_factors.parquet")
    check = published.merge(stored, on=["region_id", "resolution"], suffixes=("", "_s"))
    assert len(check) == len(published) and (check["c"] == check["c_s"]).all()
    assert (latest / "2020_DM_daily_symptoms_dataset.csv").is_file()
    assert (latest / "2020_DM_weekly_symptoms_dataset.csv").is_file()
    # nothing to publish twice: the staging area is gone
    with pytest.raises(PublishRefused, match="no staged release at .* for run 'run-b'"):
        release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-b", ledger_url=url)


def test_a_release_with_nothing_published_yet_is_valid(regions: pd.DataFrame,
                                                       tmp_path: Path) -> None:
    """Day one of a small population: nothing passes the rule; the files are empty but
    well-formed and no scaling factor is fixed."""
    rows = constructed_rows(regions, date_range(START, date(2020, 1, 1)))
    rows["reliable"] = False
    candidate = build_candidate(rows, regions, SYMPTOMS, CFG, _empty_scaling())
    assert candidate.daily.empty and candidate.weekly.empty
    assert list(candidate.daily.columns) == header(SYMPTOMS)
    assert not candidate.scaling["new"].any()
    result = validate_symptoms_release(candidate, regions, SYMPTOMS, days=["2020-01-01"],
                                       mondays=[], gx_dir=tmp_path / "gx", cfg=CFG,
                                       run_name="empty")
    assert result.success, result.failed


def test_matrix_weekly_sums_match_the_reference_implementation(
        three_weeks: pd.DataFrame) -> None:
    """The release step sums weeks on (days x cells) matrices; the long-table reference
    (tests/support/symptoms_reference.py, with its own tests) must agree cell by cell."""
    from support.symptoms_reference import weekly_sums

    from dp_ops.reports.symptoms.matrix import from_rows, long_frame, weekly

    m = from_rows(three_weeks)
    mondays, a_w, b_w, params = weekly(m)
    fast = long_frame(m.cells, mondays, a_w, b_w, params, 7)
    reference = weekly_sums(three_weeks, m.days[0], m.days[-1]).rename(
        columns={"week_start": "date"})
    keys = ["region_id", "symptom", "date"]
    merged = fast.merge(reference, on=keys, suffixes=("", "_ref"), validate="one_to_one")
    assert len(merged) == len(fast) == len(reference)
    for col in ("a_noisy", "b_noisy", "a_epsilon", "b_epsilon"):
        assert (merged[col] == merged[f"{col}_ref"]).all(), col


def test_a_period_must_share_one_domain(regions: pd.DataFrame, tmp_path: Path) -> None:
    from dp_ops.reports.symptoms.matrix import read_days

    root = DataRoot(tmp_path)
    rows = constructed_rows(regions, date_range(START, date(2020, 1, 2)))
    # the list changed overnight
    rows = rows[(rows["date"] != START + timedelta(days=1)) | (rows["symptom"] != "Anosmia")]
    write_days(root, rows)
    with pytest.raises(ValueError, match="date=2020-01-02.*differ from those of 2020-01-01"):
        read_days(root, "symptoms", date_range(START, date(2020, 1, 2)), digests(root))


def test_publish_refuses_a_release_over_the_cap(regions: pd.DataFrame, tmp_path: Path) -> None:
    """The ledger shows more spent on a released date than the cap allows (e.g. the cap was
    lowered after an extra re-noise): the staged release is not published."""
    from dp_ops.privacy.ledger import Ledger, Slot

    root = DataRoot(tmp_path / "data")
    write_regions(regions, root.regions_csv)
    symptom_list(root).write_text("\n".join(SYMPTOMS) + "\n")
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    rows = constructed_rows(regions, date_range(START, date(2020, 1, 2)))
    _stage(root, rows, regions, "over-cap")
    ledger = Ledger(url)
    try:
        ledger.reserve([spend_request(Slot("symptoms", day, level, metric), eps)
                        for day in date_range(START, date(2020, 1, 2)) for level in CFG.levels
                        for metric, eps in CFG.ledger_epsilons.items()],
                       run_id="r", kind="noise", cap=CFG.cap, method_version="v1")
    finally:
        ledger.dispose()
    lowered = SymptomsConfig(cap_override=1.5)
    with pytest.raises(PublishRefused, match="over the cap 1.5000"):
        release_flow.publish_staged(release.PARTS, root, lowered, run_id="over-cap", ledger_url=url)
    assert not root.latest_release("symptoms").exists()
    assert not root.scaling_file("symptoms").exists()


def test_scaling_factors_multiplied_by_ten_are_refused(regions: pd.DataFrame,
                                                      tmp_path: Path) -> None:
    """Issue 14, finding 6: multiplying the stored scaling factors by 10 was published
    silently. Each version of the file is recorded in the ledger before it replaces the
    last; the next publish verifies it and refuses, naming the file, nothing published."""
    root, url, rows = _publishable(regions, tmp_path)
    _stage(root, rows[rows["date"] <= date(2020, 1, 7)], regions, "run-a")
    release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-a", ledger_url=url)
    first = json.loads((root.latest_release("symptoms") / "manifest.json").read_text())
    path = root.scaling_file("symptoms")
    scaling = pd.read_parquet(path)
    scaling["c"] = scaling["c"] * 10
    write_parquet_atomic(pa.Table.from_pandas(scaling, preserve_index=False), path)
    # the gate reads them as the ledger recorded them: refused there already
    with pytest.raises(DerivedStateTampered, match="scaling_factors.parquet has sha256"):
        _stage(root, rows, regions, "run-b")
    with pytest.raises(PublishRefused, match="no staged release"):
        release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-b", ledger_url=url)
    latest = json.loads((root.latest_release("symptoms") / "manifest.json").read_text())
    assert latest["release_id"] == first["release_id"]
    path.unlink()
    with pytest.raises(DerivedStateTampered, match="is missing"):
        release.read_scaling(root, Ledger(url))[0]


@pytest.mark.slow
def test_a_publish_overtaken_by_a_later_release_rebuilds_instead_of_skipping(
        regions: pd.DataFrame, tmp_path: Path) -> None:
    """Issue 14, finding 6: a publish that found a release covering later days kept it and
    exited 0, having spent for values it never published. Now it keeps that release only
    when it provably holds the run's values (built from the per-day files as they are now,
    recorded in its manifest); otherwise it rebuilds from the current state under the
    publish lock and publishes that."""
    def overtaken(where: Path) -> tuple[DataRoot, str, pd.DataFrame, dict[str, Any]]:
        where.mkdir()
        root, url, rows = _publishable(regions, where)
        _stage(root, rows[rows["date"] <= date(2020, 1, 7)], regions, "run-old")
        _stage(root, rows, regions, "run-new")
        release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-new", ledger_url=url)
        newer = json.loads((root.latest_release("symptoms") / "manifest.json").read_text())
        assert newer["inputs"]["report_days_sha256"]
        return root, url, rows, newer

    # issue 16: the newer release holds run-old's days from the same files: kept as it is
    # (a rebuild would give the same files), and the run says so
    root, url, rows, newer = overtaken(tmp_path / "same")
    kept = release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-old", ledger_url=url)
    assert "holds this run's days 2020-01-01..2020-01-07" in kept.summary
    assert kept.event is None
    assert not staging_dir(root, "symptoms", "run-old").exists()
    assert json.loads((root.latest_release("symptoms") / "manifest.json").read_text()) == newer
    # a day the newer release holds was rewritten since (e.g. an on-call re-noise): the
    # overtaken publish rebuilds from the current state and publishes that
    root, url, rows, newer = overtaken(tmp_path / "changed")
    changed = rows[rows["date"] == date(2020, 1, 8)].copy()
    changed["a_noisy"] = changed["a_noisy"] * 3 // 2  # every published value moves
    changed = with_reliability(changed.drop(columns=["ratio", "lower", "upper", "reliable"]),
                               CFG)
    write_days(root, changed, url=url)  # the report step rewrites (and records) the day
    result = release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-old", ledger_url=url)
    assert result.summary.startswith("published symptoms release")
    manifest = json.loads((root.latest_release("symptoms") / "manifest.json").read_text())
    assert manifest["last_date"] == "2020-01-14"
    assert manifest["release_id"] in result.summary
    assert manifest["release_id"] != newer["release_id"]
    assert manifest["inputs"]["report_days_sha256"] != newer["inputs"]["report_days_sha256"]


@pytest.mark.slow
def test_the_gate_and_publish_enforce_the_release_contract(
        regions: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15, point 7: staged files are checked against the shipped column schema at
    the gate, and the manifest against the manifest schema before publish promotes."""
    import copy

    from dp_ops.steps import release_contract, release_flow

    root, url, rows = _publishable(regions, tmp_path)
    contract = copy.deepcopy(release.CONTRACT)
    contract["files"][0]["columns"].insert(1, {"name": "region_name", "type": "string",
                                               "nullable": False})
    monkeypatch.setattr(type(release.PARTS), "column_contract", contract)
    with pytest.raises(GateFailed, match="release contract symptoms.columns.json"):
        _stage(root, rows, regions, "run-a")
    monkeypatch.setattr(type(release.PARTS), "column_contract", release.CONTRACT)
    _stage(root, rows, regions, "run-a")
    monkeypatch.setattr(release_flow, "SCHEMA_VERSION", "0.9")  # a manifest of another version
    with pytest.raises(PublishRefused, match="manifest.schema.json"):
        release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-a", ledger_url=url)
    assert not root.latest_release("symptoms").exists()
    assert not root.scaling_file("symptoms").exists()  # refused before anything changed
    monkeypatch.undo()
    release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-a", ledger_url=url)
    manifest = json.loads((root.latest_release("symptoms") / "manifest.json").read_text())
    assert manifest["schema_version"] == release_contract.SCHEMA_VERSION
    assert release_contract.check_manifest(manifest) == []
    # the data statement is in the release, listed and checksummed, and on its page
    latest = root.latest_release("symptoms")
    assert "DATASTATEMENT.md" in manifest["files"]
    statement = (latest / "DATASTATEMENT.md").read_text()
    assert statement.startswith("# Data statement: ") and "delta = 0" in statement
    assert '<section id="statement">' in (latest / "index.html").read_text()


def _counting_validation(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each Great Expectations validation a gate runs (by run name)."""
    from dp_ops.reports.symptoms import suites

    calls: list[str] = []
    real = suites.validate_symptoms_release

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["run_name"])
        return real(*args, **kwargs)

    monkeypatch.setattr(suites, "validate_symptoms_release", counted)
    return calls


def test_a_gate_beside_a_twin_copies_its_staged_release(
        regions: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16: two gates of a backfill that see the same days build the same release;
    the second copies the first's staged files and gate result instead of validating and
    drawing them again, and its publish finds that release out already."""
    root, url, rows = _publishable(regions, tmp_path)
    validations = _counting_validation(monkeypatch)
    _stage(root, rows, regions, "run-a")
    result = release_flow.stage_and_validate(release.PARTS, root, CFG, run_id="run-b",
                                             ledger_url=url)
    assert validations == ["symptoms-run-a"]  # run-b validated nothing itself
    assert "is the one run run-a staged from the same inputs" in result.summary
    a_dir = staging_dir(root, "symptoms", "run-a")
    b_dir = staging_dir(root, "symptoms", "run-b")
    a, b = (read_staged(d) for d in (a_dir, b_dir))
    assert a is not None and b is not None
    assert b.reused_from == "run-a" and b.run_id == "run-b"
    assert replace(b, run_id="run-a", reused_from=None) == a
    for name in a.files:
        assert (b_dir / "release" / name).read_bytes() == (a_dir / "release" / name).read_bytes()
    # run-a publishes and stores its new scaling factors; run-b's release is the same one,
    # so it is not rebuilt for the changed factors
    release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-a", ledger_url=url)
    latest = (root.latest_release("symptoms") / "manifest.json").read_text()
    done = release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-b", ledger_url=url)
    assert "is out already: run run-a published these staged files" in done.summary
    assert done.event is None and validations == ["symptoms-run-a"]
    assert (root.latest_release("symptoms") / "manifest.json").read_text() == latest
    assert not b_dir.exists()


@pytest.mark.slow
@pytest.mark.parametrize("change", ["input", "tampered", "old"])
def test_a_gate_builds_again_when_its_twin_does_not_hold(
        regions: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        change: str) -> None:
    """A staged release is reused only for the same inputs (a rewritten day file is
    another build), only as the exact files its record lists, and only for an hour."""
    import os

    root, url, rows = _publishable(regions, tmp_path)
    validations = _counting_validation(monkeypatch)
    _stage(root, rows, regions, "run-a")
    a_dir = staging_dir(root, "symptoms", "run-a")
    if change == "input":
        day = rows[rows["date"] == date(2020, 1, 8)].copy()
        day["a_noisy"] = day["a_noisy"] * 3 // 2
        day = with_reliability(day.drop(columns=["ratio", "lower", "upper", "reliable"]), CFG)
        write_days(root, day, url=url)  # the report step rewrites (and records) the day
    elif change == "tampered":
        csv = a_dir / "release" / "2020_DM_daily_symptoms_dataset.csv"
        csv.write_text(csv.read_text().replace(",", ";", 1))
    else:
        hours_ago = os.stat(a_dir / "staged.json").st_mtime - 2 * 3600
        os.utime(a_dir / "staged.json", (hours_ago, hours_ago))
    result = release_flow.stage_and_validate(release.PARTS, root, CFG, run_id="run-b",
                                             ledger_url=url)
    assert validations == ["symptoms-run-a", "symptoms-run-b"]
    assert result.summary.startswith("symptoms release candidate 2020-01-01..2020-01-14 passed")
    b = read_staged(staging_dir(root, "symptoms", "run-b"))
    assert b is not None and b.reused_from is None
    release_flow.publish_staged(release.PARTS, root, CFG, run_id="run-b", ledger_url=url)


def test_gx_gate_checks_each_published_cell_against_what_it_was_derived_from(
        regions: pd.DataFrame, three_weeks: pd.DataFrame, tmp_path: Path) -> None:
    """Issue 35 (surviving mutants of ``published_values``): a published daily value moved
    by 0.02 from c x A / B, a weekly row dated by a Tuesday, and a row for a region code the
    region table does not hold each fail their own rule of the values suite (the value
    check, the Monday check, a region with no area) -- none is dropped by a join or left
    null where GX would skip it."""
    candidate = build_candidate(three_weeks, regions, SYMPTOMS, CFG, _empty_scaling())
    daily, weekly = candidate.daily.copy(), candidate.weekly.copy()
    columns = [c for c in daily.columns if c.startswith("symptom:")]
    row, col = np.argwhere(daily[columns].notna().to_numpy())[0]
    daily.iloc[row, daily.columns.get_loc(columns[col])] += 0.02
    stranger = daily.iloc[[row]].copy()
    stranger["open_covid_region_code"] = "ZZ-NOWHERE"
    daily = pd.concat([daily, stranger], ignore_index=True)
    tuesday = weekly["date"].iloc[0]
    weekly.loc[weekly["date"] == tuesday, "date"] = (
        date.fromisoformat(tuesday) + timedelta(days=1)).isoformat()
    tampered = type(candidate)(**{**candidate.__dict__, "daily": daily, "weekly": weekly})
    days = [d.isoformat() for d in date_range(START, date(2020, 1, 26))]
    mondays = [d.isoformat() for d in complete_weeks(START, date(2020, 1, 26))]
    result = validate_symptoms_release(tampered, regions, SYMPTOMS, days=days,
                                       mondays=mondays, gx_dir=tmp_path / "gx", cfg=CFG,
                                       run_name="cells")
    values = "symptoms_release_values: expect_column_values_to_"
    failed = [f[len(values):] for f in result.failed if f.startswith(values)]
    assert any(f.startswith("be_between [value_error]") for f in failed), failed
    assert any(f.startswith("be_in_set [weekday where") for f in failed), failed
    for column in ("region_id", "area_km2"):
        assert any(f.startswith(f"not_be_null [{column}]") for f in failed), failed


def test_a_week_in_which_nothing_passes_leaves_an_empty_weekly_file_that_is_valid(
        regions: pd.DataFrame, three_weeks: pd.DataFrame, tmp_path: Path) -> None:
    """Complete weeks exist but no weekly value passed the rule: the weekly file has no
    region, so it need not hold the weeks' Mondays (the date checks count only the
    regions in a file). Data Docs name each table: the three data assets, each result's
    page named by its asset."""
    from dp_ops.gx.project import DATA_SOURCE

    candidate = build_candidate(three_weeks, regions, SYMPTOMS, CFG, _empty_scaling())
    values = candidate.values[candidate.values["resolution"] != "weekly"]
    quiet = type(candidate)(**{**candidate.__dict__, "weekly": candidate.weekly.iloc[:0],
                               "values": values})
    mondays = [d.isoformat() for d in complete_weeks(START, date(2020, 1, 26))]
    assert mondays and not quiet.daily.empty
    result = validate_symptoms_release(
        quiet, regions, SYMPTOMS,
        days=[d.isoformat() for d in date_range(START, date(2020, 1, 26))], mondays=mondays,
        gx_dir=tmp_path / "gx", cfg=CFG, run_name="quiet-week")
    assert result.success, result.failed
    names = {Path(p).stem for p in result.validation_pages}
    assert names == {f"{DATA_SOURCE}-{a}"
                     for a in ("symptoms_daily", "symptoms_weekly", "symptoms_values")}


def test_every_published_value_has_its_interval_in_the_interval_tables(
        regions: pd.DataFrame, three_weeks: pd.DataFrame) -> None:
    """One row per published value, in the wide file's order, its value the wide file's
    cell; the interval is c x the 95% interval of the true ratio, rounded outwards to the
    cent, and wider than the reliability rule's (55%) hull the value was published on."""
    candidate = build_candidate(three_weeks, regions, SYMPTOMS, CFG, _empty_scaling())
    for resolution, wide, table in (
            ("daily", candidate.daily, candidate.daily_intervals),
            ("weekly", candidate.weekly, candidate.weekly_intervals)):
        values = candidate.values[candidate.values["resolution"] == resolution]
        assert len(table) == len(values) > 10
        assert list(table.columns) == [*KEY_COLUMNS, "symptom", "value", "low", "high"]
        cells = wide.set_index(["open_covid_region_code", "date"])
        for row in table.sample(10, random_state=1).itertuples(index=False):
            assert cells.loc[(row.open_covid_region_code, row.date),
                             f"symptom:{row.symptom}"] == row.value
        merged = table.merge(values[["region_id", "date", "symptom", "c", "lower", "upper",
                                     "low", "high"]].rename(columns={"low": "r_low",
                                                                     "high": "r_high"}),
                             on=["date", "symptom"], how="inner").merge(
            regions[["region_id", "open_covid_region_code"]],
            on=["region_id", "open_covid_region_code"])
        assert len(merged) == len(table)
        assert (merged["low"] <= merged["c"] * merged["r_low"] + 1e-9).all()
        assert (merged["high"] >= merged["c"] * merged["r_high"] - 1e-9).all()
        assert (merged["c"] * merged["r_low"] - merged["low"] < 0.01 + 1e-9).all()
        assert ((merged["r_low"] <= merged["lower"]) & (merged["r_high"] >= merged["upper"])
                ).all()
        assert (table["low"] <= table["high"]).all()
