"""Release charts (SPEC section 8): per region, the six mobility series and the top
symptoms over time, as PNG files under ``charts/`` in the release directory.

Privacy: a chart is drawn from the published table only, the same values as the CSV
(noisy, rounded, suppressed); a value that is not published is a gap in its line, never
interpolated. Charting is post-processing and spends no budget. Nothing here reads
``work/``.

Speed: every daily run publishes a release, so every gate step draws every region's
chart. Drawing a whole matplotlib figure per region costs ~170 ms; here one figure per
report is laid out once, its static part (frame, ticks, labels) is rendered once per
y-range and copied back for each region, which then draws only its own lines and texts
(matplotlib's blitting); Pillow writes an 8-bit PNG with a fixed palette. That is
~15 ms a region, most of it drawing the texts.

Determinism: a rerun must reproduce a release byte for byte, so the figures are drawn
headless with the Agg canvas (the object API, no pyplot, no global backend switch) under
matplotlib's default style plus the settings below (never a local ``matplotlibrc``), in
the bundled DejaVu Sans font, at a fixed size and dpi; the PNG carries no metadata (no
software name, no time). A region's bytes do not depend on which regions were drawn
before it: each draw starts from the same copied background.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dp_ops.reports.mobility.estimates import CATEGORIES
from dp_ops.reports.mobility.report import KEY_COLUMNS as MOBILITY_KEYS

CHART_DIR = "charts"
DPI = 100
MOBILITY_SIZE = (720, 420)  # pixels
SYMPTOMS_SIZE = (720, 320)
TOP_SYMPTOMS = 5

CATEGORY_LABELS: dict[str, str] = {
    "retail_and_recreation": "Retail & recreation",
    "grocery_and_pharmacy": "Grocery & pharmacy",
    "parks": "Parks",
    "transit_stations": "Transit stations",
    "workplaces": "Workplaces",
    "residential": "Residential",
}
LEVEL_NAMES: dict[int, str] = {0: "Country", 1: "Sub-region 1", 2: "Sub-region 2"}

# y-ranges a chart snaps to: the smallest that holds every value of the region. A few
# fixed ranges keep panels comparable between regions (like the PDF reports' +-80%) and
# let the static part of the figure be drawn once per range, not once per region.
MOBILITY_RANGES = (40, 80, 160, 320, 640, 1000)
SYMPTOM_RANGE_START = 25.0

_INK = "#3c4043"
_MUTED = "#80868b"
_GRID = "#e8eaed"
_LINE = "#1a73e8"
_EDGE = "#bdc1c6"
_SYMPTOM_COLOURS = ("#1a73e8", "#d93025", "#188038", "#e37400", "#9334e6")
_PALETTE_COLOURS = (_INK, _MUTED, _GRID, _EDGE, _LINE, *_SYMPTOM_COLOURS)

# matplotlib's defaults (rcdefaults) and then these: a local matplotlibrc or a style set
# elsewhere in the process must not change a published byte.
_STYLE: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 7.5,
    # unhinted glyphs draw in half the time of the default (matplotlib 3.11 lays out and
    # rasterises text glyph by glyph, the largest cost of a chart)
    "text.hinting": "none",
    "text.color": _INK,
    "axes.edgecolor": _EDGE,
    "axes.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 8,
    "xtick.color": _MUTED,
    "ytick.color": _MUTED,
    "xtick.major.size": 2.5,
    "xtick.major.width": 0.6,
    "ytick.major.size": 0,
    "ytick.major.pad": 2,
    "figure.facecolor": "white",
    "axes.facecolor": "white",
}


# -- the data a chart shows ------------------------------------------------------------------
@dataclass(frozen=True)
class ChartEntry:
    """One region's chart in a release: ``file`` is its path inside the release
    directory, ``None`` when nothing of the region is published in this release."""

    region_id: str
    level: int
    title: str
    names: tuple[str, ...]
    file: str | None
    alt: str
    width: int
    height: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MobilitySeries:
    """A region's published percent changes: ``values[i, d]`` is category
    ``CATEGORIES[i]`` on day ``d`` of the release, NaN where nothing is published."""

    region_id: str
    level: int
    title: str
    values: NDArray[np.float64]


@dataclass(frozen=True)
class SymptomLine:
    """One symptom's published values: daily at day positions, or weekly as steps from
    each Monday to the next (``x`` has one more point than values, ending the last week)."""

    symptom: str
    resolution: str
    x: NDArray[np.float64]
    y: NDArray[np.float64]


@dataclass(frozen=True)
class SymptomSeries:
    region_id: str
    level: int
    title: str
    lines: tuple[SymptomLine, ...]


def region_names(row: Any) -> tuple[str, ...]:
    """(country, sub_region_1, sub_region_2, metro area), the empty ones left out."""
    parts = (row["country_region"], row["sub_region_1"], row["sub_region_2"],
             row["metro_area"])
    return tuple(str(p) for p in parts if isinstance(p, str) and p)


def region_title(row: Any) -> str:
    """``country / sub_region_1 / sub_region_2`` (and the metro area where there is one)."""
    return " / ".join(region_names(row))


def chart_file(region_id: str) -> str:
    """``charts/<region_id>.png``; an id with other characters than letters, digits,
    ``._-`` is made safe and keeps a hash of the original so that names stay distinct."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", region_id)
    if safe != region_id or safe.startswith("."):
        safe = f"{safe.lstrip('.')}-{hashlib.sha256(region_id.encode()).hexdigest()[:8]}"
    return f"{CHART_DIR}/{safe}.png"


