"""The symptoms release's charts (docs/design.md, Outputs): per region, its top symptoms
over the release period as a PNG under ``charts/``, drawn with the shared chart machinery
of :mod:`dp_ops.steps.charts` (style, palette, blitting, PNG writing, the entries of the
release page).

A chart is drawn from the published daily and weekly files only: a value that is not
published is a gap in its line, never interpolated. Given the interval tables, a band
around each line shows each published value's 95% interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dp_ops.steps.charts import (
    CHART_DIR,
    GRID,
    INK,
    MUTED,
    SERIES_COLOURS,
    BlitFigure,
    ChartEntry,
    chart_entries,
    chart_file,
    chart_style,
    date_ticks,
    isolated,
    ordered_regions,
)

SYMPTOMS_SIZE = (720, 320)  # pixels
TOP_SYMPTOMS = 5

# the y-range a chart snaps to: this, doubled until it holds every value of the region
SYMPTOM_RANGE_START = 25.0


@dataclass(frozen=True)
class SymptomLine:
    """One symptom's published values: daily at day positions, or weekly as steps from
    each Monday to the next (``x`` has one more point than values, ending the last week)."""

    symptom: str
    resolution: str
    x: NDArray[np.float64]
    y: NDArray[np.float64]
    # each value's interval, aligned with ``y`` (NaN where there is none)
    low: NDArray[np.float64] | None = None
    high: NDArray[np.float64] | None = None


@dataclass(frozen=True)
class SymptomSeries:
    """A region's top symptoms, in rank order (none when nothing ranks above zero)."""

    region_id: str
    level: int
    title: str
    lines: tuple[SymptomLine, ...]


def symptom_series(daily: pd.DataFrame, weekly: pd.DataFrame, regions: pd.DataFrame,
                   days: Sequence[str], top: int = TOP_SYMPTOMS,
                   intervals: tuple[pd.DataFrame, pd.DataFrame] | None = None
                   ) -> list[SymptomSeries]:
    """Per region of ``regions`` in either published file, its ``top`` symptoms (rows of
    other regions, of levels not charted, are left out): a symptom published
    daily in the region is shown daily, else weekly. Symptoms rank by their mean value
    over the release period with unpublished periods counted as zero, so a series
    published most of the time outranks a single high value. With ``intervals`` (the
    daily and weekly interval tables) each line carries its values' intervals."""
    columns = [c for c in daily.columns if c.startswith("symptom:")]
    day_index = pd.Index(list(days))
    n_days = len(day_index)
    by_code = {str(r["open_covid_region_code"]): r for r in ordered_regions(regions)}
    mondays = pd.Index(sorted(set(weekly["date"])))
    daily_grids = _grids(daily, columns, day_index)
    weekly_grids = _grids(weekly, columns, mondays)
    monday_at = day_index.get_indexer(mondays)
    if (monday_at < 0).any():
        raise ValueError("weekly symptom rows dated outside the release")
    week_x = np.append(monday_at, monday_at[-1] + 7 if len(monday_at) else 0) - 0.5
    day_x = np.arange(n_days, dtype=np.float64)
    bands: tuple[_Bands | None, _Bands | None] = (
        (_by_series(intervals[0]), _by_series(intervals[1])) if intervals else (None, None))
    no_daily = np.full((n_days, len(columns)), np.nan)
    no_weekly = np.full((len(mondays), len(columns)), np.nan)
    out = []
    for code, region in by_code.items():
        if code not in daily_grids and code not in weekly_grids:
            continue
        d = daily_grids.get(code, no_daily)
        w = weekly_grids.get(code, no_weekly)
        is_daily: NDArray[np.bool_] = np.asarray(~np.isnan(d).all(axis=0), dtype=bool)
        score = np.where(is_daily, np.nansum(d, axis=0) / max(n_days, 1),
                         np.nansum(w, axis=0) / max(len(mondays), 1))
        ranked = sorted((-score[j], columns[j], j) for j in np.flatnonzero(score > 0))
        lines = []
        for _, column, j in ranked[:top]:
            name = column.removeprefix("symptom:")
            if is_daily[j]:
                band = _band(bands[0], code, name, day_index, 0)
                lines.append(SymptomLine(name, "daily", day_x, d[:, j], *band))
            else:
                band = _band(bands[1], code, name, mondays, 1)
                lines.append(SymptomLine(name, "weekly", week_x, np.append(w[:, j], np.nan),
                                         *band))
        out.append(SymptomSeries(str(region["region_id"]), int(region["level"]),
                                 str(region["title"]), tuple(lines)))
    return out


