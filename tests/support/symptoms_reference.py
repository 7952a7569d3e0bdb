"""A long-table reference for the symptoms dataset's weekly sums.

The release step sums weeks on (days x cells) matrices (``dp_ops.reports.symptoms.matrix.
weekly``); this straightforward pandas version, with its own tests, is what the tests check
the fast one against, cell by cell. Test code only: nothing in the product calls it.
"""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd

from dp_ops.reports.symptoms.schema import NOISE_PARAMETERS

SERIES_KEY: list[str] = ["region_id", "symptom"]


def _require_columns(frame: pd.DataFrame, columns: list[str], name: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing columns {missing} (has {list(frame.columns)})")


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
    rule assumes 7 draws of one law).

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
