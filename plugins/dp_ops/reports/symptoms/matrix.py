"""The release period's noisy A and B as (days x cells) matrices.

Every day's rows cover the same public domain (every region at the configured levels x
every symptom, zeros included) in the same order, so the period stacks into matrices
and the release step's sums are array reductions: a series' failed share is a column
mean, a week's A and B are the sums of seven rows. This keeps the release step fast
however long the period is (a long table of 91 days x 31,000 cells spent most of its
time in pandas merges).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from dp_ops.api import DataRoot
from dp_ops.errors import MixedWeekLaws
from dp_ops.reports.symptoms.schema import NOISE_PARAMETERS

KEYS = ("level", "region_id", "symptom")
VALUES = ("a_noisy", "b_noisy", "reliable")


@dataclass(frozen=True)
class DailyMatrix:
    """``cells`` (level, region_id, symptom) label the columns, ``days`` the rows."""

    days: list[date]
    cells: pd.DataFrame
    a: NDArray[np.int64]
    b: NDArray[np.int64]
    reliable: NDArray[np.bool_]
    params: dict[str, NDArray[np.float64]]

    def select(self, mask: NDArray[np.bool_]) -> DailyMatrix:
        return DailyMatrix(self.days, self.cells.loc[mask].reset_index(drop=True),
                           self.a[:, mask], self.b[:, mask], self.reliable[:, mask],
                           {k: v[:, mask] for k, v in self.params.items()})


def same_cells(table: pa.Table, cells: pd.DataFrame | None, path: Path,
               first: date) -> pd.DataFrame:
    """The cells of a per-day ``table``: its keys when ``cells`` is None (the period's first
    day), else ``cells`` after checking the table holds the same ones in the same order;
    raises ValueError naming ``path`` and ``first`` when it does not."""
    if cells is None:
        return table.select(list(KEYS)).to_pandas()
    if len(table) != len(cells) or not all(
            np.array_equal(table.column(k).to_numpy(zero_copy_only=False),
                           cells[k].to_numpy()) for k in ("region_id", "symptom")):
        raise ValueError(f"{path}: its cells differ from those of {first}; a release "
                         "period must share one region table and symptom list")
    return cells


def read_days(root: DataRoot, report: str, days: list[date],
              digests: Mapping[date, str]) -> DailyMatrix:
    """Stack the per-day rows of ``days``, each checked against the sha256 the ledger
    recorded for it (``digests``: :mod:`dp_ops.steps.day_files`); raises ValueError naming
    the day whose cells differ from the first day's (a changed region table or symptom
    list mid-period)."""
    from dp_ops.steps.day_files import read_day_bytes

    cells: pd.DataFrame | None = None
    columns: dict[str, list[NDArray[np.generic]]] = {c: [] for c in (*VALUES, *NOISE_PARAMETERS)}
    for day in days:
        path = root.report_file(report, day)
        table = pq.read_table(pa.BufferReader(read_day_bytes(root, report, day,
                                                             digests.get(day))),
                              columns=[*KEYS, *VALUES, *NOISE_PARAMETERS])
        cells = same_cells(table, cells, path, days[0])
        for c in columns:
            columns[c].append(table.column(c).to_numpy(zero_copy_only=False))
    assert cells is not None
    return DailyMatrix(
        days=list(days), cells=cells,
        a=np.vstack(columns["a_noisy"]).astype(np.int64),
        b=np.vstack(columns["b_noisy"]).astype(np.int64),
        reliable=np.vstack(columns["reliable"]).astype(bool),
        params={p: np.vstack(columns[p]).astype(np.float64) for p in NOISE_PARAMETERS})


def from_rows(rows: pd.DataFrame) -> DailyMatrix:
    """The same from a long table (one row per cell and day), e.g. built in a test.
    Raises ValueError if a cell lacks a day or has one twice."""
    rows = rows.copy()
    rows["date"] = pd.to_datetime(rows["date"]).dt.date
    if rows.duplicated([*KEYS, "date"]).any():
        raise ValueError("the daily rows hold a (cell, day) twice")
    days = sorted(rows["date"].unique())
    cells = rows[list(KEYS)].drop_duplicates().sort_values(list(KEYS)).reset_index(drop=True)
    if len(rows) != len(days) * len(cells):
        raise ValueError("the daily rows do not cover every cell on every day")
    rows = rows.sort_values(["date", *KEYS])

    def stack(column: str) -> NDArray[np.generic]:
        values: NDArray[np.generic] = rows[column].to_numpy()
        return values.reshape(len(days), len(cells))

    return DailyMatrix(days=days, cells=cells, a=stack("a_noisy").astype(np.int64),
                       b=stack("b_noisy").astype(np.int64),
                       reliable=stack("reliable").astype(bool),
                       params={p: stack(p).astype(np.float64) for p in NOISE_PARAMETERS})


def complete_weeks(first: date, last: date) -> list[date]:
    """Mondays of the Monday..Sunday weeks inside [first, last]."""
    monday = first + timedelta(days=(7 - first.weekday()) % 7)
    weeks = []
    while monday + timedelta(days=6) <= last:
        weeks.append(monday)
        monday += timedelta(days=7)
    return weeks


def weekly(m: DailyMatrix) -> tuple[list[date], NDArray[np.int64], NDArray[np.int64],
                                    dict[str, NDArray[np.float64]]]:
    """(Mondays, A, B, parameters) of the complete weeks, each (weeks x cells).

    A week's A and B are the sums of its seven daily noisy values (post-processing: no
    extra budget); a partial first or last week is left out. Raises
    :class:`~dp_ops.errors.MixedWeekLaws` (:func:`mixed_week`) when a cell's noise
    parameters change within a week: the weekly rule assumes seven draws of one law, which
    is why a change of the report's noise terms takes effect on a Monday only."""
    mondays = complete_weeks(m.days[0], m.days[-1])
    n = len(m.cells)
    a_w = np.zeros((len(mondays), n), dtype=np.int64)
    b_w = np.zeros((len(mondays), n), dtype=np.int64)
    params = {p: np.zeros((len(mondays), n)) for p in NOISE_PARAMETERS}
    for w, monday in enumerate(mondays):
        i = (monday - m.days[0]).days
        a_w[w] = m.a[i:i + 7].sum(axis=0)
        b_w[w] = m.b[i:i + 7].sum(axis=0)
        for p in NOISE_PARAMETERS:
            block = m.params[p][i:i + 7]
            varies = (block != block[0]).any(axis=0)
            if varies.any():
                i_cell = int(np.argmax(varies))
                raise mixed_week(monday, p, m.cells.iloc[i_cell], block[:, i_cell])
            params[p][w] = block[0]
    return mondays, a_w, b_w, params