@dataclass(frozen=True)
class _Bands:
    """An interval table's rows per (region code, symptom), as positions into its date,
    low and high columns (no frame per series: a year holds tens of thousands)."""

    rows: dict[tuple[str, str], NDArray[np.intp]]
    date: NDArray[np.object_]
    low: NDArray[np.float64]
    high: NDArray[np.float64]


def _by_series(table: pd.DataFrame) -> _Bands:
    """An interval table split per (region code, symptom)."""
    groups = table.groupby(["open_covid_region_code", "symptom"], sort=False).indices
    return _Bands({(str(code), str(symptom)): rows for (code, symptom), rows in groups.items()},
                  table["date"].to_numpy(object), table["low"].to_numpy(np.float64),
                  table["high"].to_numpy(np.float64))


def _band(bands: _Bands | None, code: str, symptom: str, dates: pd.Index, extra: int
          ) -> tuple[NDArray[np.float64] | None, NDArray[np.float64] | None]:
    """A line's (low, high) over ``dates`` plus ``extra`` trailing NaN (the end of the last
    week), or (None, None) without interval tables (or with empty ones)."""
    if bands is None or not bands.rows:
        return None, None
    low = np.full(len(dates) + extra, np.nan)
    high = np.full(len(dates) + extra, np.nan)
    rows = bands.rows.get((code, symptom))
    if rows is not None:
        at = dates.get_indexer(bands.date[rows])
        keep = at >= 0
        low[at[keep]] = bands.low[rows][keep]
        high[at[keep]] = bands.high[rows][keep]
    return low, high


def _grids(table: pd.DataFrame, columns: list[str],
           dates: pd.Index) -> dict[str, NDArray[np.float64]]:
    """Per region code, its values as a (dates x columns) array, NaN where no row."""
    values = table[columns].to_numpy(np.float64, na_value=np.nan)
    at = dates.get_indexer(table["date"])
    if (at < 0).any():
        raise ValueError("published symptom rows dated outside the release")
    out = {}
    for code, rows in table.groupby("open_covid_region_code", sort=False).indices.items():
        grid = np.full((len(dates), len(columns)), np.nan)
        grid[at[rows]] = values[rows]
        out[str(code)] = grid
    return out