def _ordered(regions: pd.DataFrame) -> list[dict[str, Any]]:
    """Regions (as records with their ``title``) by level, then by name path: the order
    of the release index."""
    records = regions.to_dict(orient="records")
    for r in records:
        r["title"] = region_title(r)
    return sorted(records, key=lambda r: (int(r["level"]), r["title"], str(r["region_id"])))


def mobility_series(published: pd.DataFrame, regions: pd.DataFrame,
                    days: Sequence[str]) -> list[MobilitySeries]:
    """Per region with at least one published row, its six series over ``days`` (the
    release's dates): the published integers, NaN for a suppressed value or a region-day
    without a row. Rows are matched to ``regions`` on Google's key columns; rows of other
    regions (levels not charted) are left out."""
    columns = [f"{c}_percent_change_from_baseline" for c in CATEGORIES]
    keyed = published.merge(regions[["region_id", *MOBILITY_KEYS]], on=list(MOBILITY_KEYS),
                            how="inner", validate="many_to_one")
    day_index = pd.Index(list(days))
    out = []
    rows_by_region = dict(tuple(keyed.groupby("region_id", sort=False)))
    for region in _ordered(regions):
        part = rows_by_region.get(region["region_id"])
        if part is None:
            continue
        grid = np.full((len(columns), len(day_index)), np.nan)
        at = day_index.get_indexer(part["date"])
        if (at < 0).any():
            raise ValueError(f"published mobility rows of {region['region_id']} dated "
                             "outside the release")
        for i, col in enumerate(columns):
            grid[i, at] = part[col].astype("Float64").to_numpy(np.float64, na_value=np.nan)
        out.append(MobilitySeries(str(region["region_id"]), int(region["level"]),
                                  str(region["title"]), grid))
    return out


def symptom_series(daily: pd.DataFrame, weekly: pd.DataFrame, regions: pd.DataFrame,
                   days: Sequence[str], top: int = TOP_SYMPTOMS) -> list[SymptomSeries]:
    """Per region of ``regions`` in either published file, its ``top`` symptoms (rows of
    other regions, of levels not charted, are left out): a symptom published
    daily in the region is shown daily, else weekly. Symptoms rank by their mean value
    over the release period with unpublished periods counted as zero, so a series
    published most of the time outranks a single high value."""
    columns = [c for c in daily.columns if c.startswith("symptom:")]
    day_index = pd.Index(list(days))
    n_days = len(day_index)
    by_code = {str(r["open_covid_region_code"]): r for r in _ordered(regions)}
    mondays = pd.Index(sorted(set(weekly["date"])))
    daily_grids = _grids(daily, columns, day_index)
    weekly_grids = _grids(weekly, columns, mondays)
    monday_at = day_index.get_indexer(mondays)
    if (monday_at < 0).any():
        raise ValueError("weekly symptom rows dated outside the release")
    week_x = np.append(monday_at, monday_at[-1] + 7 if len(monday_at) else 0) - 0.5
    day_x = np.arange(n_days, dtype=np.float64)
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
                lines.append(SymptomLine(name, "daily", day_x, d[:, j]))
            else:
                lines.append(SymptomLine(name, "weekly", week_x, np.append(w[:, j], np.nan)))
        out.append(SymptomSeries(str(region["region_id"]), int(region["level"]),
                                 str(region["title"]), tuple(lines)))
    return out


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


