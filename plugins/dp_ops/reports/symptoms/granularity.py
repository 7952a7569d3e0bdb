"""Daily or weekly resolution per (region, symptom) series, and the weekly sums.

docs/design.md, Symptoms dataset: a series is *daily-unreliable* when more than half of
its daily values in the release period fail the reliability rule
(``dp_ops.reports.symptoms.reliability``). For each symptom, order the regions by noisy
volume B; each region takes the majority decision of the 20 regions nearest to it in that
order, so that regions of similar volume decide alike and no single noisy series flips
alone. Only comparable regions vote together: the regions of the same level (a country,
whose volume is the largest, is not outvoted by its municipalities). Series decided weekly
are published as Monday..Sunday sums of the daily noisy A and B.

Everything here reads only noisy values (A, B, the verdicts computed from them) and public
parameters: it is post-processing and costs no privacy budget. In particular a weekly
sum of daily noisy counts is a function of the released daily noisy counts, so it needs no
new noise and no ledger entry; its noise is the sum of the days' noises, whose exact law
the reliability rule uses.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

DAILY = "daily"
WEEKLY = "weekly"
SERIES_KEY: list[str] = ["region_id", "symptom"]


def _require_columns(frame: pd.DataFrame, columns: list[str], name: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing columns {missing} (has {list(frame.columns)})")


def decide_resolution(series: pd.DataFrame, volume: pd.Series, neighbours: int) -> pd.DataFrame:
    """Daily or weekly for each (region_id, symptom), by a rolling majority over volume
    among the regions of the same level.

    ``series`` has ``region_id, symptom, level, daily_unreliable`` (one row per series);
    ``volume`` maps region_id to its noisy volume (mean daily noisy B over the period).

    For each (symptom, level) independently, its regions are ranked by volume,
    descending, ties broken by region_id ascending (deterministic). Each region's voters
    are a window of ``neighbours + 1`` consecutive ranks: itself and ``neighbours // 2``
    regions on each side when interior (for odd ``neighbours`` the extra one is on the
    lower-volume side); near the ends the window is shifted to keep its size; if the
    (symptom, level) has no more regions than the window, all its regions vote. The
    region goes weekly iff at least half of its voters are daily-unreliable (a tie goes
    weekly, the cautious side). The 20 nearest regions of docs/design.md, Symptoms
    dataset, are read as the region plus its 20 nearest neighbours (``neighbours=20``):
    21 voters, odd, so with at least 21 regions in the level there is never a tie; ties
    arise only with an even number of voters (e.g. a level of 2 regions).

    Returns, in ``series``' row order, ``region_id, symptom, level, resolution`` ("daily"
    or "weekly"), plus ``voters`` and ``unreliable_votes`` for the audit.
    """
    _require_columns(series, [*SERIES_KEY, "level", "daily_unreliable"], "series")
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
        "level": series["level"].to_numpy(),
        "region_id": series["region_id"].to_numpy(),
        "volume": vol.to_numpy(dtype=np.float64),
        "unreliable": series["daily_unreliable"].to_numpy(dtype=bool),
    })
    frame = frame.sort_values(["symptom", "level", "volume", "region_id"],
                              ascending=[True, True, False, True], kind="mergesort")
    groups = frame.groupby(["symptom", "level"], sort=False)
    size = groups["symptom"].transform("size").to_numpy()
    rank = groups.cumcount().to_numpy()
    first = np.arange(len(frame)) - rank  # row of the group's top-volume region
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
        "level": series["level"].to_numpy(),
        "resolution": frame["resolution"].to_numpy(),
        "voters": frame["voters"].to_numpy(dtype=np.int64),
        "unreliable_votes": frame["unreliable_votes"].to_numpy(dtype=np.int64),
    }, index=series.index)
