"""Daily or weekly per series (dp_ops.reports.symptoms.granularity): the rolling majority over
regions of the same level ordered by noisy volume, the "more than half" rule, and the
weekly sums. All inputs are constructed, no randomness beyond fixed seeds."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest
from support.dates import date_range
from support.symptoms_reference import weekly_sums

from dp_ops.reports.symptoms.granularity import decide_resolution


def _series(unreliable_by_rank: list[bool], symptom: str = "Fever",
            seed: int = 0) -> tuple[pd.DataFrame, pd.Series]:
    """Regions R00.. of level 2 with volumes decreasing with rank; rows in shuffled
    order."""
    n = len(unreliable_by_rank)
    regions = [f"R{i:02d}" for i in range(n)]
    volume = pd.Series(1000.0 - 10 * np.arange(n), index=regions)
    series = pd.DataFrame({"region_id": regions, "symptom": symptom, "level": 2,
                           "daily_unreliable": unreliable_by_rank})
    order = np.random.default_rng(seed).permutation(n)
    return series.iloc[order].reset_index(drop=True), volume


def _by_region(decided: pd.DataFrame) -> dict[str, str]:
    return dict(zip(decided["region_id"], decided["resolution"], strict=True))


# -- decide_resolution ---------------------------------------------------------------------

def test_low_volume_half_goes_weekly() -> None:
    series, volume = _series([False] * 15 + [True] * 15)
    decided = _by_region(decide_resolution(series, volume, neighbours=20))
    assert [decided[f"R{i:02d}"] for i in range(30)] == ["daily"] * 15 + ["weekly"] * 15


def test_output_keeps_the_input_rows() -> None:
    series, volume = _series([False] * 15 + [True] * 15, seed=3)
    decided = decide_resolution(series, volume, neighbours=20)
    assert decided["region_id"].tolist() == series["region_id"].tolist()
    assert decided.index.equals(series.index)
    assert set(decided["voters"]) == {21}


def test_a_single_flip_is_smoothed_out() -> None:
    flags = [False] * 30
    flags[5] = True
    decided = _by_region(decide_resolution(*_series(flags), neighbours=20))
    assert set(decided.values()) == {"daily"}

    flags = [True] * 30
    flags[17] = False
    decided = _by_region(decide_resolution(*_series(flags), neighbours=20))
    assert set(decided.values()) == {"weekly"}


def test_common_symptom_daily_rare_symptom_weekly_in_the_same_region() -> None:
    common, volume = _series([False] * 25, symptom="Cough")
    rare, _ = _series([True] * 20 + [False] * 5, symptom="Ageusia")
    decided = decide_resolution(pd.concat([common, rare], ignore_index=True), volume,
                                neighbours=20)
    by_key = {(r, s): v for r, s, v in decided[["region_id", "symptom", "resolution"]]
              .itertuples(index=False)}
    for i in range(25):
        assert by_key[(f"R{i:02d}", "Cough")] == "daily"
        assert by_key[(f"R{i:02d}", "Ageusia")] == "weekly"


def test_fewer_regions_than_the_window_all_vote_and_a_tie_goes_weekly() -> None:
    decided = decide_resolution(*_series([False, True, False, True]), neighbours=20)
    assert set(decided["voters"]) == {4} and set(decided["unreliable_votes"]) == {2}
    assert set(decided["resolution"]) == {"weekly"}

    decided = decide_resolution(*_series([True, False, False, False]), neighbours=20)
    assert set(decided["resolution"]) == {"daily"}

    # an even window with enough regions: a tie at the top also goes weekly
    decided = _by_region(decide_resolution(*_series([True, False, True, False, False,
                                                     False, False]), neighbours=3))
    assert decided["R00"] == "weekly" and decided["R06"] == "daily"


def test_window_is_shifted_at_the_ends() -> None:
    # 30 regions, window 21: ranks 0..10 vote over ranks 0..20, ranks 19..29 over 9..29
    flags = [False] * 30
    for i in (20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 19):
        flags[i] = True  # 11 unreliable at ranks 19..29
    decided = decide_resolution(*_series(flags), neighbours=20)
    votes = dict(zip(decided["region_id"], decided["unreliable_votes"], strict=True))
    assert votes["R00"] == votes["R10"] == 2    # ranks 19, 20
    assert votes["R29"] == votes["R19"] == 11  # ranks 9..29 hold all 11
    assert votes["R15"] == 7                   # ranks 5..25: 19..25


def test_volume_ties_are_broken_by_region_id() -> None:
    regions = ["B", "A", "D", "C"]
    volume = pd.Series(100.0, index=regions)
    series = pd.DataFrame({"region_id": regions, "symptom": "Fever", "level": 1,
                           "daily_unreliable": [False, True, True, False]})
    # order A, B, C, D: flags T, F, F, T; window 2 (neighbours=1) starts at the rank
    decided = _by_region(decide_resolution(series, volume, neighbours=1))
    assert decided == {"A": "weekly", "B": "daily", "C": "weekly", "D": "weekly"}
    shuffled = _by_region(decide_resolution(series.iloc[::-1], volume, neighbours=1))
    assert shuffled == decided


def test_missing_volume_level_or_duplicate_series_raise() -> None:
    series, volume = _series([False] * 5)
    with pytest.raises(ValueError, match="R03"):
        decide_resolution(series, volume.drop("R03"), neighbours=20)
    with pytest.raises(ValueError, match="duplicate"):
        decide_resolution(pd.concat([series, series.iloc[:1]]), volume, neighbours=20)
    with pytest.raises(ValueError, match="level"):
        decide_resolution(series.drop(columns="level"), volume, neighbours=20)


def _levels() -> tuple[pd.DataFrame, pd.Series]:
    """A country (level 0, the largest volume), 15 states (level 1) and 40 districts
    (level 2) whose volumes interleave the states'; Fever is daily-reliable in the
    country and the states, unreliable in every district."""
    rows = [("C", 0, 100_000.0, False)]
    rows += [(f"S{i:02d}", 1, 5000.0 - 300 * i, False) for i in range(15)]
    rows += [(f"D{i:02d}", 2, 4900.0 - 120 * i, True) for i in range(40)]
    frame = pd.DataFrame(rows, columns=["region_id", "level", "volume", "daily_unreliable"])
    series = frame.drop(columns="volume").assign(symptom="Fever")
    return series, frame.set_index("region_id")["volume"]


def test_each_level_votes_apart() -> None:
    """Ordered all together, the country would vote with the 20 regions nearest to it
    in volume, 14 of them districts, and go weekly; so would every state."""
    series, volume = _levels()
    decided = decide_resolution(series, volume, neighbours=20)
    by_region = _by_region(decided)
    assert by_region["C"] == "daily"
    assert all(by_region[f"S{i:02d}"] == "daily" for i in range(15))
    assert all(by_region[f"D{i:02d}"] == "weekly" for i in range(40))
    voters = dict(zip(decided["region_id"], decided["voters"], strict=True))
    assert voters["C"] == 1 and voters["S00"] == 15 and voters["D00"] == 21
    assert decided["level"].tolist() == series["level"].tolist()
    # the old vote over every level at once: the country and the states are outvoted
    pooled = _by_region(decide_resolution(series.assign(level=0), volume, neighbours=20))
    assert pooled["C"] == "weekly" and pooled["S00"] == "weekly"


def test_all_symptoms_times_regions_are_each_decided_once() -> None:
    rng = np.random.default_rng(7)
    regions = [f"R{i:03d}" for i in range(100)]
    symptoms = [f"S{i:03d}" for i in range(422)]
    series = pd.DataFrame({
        "region_id": np.tile(regions, len(symptoms)),
        "symptom": np.repeat(symptoms, len(regions)),
        "level": np.tile(np.minimum(np.arange(100) // 30, 2), len(symptoms)),
        "daily_unreliable": rng.random(len(regions) * len(symptoms)) < 0.4,
    })
    volume = pd.Series(rng.random(len(regions)) * 1e5, index=regions)
    decided = decide_resolution(series, volume, neighbours=20)
    # every series decided once; its time is in the daily run's figures
    # (benchmarks/daily_cost.py), not asserted on a shared runner's clock
    assert len(decided) == 42_200
    assert not decided.duplicated(["region_id", "symptom"]).any()


# -- the weekly-sums reference (tests/support/symptoms_reference.py) -------------------

FIRST, LAST = date(2020, 1, 1), date(2020, 1, 31)  # a Wednesday .. a Friday
PARAMS = {"a_epsilon": 0.149, "a_sensitivity": 1, "b_epsilon": 0.112, "b_sensitivity": 1}


def _daily(first: date = FIRST, last: date = LAST) -> pd.DataFrame:
    rng = np.random.default_rng(11)
    days = date_range(first, last)
    rows = [(r, s, d) for r in ("US-CA", "US-NY") for s in ("Fever", "Cough") for d in days]
    daily = pd.DataFrame(rows, columns=["region_id", "symptom", "date"])
    daily["a_noisy"] = rng.integers(-20, 500, len(daily)).astype(np.int64)
    daily["b_noisy"] = rng.integers(5000, 9000, len(daily)).astype(np.int64)
    for name, value in PARAMS.items():
        daily[name] = value
    return daily


def test_weekly_sums_are_complete_monday_weeks() -> None:
    daily = _daily()
    weeks = weekly_sums(daily, FIRST, LAST)
    assert sorted(set(weeks["week_start"])) == [date(2020, 1, 6), date(2020, 1, 13),
                                                date(2020, 1, 20)]
    assert all(isinstance(w, date) and w.weekday() == 0 for w in weeks["week_start"])
    assert len(weeks) == 4 * 3 and set(weeks["n_days"]) == {7}
    for row in weeks.itertuples():
        days = {row.week_start + timedelta(days=i) for i in range(7)}
        mask = ((daily["region_id"] == row.region_id) & (daily["symptom"] == row.symptom)
                & daily["date"].isin(days))
        assert row.a_noisy == daily.loc[mask, "a_noisy"].sum()
        assert row.b_noisy == daily.loc[mask, "b_noisy"].sum()
        assert (row.a_epsilon, row.a_sensitivity, row.b_epsilon, row.b_sensitivity) == (
            0.149, 1, 0.112, 1)
    assert weeks["a_noisy"].dtype == np.int64 and weeks["b_noisy"].dtype == np.int64


def test_weekly_sums_accept_datetime64_dates() -> None:
    daily = _daily()
    as_datetime = daily.assign(date=pd.to_datetime(daily["date"]))
    pd.testing.assert_frame_equal(weekly_sums(as_datetime, FIRST, LAST),
                                  weekly_sums(daily, FIRST, LAST))


def test_missing_day_in_a_partial_week_is_ignored() -> None:
    daily = _daily()
    daily = daily[daily["date"] != date(2020, 1, 2)]  # a Thursday of the partial week
    assert len(weekly_sums(daily, FIRST, LAST)) == 12


def test_missing_day_raises_naming_the_region() -> None:
    daily = _daily()
    gap = (daily["region_id"] == "US-NY") & (daily["symptom"] == "Cough") & (
        daily["date"] == date(2020, 1, 15))
    with pytest.raises(ValueError, match=r"US-NY.*Cough.*2020-01-13.*6 of 7"):
        weekly_sums(daily[~gap], FIRST, LAST)


def test_non_constant_epsilon_raises() -> None:
    daily = _daily()
    changed = (daily["region_id"] == "US-CA") & (daily["date"] == date(2020, 1, 22))
    daily.loc[changed, "a_epsilon"] = 0.3
    with pytest.raises(ValueError, match=r"US-CA.*a_epsilon.*2020-01-20"):
        weekly_sums(daily, FIRST, LAST)


def test_duplicate_day_raises() -> None:
    daily = _daily()
    with pytest.raises(ValueError, match="more than once"):
        weekly_sums(pd.concat([daily, daily.iloc[[10]]]), FIRST, LAST)


def test_no_complete_week_gives_an_empty_table() -> None:
    first, last = date(2020, 1, 1), date(2020, 1, 7)
    weeks = weekly_sums(_daily(first, last), first, last)
    assert weeks.empty and "week_start" in weeks.columns
