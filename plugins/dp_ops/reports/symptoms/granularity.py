"""Daily or weekly resolution per (region, symptom) series, and the weekly sums.

SPEC section 5: a series is *daily-unreliable* when more than half of its daily values in
the release period fail the reliability rule (``dp_ops.reports.symptoms.reliability``). For each
symptom the regions are ordered by noisy volume B, and each region takes the majority
decision of the regions nearest to it in that order, so that regions of similar volume
decide alike and no single noisy series flips alone. Series decided weekly are published
as Monday..Sunday sums of the daily noisy A and B.

Everything here reads only noisy values (A, B, the verdicts computed from them) and public
parameters: it is post-processing and costs no privacy budget. In particular a weekly
sum of daily noisy counts is a function of the released daily noisy counts, so it needs no
new noise and no ledger entry; its noise is the sum of the days' noises, whose law
``reliability.sum_noise_margin`` computes.
"""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd

DAILY = "daily"
WEEKLY = "weekly"
NOISE_PARAMETERS: tuple[str, ...] = ("a_epsilon", "a_sensitivity", "b_epsilon", "b_sensitivity")
SERIES_KEY: list[str] = ["region_id", "symptom"]


def _require_columns(frame: pd.DataFrame, columns: list[str], name: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing columns {missing} (has {list(frame.columns)})")


def daily_unreliable(daily: pd.DataFrame, share: float) -> pd.DataFrame:
    """Whether each (region_id, symptom) series fails the rule on too many days.

    ``daily`` is long: ``region_id, symptom, date, reliable`` (bool, one row per day of the
    release period). Returns one row per series, sorted by (region_id, symptom), with
    ``failed_share`` (share of its days not reliable) and ``daily_unreliable``, true iff
    ``failed_share > share`` strictly (exactly half failing at 0.5 is not unreliable).
    """
    _require_columns(daily, [*SERIES_KEY, "date", "reliable"], "daily")
    if not 0 < share < 1:
        raise ValueError(f"share={share!r}: must be in (0, 1)")
    if daily["reliable"].dtype != bool:
        raise ValueError(f"daily.reliable: must be bool (got {daily['reliable'].dtype})")
    failed = (~daily["reliable"]).rename("failed_share")
    out = failed.groupby([daily["region_id"], daily["symptom"]], sort=True).mean()
    out = out.reset_index()
    out["daily_unreliable"] = out["failed_share"] > share
    return out


def decide_resolution(series: pd.DataFrame, volume: pd.Series, neighbours: int) -> pd.DataFrame:
    """Daily or weekly for each (region_id, symptom), by a rolling majority over volume.

    ``series`` has ``region_id, symptom, daily_unreliable`` (one row per series);
    ``volume`` maps region_id to its noisy volume (mean daily noisy B over the period).

    For each symptom independently, its regions are ranked by volume, descending, ties
    broken by region_id ascending (deterministic). Each region's voters are a window of
    ``neighbours + 1`` consecutive ranks: itself and ``neighbours // 2`` regions on each
    side when interior (for odd ``neighbours`` the extra one is on the lower-volume
    side); near the ends the window is shifted to keep its size; if the symptom has no
    more regions than the window, all its regions vote. The region goes weekly iff at
    least half of its voters are daily-unreliable (a tie goes weekly, the cautious side).
    SPEC's "the 20 regions nearest to it" is read as the region plus its 20 nearest
    neighbours (``neighbours=20``): 21 voters, odd, so with at least 21 regions there is
    never a tie; ties arise only with an even number of voters.

    Returns, in ``series``' row order, ``region_id, symptom, resolution`` ("daily" or
    "weekly"), plus ``voters`` and ``unreliable_votes`` for the audit.
    """
    _require_columns(series, [*SERIES_KEY, "daily_unreliable"], "series")
    if not (isinstance(neighbours, (int, np.integer)) and neighbours >= 0):
        raise ValueError(f"neighbours={neighbours!r}: must be an integer >= 0")
    if series.duplicated(SERIES_KEY).any():
        dup = series.loc[series.duplicated(SERIES_KEY), SERIES_KEY].iloc[0].tolist()
        raise ValueError(f"series: duplicate (region_id, symptom) {dup}")
    if volume.index.has_duplicates:
        raise ValueError("volume: duplicate region_id in the index")
    vol = series["region_id"].map(volume)
    if vol.isna().any():
        missing = sorted(series.loc[vol.isna(), "region_id"].unique().tolist())[:5]
        raise ValueError(f"volume: no (finite) volume for region_id {missing}")

    frame = pd.DataFrame({
        "position": np.arange(len(series)),
        "symptom": series["symptom"].to_numpy(),
        "region_id": series["region_id"].to_numpy(),
        "volume": vol.to_numpy(dtype=np.float64),
        "unreliable": series["daily_unreliable"].to_numpy(dtype=bool),
    })
    frame = frame.sort_values(["symptom", "volume", "region_id"],
                              ascending=[True, False, True], kind="mergesort")
    groups = frame.groupby("symptom", sort=False)
    size = groups["symptom"].transform("size").to_numpy()
    rank = groups.cumcount().to_numpy()
    first = np.arange(len(frame)) - rank  # row of the symptom's top-volume region
    window = np.minimum(neighbours + 1, size)
    start = np.clip(rank - neighbours // 2, 0, size - window)
    # unreliable votes in [start, start + window) from one cumulative sum over all rows
    cumulative = np.concatenate(([0], np.cumsum(frame["unreliable"].to_numpy(dtype=np.int64))))
    votes = cumulative[first + start + window] - cumulative[first + start]
    frame["voters"] = window
    frame["unreliable_votes"] = votes
    frame["resolution"] = np.where(2 * votes >= window, WEEKLY, DAILY)
    frame = frame.sort_values("position")
    return pd.DataFrame({
        "region_id": series["region_id"].to_numpy(),
        "symptom": series["symptom"].to_numpy(),
        "resolution": frame["resolution"].to_numpy(),
        "voters": frame["voters"].to_numpy(dtype=np.int64),
        "unreliable_votes": frame["unreliable_votes"].to_numpy(dtype=np.int64),
    }, index=series.index)


def weekly_sums(daily: pd.DataFrame, first_day: date, last_day: date) -> pd.DataFrame:
    """Monday..Sunday sums of the daily noisy A and B of each (region_id, symptom).

    ``daily`` is long: ``region_id, symptom, date`` (``datetime.date`` or datetime64),
    ``a_noisy, b_noisy`` (integers) and the noise parameters ``a_epsilon, a_sensitivity,
    b_epsilon, b_sensitivity`` of each row. Returns one row per (region_id, symptom,
    week_start), sorted by those, with ``week_start`` the Monday (a ``datetime.date``),
    ``a_noisy``, ``b_noisy`` (int64 sums), ``n_days`` (7) and the parameters.

    Only complete weeks, Monday..Sunday both inside ``[first_day, last_day]``, are
    returned: a partial first or last week is left out (Google's weekly file likewise
    starts on the first full week, 2020-01-06); rows outside those weeks are ignored.
    Every series with a row in those weeks must have all 7 days of each of them (every cell
    is noised, zeros included, so a gap is lost data, not an empty cell). Raises
    ValueError, naming the region, symptom and week, if a complete week lacks a day or
    has a day twice, or if a noise parameter is not constant within the week (the weekly
    margin assumes 7 draws of one law).

    Summing noisy values is post-processing: no extra privacy budget.
    """
    _require_columns(daily, [*SERIES_KEY, "date", "a_noisy", "b_noisy", *NOISE_PARAMETERS],
                     "daily")
    if first_day > last_day:
        raise ValueError(f"first_day={first_day} is after last_day={last_day}")
    columns = [*SERIES_KEY, "week_start", "a_noisy", "b_noisy", "n_days", *NOISE_PARAMETERS]

    first = np.datetime64(first_day, "D")
    last = np.datetime64(last_day, "D")
    # 1970-01-01 was a Thursday: weekday (Monday = 0) of day d is (d + 3) mod 7
    first_monday = first + (-(first.astype(np.int64) + 3)) % 7
    last_sunday = last - (last.astype(np.int64) + 3 + 1) % 7
    if first_monday > last_sunday:
        return pd.DataFrame(columns=columns)

    days = pd.to_datetime(daily["date"]).to_numpy().astype("datetime64[D]")
    inside = (days >= first_monday) & (days <= last_sunday)
    frame = daily.loc[inside, [*SERIES_KEY, "a_noisy", "b_noisy", *NOISE_PARAMETERS]].copy()
    days = days[inside]
    frame["day"] = days
    frame["week_start"] = days - (days.astype(np.int64) + 3) % 7
    if frame.empty:
        return pd.DataFrame(columns=columns)

    duplicated = frame.duplicated([*SERIES_KEY, "day"])
    if duplicated.any():
        row = frame.loc[duplicated].iloc[0]
        raise ValueError(f"region_id={row['region_id']!r} symptom={row['symptom']!r}: "
                         f"day {row['day']} appears more than once")

    key = [*SERIES_KEY, "week_start"]
    agg: dict[str, tuple[str, str]] = {
        "a_noisy": ("a_noisy", "sum"),
        "b_noisy": ("b_noisy", "sum"),
        "n_days": ("day", "size"),
    }
    for p in NOISE_PARAMETERS:
        agg[p] = (p, "min")
        agg[f"{p}_max"] = (p, "max")
    weeks = frame.groupby(key, sort=True).agg(**agg).reset_index()

    all_weeks = np.arange(first_monday, last_sunday + 1, 7)
    present = frame[SERIES_KEY].drop_duplicates()
    expected = present.merge(pd.DataFrame({"week_start": all_weeks}), how="cross")
    weeks = expected.merge(weeks, on=key, how="left")
    incomplete = weeks["n_days"].fillna(0) < 7
    if incomplete.any():
        row = weeks.loc[incomplete].iloc[0]
        have = int(0 if pd.isna(row["n_days"]) else row["n_days"])
        raise ValueError(f"region_id={row['region_id']!r} symptom={row['symptom']!r}: week "
                         f"of {pd.Timestamp(row['week_start']).date()} has {have} of 7 days")
    for p in NOISE_PARAMETERS:
        varies = (weeks[p] != weeks[f"{p}_max"]) | weeks[p].isna()
        if varies.any():
            row = weeks.loc[varies].iloc[0]
            raise ValueError(f"region_id={row['region_id']!r} symptom={row['symptom']!r}: "
                             f"{p} is not constant in the week of "
                             f"{pd.Timestamp(row['week_start']).date()} "
                             f"({row[p]!r} .. {row[f'{p}_max']!r})")

    weeks["week_start"] = weeks["week_start"].to_numpy().astype("datetime64[D]").astype(object)
    weeks["a_noisy"] = weeks["a_noisy"].astype(np.int64)
    weeks["b_noisy"] = weeks["b_noisy"].astype(np.int64)
    weeks["n_days"] = weeks["n_days"].astype(np.int64)
    return weeks[columns].sort_values(key, kind="mergesort").reset_index(drop=True)
