"""The mobility release's charts (docs/design.md, Outputs): per region, its six
percent-change series over the release period as a PNG under ``charts/``, drawn with the
shared chart machinery of :mod:`dp_ops.steps.charts` (style, palette, blitting, PNG
writing, the entries of the release page).

A chart is drawn from the published tables only: a suppressed value, or a region-day
without a published row, is a gap in its line, never interpolated. Around the line, a band
shows each published change's 95% interval (the intervals file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dp_ops.reports.mobility.estimates import CATEGORIES
from dp_ops.reports.mobility.report import KEY_COLUMNS as MOBILITY_KEYS
from dp_ops.steps.charts import (
    CHART_DIR,
    GRID,
    LINE,
    MUTED,
    BlitFigure,
    ChartEntry,
    chart_entries,
    chart_file,
    chart_style,
    date_ticks,
    isolated,
    ordered_regions,
)

MOBILITY_SIZE = (720, 420)  # pixels

CATEGORY_LABELS: dict[str, str] = {
    "retail_and_recreation": "Retail & recreation",
    "grocery_and_pharmacy": "Grocery & pharmacy",
    "parks": "Parks",
    "transit_stations": "Transit stations",
    "workplaces": "Workplaces",
    "residential": "Residential",
}

# y-ranges a chart snaps to: the smallest that holds every value of the region. A few
# fixed ranges keep panels comparable between regions (like the PDF reports' +-80%) and
# let the static part of the figure be drawn once per range, not once per region.
MOBILITY_RANGES = (40, 80, 160, 320, 640, 1000)


@dataclass(frozen=True)
class MobilitySeries:
    """A region's published percent changes: ``values[i, d]`` is category
    ``CATEGORIES[i]`` on day ``d`` of the release, NaN where nothing is published."""

    region_id: str
    level: int
    title: str
    values: NDArray[np.float64]
    # each value's interval (the same shape; NaN where there is none)
    low: NDArray[np.float64] | None = None
    high: NDArray[np.float64] | None = None


def mobility_series(published: pd.DataFrame, regions: pd.DataFrame,
                    days: Sequence[str], intervals: pd.DataFrame | None = None
                    ) -> list[MobilitySeries]:
    """Per region with at least one published row, its six series over ``days`` (the
    release's dates): the published integers, NaN for a suppressed value or a region-day
    without a row, and with ``intervals`` (the intervals file's rows, keyed like
    ``published``) each value's interval. Rows are matched to ``regions`` on Google's key
    columns; rows of other regions (levels not charted) are left out."""
    columns = [f"{c}_percent_change_from_baseline" for c in CATEGORIES]
    if intervals is not None:
        ends = [f"{c}_{end}" for c in columns for end in ("low", "high")]
        published = published.merge(intervals[[*MOBILITY_KEYS, "date", *ends]],
                                     on=[*MOBILITY_KEYS, "date"], how="left",
                                     validate="one_to_one")
    keyed = published.merge(regions[["region_id", *MOBILITY_KEYS]], on=list(MOBILITY_KEYS),
                            how="inner", validate="many_to_one")
    day_index = pd.Index(list(days))
    out = []
    rows_by_region = dict(tuple(keyed.groupby("region_id", sort=False)))
    for region in ordered_regions(regions):
        part = rows_by_region.get(region["region_id"])
        if part is None:
            continue
        at = day_index.get_indexer(part["date"])
        if (at < 0).any():
            raise ValueError(f"published mobility rows of {region['region_id']} dated "
                             "outside the release")
        bands = ((_grid(part, columns, at, len(day_index), "_low"),
                  _grid(part, columns, at, len(day_index), "_high"))
                 if intervals is not None else (None, None))
        out.append(MobilitySeries(str(region["region_id"]), int(region["level"]),
                                  str(region["title"]),
                                  _grid(part, columns, at, len(day_index), ""), *bands))
    return out


def _grid(part: pd.DataFrame, columns: list[str], at: NDArray[np.intp], n_days: int,
          suffix: str) -> NDArray[np.float64]:
    """(categories x days) of the columns ``<column><suffix>``, NaN where nothing is."""
    grid = np.full((len(columns), n_days), np.nan)
    for i, col in enumerate(columns):
        grid[i, at] = part[col + suffix].astype("Float64").to_numpy(np.float64,
                                                                    na_value=np.nan)
    return grid


def _percent(value: float) -> str:
    return "Baseline" if value == 0 else f"{value:+.0f}%".replace("-", "\u2212")


class MobilityChart:
    """Six panels (one per category, as in Google's PDF reports) of percent change from
    baseline, with the zero line, the same y-range in every panel of a region."""

    def __init__(self, days: Sequence[str]) -> None:
        from matplotlib.transforms import ScaledTranslation

        self.days = list(days)
        self._fig = BlitFigure(MOBILITY_SIZE)
        fig = self._fig.figure
        fig.subplots_adjust(left=0.075, right=0.985, top=0.79, bottom=0.07,
                            wspace=0.12, hspace=0.62)
        self.axes = list(fig.subplots(2, 3, sharex=True, sharey=True).flat)
        n = len(self.days)
        ticks, labels = date_ticks(self.days, max_ticks=4)
        self.lines = []
        self.points = []
        self.headlines = []
        above = ScaledTranslation(0, 4 / 72, fig.dpi_scale_trans)  # 4 points up
        for ax, category in zip(self.axes, CATEGORIES, strict=True):
            # the category, and under it the last published change (in the title area,
            # where a long name and a dated change both fit the panel's width)
            ax.set_title(CATEGORY_LABELS.get(category, category), loc="left",
                         fontweight="bold", pad=15)
            ax.axhline(0, color=MUTED, linewidth=0.8, zorder=1)
            ax.set_xlim(-0.5, n - 0.5)
            ax.set_xticks(ticks, labels)
            ax.tick_params(axis="y", labelleft=ax.get_subplotspec().is_first_col())
            (line,) = ax.plot([], [], color=LINE, linewidth=1.3, animated=True, zorder=3,
                              solid_joinstyle="round")
            (point,) = ax.plot([], [], color=LINE, linestyle="none", marker="o",
                               markersize=2.2, animated=True, zorder=3)
            headline = ax.text(0, 1, "", transform=ax.transAxes + above, ha="left",
                               va="bottom", fontsize=8, color=LINE, fontweight="bold",
                               animated=True)
            self.lines.append(line)
            self.points.append(point)
            self.headlines.append(headline)
        self.title = fig.text(0.012, 0.965, "", fontsize=10.5, fontweight="bold",
                              va="top", animated=True)
        fig.text(0.012, 0.905, f"Percent change from baseline, {self.days[0]} to "
                 f"{self.days[-1]}; band: 95% interval. Gaps: not published (too few "
                 "people, or not reliable enough).", fontsize=7, color=MUTED, va="top")
        self._x = np.arange(n, dtype=np.float64)

    def _set_range(self, limit: int) -> None:
        low = -min(limit, 100)
        ticks = [low, 0, limit] if low == -limit else [low, 0, limit // 2, limit]
        ax = self.axes[0]
        ax.set_ylim(low * 1.1, limit * 1.1)
        ax.set_yticks(ticks, [_percent(t) for t in ticks])
        for other in self.axes:
            other.yaxis.grid(True, color=GRID, linewidth=0.6, zorder=0)

    @staticmethod
    def y_range(values: NDArray[np.float64]) -> int:
        top = float(np.nanmax(np.abs(values), initial=0.0))
        return next((r for r in MOBILITY_RANGES if top <= r), MOBILITY_RANGES[-1])

    def _band(self, ax: Any, low: NDArray[np.float64], high: NDArray[np.float64]) -> None:
        """Draw the interval band of one panel (a gap where a value has none)."""
        if not (np.isfinite(low) & np.isfinite(high)).any():
            return
        band = ax.fill_between(self._x, low, high, color=LINE, alpha=0.18, linewidth=0,
                               animated=True, zorder=2)
        self._fig.draw(band)
        band.remove()

    def render(self, series: MobilitySeries) -> bytes:
        shown = [series.values] + [b for b in (series.low, series.high) if b is not None]
        self._fig.background(self.y_range(np.concatenate(shown)), self._set_range)
        for i, (line, point, headline) in enumerate(
                zip(self.lines, self.points, self.headlines, strict=True)):
            y = series.values[i]
            if series.low is not None and series.high is not None:
                self._band(self.axes[i], series.low[i], series.high[i])
            line.set_data(self._x, y)
            point.set_data(self._x, isolated(y))
            headline.set_text(_headline(self.days, y))
            headline.set_color(LINE if np.isfinite(y).any() else MUTED)
            self._fig.draw(line)
            if np.isfinite(point.get_ydata()).any():
                self._fig.draw(point)
            self._fig.draw(headline)
        self.title.set_text(series.title)
        self._fig.draw(self.title)
        return self._fig.png()


def _headline(days: Sequence[str], values: NDArray[np.float64]) -> str:
    """The last published change, dated when it is not the last day of the release."""
    present = np.flatnonzero(~np.isnan(values))
    if present.size == 0:
        return "not published"
    last = int(present[-1])
    text = _percent(float(values[last])) if values[last] != 0 else "0%"
    if last == len(days) - 1:
        return text
    day = date.fromisoformat(days[last])
    return f"{text} on {day:%b} {day.day}"


def mobility_alt(days: Sequence[str], series: MobilitySeries) -> str:
    """The chart's alt text: the region, the period and each category's last published
    change."""
    last = ", ".join(f"{CATEGORY_LABELS[c].lower()} {_headline(days, series.values[i])}"
                     for i, c in enumerate(CATEGORIES))
    return (f"Mobility in {series.title}, percent change from baseline, {days[0]} to "
            f"{days[-1]}; last published: {last}")


def write_mobility_charts(published: pd.DataFrame, regions: pd.DataFrame,
                          days: Sequence[str], target: Path,
                          intervals: pd.DataFrame | None = None) -> list[ChartEntry]:
    """Draw ``charts/<region>.png`` under ``target`` for every region of ``regions`` with
    a published row (with ``intervals``, a band of each value's interval); return an
    entry per region of ``regions`` (those without a chart have ``file=None``), in index
    order."""
    drawn: dict[str, tuple[str, str]] = {}
    series = mobility_series(published, regions, days, intervals)
    if series:
        (target / CHART_DIR).mkdir(parents=True, exist_ok=True)
        with chart_style():
            chart = MobilityChart(days)
            for s in series:
                name = chart_file(s.region_id)
                (target / name).write_bytes(chart.render(s))
                drawn[s.region_id] = (name, mobility_alt(days, s))
    return chart_entries(regions, drawn, MOBILITY_SIZE)