def mixed_week(monday: date, parameter: str, cell: pd.Series,
               values: NDArray[np.float64]) -> MixedWeekLaws:
    """The refusal of a week whose days were noised under different terms (``values``: the
    parameter on its seven days), naming the week, the days of each value and the remedy.
    A ledger can hold such a week only from a change recorded mid-week before
    ``ledger set-epsilon`` refused one (OPERATIONS.md, Changing the cap or an epsilon)."""
    days: dict[float, list[date]] = {}
    for i, value in enumerate(values):
        days.setdefault(float(value), []).append(monday + timedelta(days=i))
    laws = "; ".join(f"{value!r} on {', '.join(d.isoformat() for d in ds)}"
                     for value, ds in days.items())
    after = monday + timedelta(days=7)
    return MixedWeekLaws(
        f"the week of {monday} (Monday to Sunday) mixes noise laws: {parameter} of "
        f"region_id={cell['region_id']!r} symptom={cell['symptom']!r} is {laws}. Its weekly "
        "values sum seven days and need one law, so no release holding that week can be "
        "built; the noise terms changed mid-week. Remedy: start the release period after "
        f"that week, with first_public_date {after} (a Monday) or later in the report's "
        "configuration (DP_SYMPTOMS_CONFIG); the releases already published stay as they "
        "are. Nothing was published")


def long_frame(cells: pd.DataFrame, dates: list[date], a: NDArray[np.int64],
               b: NDArray[np.int64], params: dict[str, NDArray[np.float64]],
               n_days: int) -> pd.DataFrame:
    """(dates x cells) matrices back to a long table, one row per cell and date."""
    t, n = a.shape
    out = pd.DataFrame({
        "level": np.tile(cells["level"].to_numpy(), t),
        "region_id": np.tile(cells["region_id"].to_numpy(), t),
        "symptom": np.tile(cells["symptom"].to_numpy(), t),
        "date": np.repeat(np.array(dates, dtype=object), n),
        "a_noisy": a.ravel(),
        "b_noisy": b.ravel(),
        "n_days": n_days,
    })
    for p in NOISE_PARAMETERS:
        values = params[p].ravel()
        out[p] = values.astype(np.int64) if p.endswith("sensitivity") else values
    return out