class SymptomChart:
    """The region's top symptoms over the release period, one line each; weekly series
    as steps over their weeks."""

    def __init__(self, days: Sequence[str], top: int = TOP_SYMPTOMS) -> None:
        from matplotlib.lines import Line2D

        self.days = list(days)
        self._fig = BlitFigure(SYMPTOMS_SIZE)
        fig = self._fig.figure
        fig.subplots_adjust(left=0.065, right=0.66, top=0.78, bottom=0.1)
        self.ax = fig.subplots()
        ax = self.ax
        n = len(self.days)
        ticks, labels = date_ticks(self.days, max_ticks=6)
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_xticks(ticks, labels)
        ax.yaxis.grid(True, color=GRID, linewidth=0.6, zorder=0)
        self.lines = []
        self.points = []
        for i in range(top):
            colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
            (line,) = ax.plot([], [], color=colour, linewidth=1.3, animated=True, zorder=3)
            (point,) = ax.plot([], [], color=colour, linestyle="none", marker="o",
                               markersize=2.2, animated=True, zorder=3)
            self.lines.append(line)
            self.points.append(point)
        self.legend_texts = [
            fig.text(0.70, 0.72 - 0.085 * i, "", fontsize=7.5, va="center_baseline",
                     animated=True, color=INK) for i in range(top)]
        # legend keys are short lines in figure coordinates (a line draws in a tenth of
        # the time of a text)
        self.legend_keys = [
            Line2D([0.672, 0.692], [0.72 - 0.085 * i] * 2, transform=fig.transFigure,
                   color=SERIES_COLOURS[i % len(SERIES_COLOURS)], linewidth=2,
                   animated=True) for i in range(top)]
        for key in self.legend_keys:
            fig.add_artist(key)
        self.title = fig.text(0.012, 0.965, "", fontsize=10.5, fontweight="bold",
                              va="top", animated=True)
        fig.text(0.012, 0.88, f"Top symptoms by search interest, {self.days[0]} to "
                 f"{self.days[-1]} (100 = the region's largest value in its first "
                 "release). Bands: 95% intervals. Gaps: not published.",
                 fontsize=7, color=MUTED, va="top")
        self.empty = fig.text(0.34, 0.45, "", ha="center", color=MUTED, animated=True)

    def _set_range(self, limit: float) -> None:
        self.ax.set_ylim(0, limit * 1.05)
        ticks = [0, limit / 2, limit]
        self.ax.set_yticks(ticks, [f"{t:g}" for t in ticks])

    @staticmethod
    def y_range(series: SymptomSeries) -> float:
        top = max((float(np.nanmax(line.y if line.high is None else np.fmax(line.y, line.high),
                                   initial=0.0)) for line in series.lines), default=0.0)
        limit = SYMPTOM_RANGE_START
        while top > limit:
            limit *= 2
        return limit

    def render(self, series: SymptomSeries) -> bytes:
        self._fig.background(self.y_range(series), self._set_range)
        for i, (line, point, label) in enumerate(
                zip(self.lines, self.points, self.legend_texts, strict=True)):
            if i >= len(series.lines):
                continue
            shown = series.lines[i]
            daily = shown.resolution == "daily"
            if shown.low is not None and shown.high is not None and (
                    np.isfinite(shown.low) & np.isfinite(shown.high)).any():
                band = self.ax.fill_between(
                    shown.x, shown.low, shown.high, step=None if daily else "post",
                    color=SERIES_COLOURS[i % len(SERIES_COLOURS)], alpha=0.15, linewidth=0,
                    animated=True, zorder=2)
                self._fig.draw(band)
                band.remove()
            line.set_drawstyle("default" if daily else "steps-post")
            line.set_data(shown.x, shown.y)
            point.set_data(shown.x, isolated(shown.y) if daily else np.full(len(shown.x),
                                                                             np.nan))
            label.set_text(f"{shown.symptom} ({shown.resolution})")
            for artist in (line, point, label, self.legend_keys[i]):
                self._fig.draw(artist)
        if not series.lines:
            self.empty.set_text("no symptom published")
            self._fig.draw(self.empty)
        self.title.set_text(series.title)
        self._fig.draw(self.title)
        return self._fig.png()


def symptoms_alt(days: Sequence[str], series: SymptomSeries) -> str:
    """The chart's alt text: the region, the period and the symptoms it shows."""
    names = ", ".join(f"{line.symptom} ({line.resolution})" for line in series.lines)
    return (f"Top symptoms in {series.title}, {days[0]} to {days[-1]}: "
            f"{names or 'none published'}")


def write_symptom_charts(daily: pd.DataFrame, weekly: pd.DataFrame, regions: pd.DataFrame,
                         days: Sequence[str], target: Path, top: int = TOP_SYMPTOMS,
                         intervals: tuple[pd.DataFrame, pd.DataFrame] | None = None
                         ) -> list[ChartEntry]:
    """Draw ``charts/<region>.png`` under ``target`` for every region in the daily or
    weekly file (with ``intervals``, the daily and weekly interval tables, a band per
    line); return an entry per region of ``regions``, in index order."""
    drawn: dict[str, tuple[str, str]] = {}
    series = symptom_series(daily, weekly, regions, days, top, intervals)
    if series:
        (target / CHART_DIR).mkdir(parents=True, exist_ok=True)
        with chart_style():
            chart = SymptomChart(days, top)
            for s in series:
                name = chart_file(s.region_id)
                (target / name).write_bytes(chart.render(s))
                drawn[s.region_id] = (name, symptoms_alt(days, s))
    return chart_entries(regions, drawn, SYMPTOMS_SIZE)