def isolated(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """The values with no published neighbour on either side (the rest NaN): a line
    cannot show them, so they get a marker."""
    present = ~np.isnan(values)
    before = np.concatenate(([False], present[:-1]))
    after = np.concatenate((present[1:], [False]))
    return np.where(present & ~before & ~after, values, np.nan)


# -- drawing ---------------------------------------------------------------------------------
@contextmanager
def _style() -> Iterator[None]:
    import matplotlib as mpl

    with mpl.rc_context():
        mpl.rcdefaults()
        cast(Any, mpl.rcParams).update(_STYLE)
        yield


def date_ticks(days: Sequence[str], max_ticks: int) -> tuple[list[int], list[str]]:
    """Tick positions (day indexes) and labels: the 1st and 15th of each month when they
    fit, else the 1st of every 1, 2, 3, 6 or 12 months."""
    parsed = [date.fromisoformat(d) for d in days]
    semi = [i for i, d in enumerate(parsed) if d.day in (1, 15)]
    if len(semi) <= max_ticks:
        return semi, [f"{parsed[i]:%b} {parsed[i].day}" for i in semi]
    firsts = [i for i, d in enumerate(parsed) if d.day == 1]
    for step in (1, 2, 3, 6, 12):
        picked = [i for i in firsts if (parsed[i].month - 1) % step == 0]
        if len(picked) <= max_ticks:
            return picked, [f"{parsed[i]:%b %Y}" for i in picked]
    picked = [i for i in firsts if parsed[i].month == 1]
    stride = -(-len(picked) // max_ticks)
    picked = picked[::stride]
    return picked, [f"{parsed[i]:%Y}" for i in picked]


@lru_cache(maxsize=1)
def _palette() -> Any:
    """A fixed 8-bit palette: white and each colour the charts draw in, blended with white
    in 16 steps (the shades antialiasing makes). Mapping to a fixed palette takes a
    tenth of the time of quantizing each image, and a region's bytes cannot depend on
    what else was drawn."""
    from matplotlib.colors import to_rgb
    from PIL import Image

    entries: list[tuple[int, ...]] = [(255, 255, 255)]
    for colour in _PALETTE_COLOURS:
        rgb = [255 * v for v in to_rgb(colour)]
        for k in range(1, 16):
            shade = tuple(round(255 + (v - 255) * k / 15) for v in rgb)
            # Pillow maps colours through a coarse lookup: a shade this close to white
            # would take the white background's place
            if min(shade) <= 246 and shade not in entries:
                entries.append(shade)
    palette = Image.new("P", (1, 1))
    palette.putpalette([v for e in entries for v in e])
    return palette


def _png(canvas: Any) -> bytes:
    from PIL import Image

    width, height = canvas.get_width_height()
    image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    indexed = image.convert("RGB").quantize(palette=_palette(), dither=Image.Dither.NONE)
    out = io.BytesIO()
    indexed.save(out, format="png", compress_level=3)  # no text chunks, no time
    return out.getvalue()


class _BlitFigure:
    """A figure whose static part is rendered once per key (a y-range) and restored
    before each region draws its animated artists."""

    def __init__(self, size: tuple[int, int]) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.figure = Figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI)
        self.canvas = FigureCanvasAgg(self.figure)
        self._backgrounds: dict[Any, Any] = {}
        self._key: Any = None

    def background(self, key: Any, set_up: Any) -> None:
        """Restore the static part for ``key``, drawing it first (``set_up(key)`` puts
        the figure in that state) if it is new."""
        if key not in self._backgrounds:
            set_up(key)
            self.canvas.draw()
            self._backgrounds[key] = self.canvas.copy_from_bbox(self.figure.bbox)
            self._key = key
        elif key != self._key:
            set_up(key)  # the animated artists are drawn in the axes' current limits
            self._key = key
        self.canvas.restore_region(self._backgrounds[key])

    def draw(self, artist: Any) -> None:
        self.figure.draw_artist(artist)


def _percent(value: float) -> str:
    return "Baseline" if value == 0 else f"{value:+.0f}%".replace("-", "\u2212")


class MobilityChart:
    """Six panels (one per category, as in Google's PDF reports) of percent change from
    baseline, with the zero line, the same y-range in every panel of a region."""

    def __init__(self, days: Sequence[str]) -> None:
        from matplotlib.transforms import ScaledTranslation

        self.days = list(days)
        self._fig = _BlitFigure(MOBILITY_SIZE)
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
            ax.axhline(0, color=_MUTED, linewidth=0.8, zorder=1)
            ax.set_xlim(-0.5, n - 0.5)
            ax.set_xticks(ticks, labels)
            ax.tick_params(axis="y", labelleft=ax.get_subplotspec().is_first_col())
            (line,) = ax.plot([], [], color=_LINE, linewidth=1.3, animated=True, zorder=3,
                              solid_joinstyle="round")
            (point,) = ax.plot([], [], color=_LINE, linestyle="none", marker="o",
                               markersize=2.2, animated=True, zorder=3)
            headline = ax.text(0, 1, "", transform=ax.transAxes + above, ha="left",
                               va="bottom", fontsize=8, color=_LINE, fontweight="bold",
                               animated=True)
            self.lines.append(line)
            self.points.append(point)
            self.headlines.append(headline)
        self.title = fig.text(0.012, 0.965, "", fontsize=10.5, fontweight="bold",
                              va="top", animated=True)
        fig.text(0.012, 0.905, f"Percent change from baseline, {self.days[0]} to "
                 f"{self.days[-1]}. Gaps: not published (too few people, or not "
                 "reliable enough).", fontsize=7, color=_MUTED, va="top")
        self._x = np.arange(n, dtype=np.float64)

    def _set_range(self, limit: int) -> None:
        low = -min(limit, 100)
        ticks = [low, 0, limit] if low == -limit else [low, 0, limit // 2, limit]
        ax = self.axes[0]
        ax.set_ylim(low * 1.1, limit * 1.1)
        ax.set_yticks(ticks, [_percent(t) for t in ticks])
        for other in self.axes:
            other.yaxis.grid(True, color=_GRID, linewidth=0.6, zorder=0)

    @staticmethod
    def y_range(values: NDArray[np.float64]) -> int:
        top = float(np.nanmax(np.abs(values), initial=0.0))
        return next((r for r in MOBILITY_RANGES if top <= r), MOBILITY_RANGES[-1])

    def render(self, series: MobilitySeries) -> bytes:
        self._fig.background(self.y_range(series.values), self._set_range)
        for i, (line, point, headline) in enumerate(
                zip(self.lines, self.points, self.headlines, strict=True)):
            y = series.values[i]
            line.set_data(self._x, y)
            point.set_data(self._x, isolated(y))
            headline.set_text(_headline(self.days, y))
            headline.set_color(_LINE if np.isfinite(y).any() else _MUTED)
            self._fig.draw(line)
            if np.isfinite(point.get_ydata()).any():
                self._fig.draw(point)
            self._fig.draw(headline)
        self.title.set_text(series.title)
        self._fig.draw(self.title)
        return _png(self._fig.canvas)


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
    last = ", ".join(f"{CATEGORY_LABELS[c].lower()} {_headline(days, series.values[i])}"
                     for i, c in enumerate(CATEGORIES))
    return (f"Mobility in {series.title}, percent change from baseline, {days[0]} to "
            f"{days[-1]}; last published: {last}")


class SymptomChart:
    """The region's top symptoms over the release period, one line each; weekly series
    as steps over their weeks."""

    def __init__(self, days: Sequence[str], top: int = TOP_SYMPTOMS) -> None:
        from matplotlib.lines import Line2D

        self.days = list(days)
        self._fig = _BlitFigure(SYMPTOMS_SIZE)
        fig = self._fig.figure
        fig.subplots_adjust(left=0.065, right=0.66, top=0.78, bottom=0.1)
        self.ax = fig.subplots()
        ax = self.ax
        n = len(self.days)
        ticks, labels = date_ticks(self.days, max_ticks=6)
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_xticks(ticks, labels)
        ax.yaxis.grid(True, color=_GRID, linewidth=0.6, zorder=0)
        self.lines = []
        self.points = []
        for i in range(top):
            colour = _SYMPTOM_COLOURS[i % len(_SYMPTOM_COLOURS)]
            (line,) = ax.plot([], [], color=colour, linewidth=1.3, animated=True, zorder=3)
            (point,) = ax.plot([], [], color=colour, linestyle="none", marker="o",
                               markersize=2.2, animated=True, zorder=3)
            self.lines.append(line)
            self.points.append(point)
        self.legend_texts = [
            fig.text(0.70, 0.72 - 0.085 * i, "", fontsize=7.5, va="center_baseline",
                     animated=True, color=_INK) for i in range(top)]
        # legend keys are short lines in figure coordinates (a line draws in a tenth of
        # the time of a text)
        self.legend_keys = [
            Line2D([0.672, 0.692], [0.72 - 0.085 * i] * 2, transform=fig.transFigure,
                   color=_SYMPTOM_COLOURS[i % len(_SYMPTOM_COLOURS)], linewidth=2,
                   animated=True) for i in range(top)]
        for key in self.legend_keys:
            fig.add_artist(key)
        self.title = fig.text(0.012, 0.965, "", fontsize=10.5, fontweight="bold",
                              va="top", animated=True)
        fig.text(0.012, 0.88, f"Top symptoms by search interest, {self.days[0]} to "
                 f"{self.days[-1]} (100 = the region's largest value in its first "
                 "release). Gaps: not published.",
                 fontsize=7, color=_MUTED, va="top")
        self.empty = fig.text(0.34, 0.45, "", ha="center", color=_MUTED, animated=True)

    def _set_range(self, limit: float) -> None:
        self.ax.set_ylim(0, limit * 1.05)
        ticks = [0, limit / 2, limit]
        self.ax.set_yticks(ticks, [f"{t:g}" for t in ticks])

    @staticmethod
    def y_range(series: SymptomSeries) -> float:
        top = max((float(np.nanmax(line.y, initial=0.0)) for line in series.lines),
                  default=0.0)
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
        return _png(self._fig.canvas)


def symptoms_alt(days: Sequence[str], series: SymptomSeries) -> str:
    names = ", ".join(f"{line.symptom} ({line.resolution})" for line in series.lines)
    return (f"Top symptoms in {series.title}, {days[0]} to {days[-1]}: "
            f"{names or 'none published'}")


# -- writing a release's charts --------------------------------------------------------------
def charted_regions(regions: pd.DataFrame,
                    report_levels: Sequence[int]) -> tuple[pd.DataFrame, list[int]]:
    """The regions of ``report_levels`` to chart, and the levels left out, per the
    execution setting ``chart_levels`` (default: every level)."""
    from dp_ops.settings import load_execution_settings

    wanted = load_execution_settings().chart_levels
    levels = [lv for lv in report_levels if wanted is None or lv in wanted]
    skipped = [lv for lv in report_levels if lv not in levels]
    return regions[regions["level"].isin(levels)], skipped


def _entries(regions: pd.DataFrame, drawn: dict[str, tuple[str, str]],
             size: tuple[int, int]) -> list[ChartEntry]:
    out = []
    for region in _ordered(regions):
        rid = str(region["region_id"])
        file, alt = drawn.get(rid, (None, ""))
        out.append(ChartEntry(rid, int(region["level"]), str(region["title"]),
                              region_names(region), file, alt, *size))
    return out


def write_mobility_charts(published: pd.DataFrame, regions: pd.DataFrame,
                          days: Sequence[str], target: Path) -> list[ChartEntry]:
    """Draw ``charts/<region>.png`` under ``target`` for every region of ``regions`` with
    a published row; return an entry per region of ``regions`` (those without a chart
    have ``file=None``), in index order."""
    drawn: dict[str, tuple[str, str]] = {}
    series = mobility_series(published, regions, days)
    if series:
        (target / CHART_DIR).mkdir(parents=True, exist_ok=True)
        with _style():
            chart = MobilityChart(days)
            for s in series:
                name = chart_file(s.region_id)
                (target / name).write_bytes(chart.render(s))
                drawn[s.region_id] = (name, mobility_alt(days, s))
    return _entries(regions, drawn, MOBILITY_SIZE)


def write_symptom_charts(daily: pd.DataFrame, weekly: pd.DataFrame, regions: pd.DataFrame,
                         days: Sequence[str], target: Path,
                         top: int = TOP_SYMPTOMS) -> list[ChartEntry]:
    """Draw ``charts/<region>.png`` under ``target`` for every region in the daily or
    weekly file; return an entry per region of ``regions``, in index order."""
    drawn: dict[str, tuple[str, str]] = {}
    series = symptom_series(daily, weekly, regions, days, top)
    if series:
        (target / CHART_DIR).mkdir(parents=True, exist_ok=True)
        with _style():
            chart = SymptomChart(days, top)
            for s in series:
                name = chart_file(s.region_id)
                (target / name).write_bytes(chart.render(s))
                drawn[s.region_id] = (name, symptoms_alt(days, s))
    return _entries(regions, drawn, SYMPTOMS_SIZE)


def release_days(first: date, last: date) -> list[str]:
    return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]
