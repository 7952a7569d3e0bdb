"""Release charts (docs/design.md, Outputs), the part every report shares: a PNG per
region under ``charts/`` in the release directory, and an entry per region for the
release page. Each report draws its own figure (what it plots, its size and y-ranges) on
top of this.

Privacy: a chart is drawn from the published table only, the same values as the CSV
(noisy, rounded, suppressed); a value that is not published is a gap in its line, never
interpolated. Charting is post-processing and spends no budget. Nothing here reads
``work/``.

Speed: every daily run publishes a release, so every gate step draws every region's
chart. Drawing a whole matplotlib figure per region is costly; instead a report lays
out one figure (a :class:`BlitFigure`) once, its static part (frame, ticks, labels) is
rendered once per y-range and copied back for each region, which then draws only its own
lines (matplotlib's blitting) and Pillow its texts (the region's title, the last values),
then writes an 8-bit PNG with a fixed palette (:func:`png_bytes`). Pillow draws the texts
because matplotlib lays out and rasterises text glyph by glyph in Python, which was the
largest part of a chart's cost.

Determinism: a rerun must reproduce a release byte for byte, so the figures are drawn
headless with the Agg canvas (the object API, no pyplot, no global backend switch) under
matplotlib's default style plus the settings below (:func:`chart_style`, never a local
``matplotlibrc``), in the bundled DejaVu Sans font, at a fixed size and dpi, the region's
texts with Pillow's basic layout (no HarfBuzz); the PNG carries no metadata (no software
name, no time). A region's bytes do not depend on which
regions were drawn before it: each draw starts from the same copied background.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from functools import lru_cache
from typing import Any, cast

import numpy as np
import pandas as pd
from numpy.typing import NDArray

CHART_DIR = "charts"
DPI = 100

# display labels of the region levels (charts' page headings, the release page)
LEVEL_LABELS: dict[int, str] = {0: "Country", 1: "Sub-region 1", 2: "Sub-region 2"}

# the colours charts draw in; every one of them is in the PNG palette (_palette)
INK = "#3c4043"
MUTED = "#80868b"
GRID = "#e8eaed"
LINE = "#1a73e8"
EDGE = "#bdc1c6"
# one colour per line of a chart with several series (in rank order)
SERIES_COLOURS = ("#1a73e8", "#d93025", "#188038", "#e37400", "#9334e6")
_PALETTE_COLOURS = (INK, MUTED, GRID, EDGE, LINE, *SERIES_COLOURS)

# matplotlib's defaults (rcdefaults) and then these: a local matplotlibrc or a style set
# elsewhere in the process must not change a published byte.
_STYLE: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 7.5,
    # unhinted glyphs draw faster than the default (matplotlib 3.11 lays out and
    # rasterises text glyph by glyph, the largest cost of a chart)
    "text.hinting": "none",
    "text.color": INK,
    "axes.edgecolor": EDGE,
    "axes.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 8,
    "xtick.color": MUTED,
    "ytick.color": MUTED,
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


def ordered_regions(regions: pd.DataFrame) -> list[dict[str, Any]]:
    """Regions (as records with their ``title``) by level, then by name path: the order
    of the release index."""
    records = regions.to_dict(orient="records")
    for r in records:
        r["title"] = region_title(r)
    return sorted(records, key=lambda r: (int(r["level"]), r["title"], str(r["region_id"])))


def isolated(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """The values with no published neighbour on either side (the rest NaN): a line
    cannot show them, so they get a marker."""
    present = ~np.isnan(values)
    before = np.concatenate(([False], present[:-1]))
    after = np.concatenate((present[1:], [False]))
    return np.where(present & ~before & ~after, values, np.nan)


# -- drawing ---------------------------------------------------------------------------------
@contextmanager
def chart_style() -> Iterator[None]:
    """matplotlib's defaults plus the charts' settings, for the duration of the block
    (a chart's figure is laid out and drawn inside it)."""
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


@dataclass(frozen=True)
class RegionText:
    """A text a region's chart adds to the figure, drawn by Pillow onto the rendered
    image (:func:`png_bytes`): ``xy`` in image pixels from the top left, ``anchor`` in
    Pillow's two-letter form, ``font`` a TrueType file, ``size`` in pixels."""

    text: str
    xy: tuple[float, float]
    anchor: str
    font: str
    size: float
    colour: tuple[int, int, int]


# matplotlib's text alignments -> Pillow's anchors (horizontal, vertical)
_HA = {"left": "l", "center": "m", "right": "r"}
_VA = {"top": "a", "center": "m", "center_baseline": "m", "baseline": "s", "bottom": "d"}


def region_text(artist: Any, height: int) -> RegionText:
    """The :class:`RegionText` of a matplotlib ``Text`` artist: its position, alignment,
    font, size and colour as matplotlib would draw it."""
    from matplotlib.colors import to_rgb
    from matplotlib.font_manager import findfont

    x, y = artist.get_transform().transform(artist.get_position())
    colour = tuple(round(255 * v) for v in to_rgb(artist.get_color()))
    return RegionText(
        text=str(artist.get_text()), xy=(float(x), float(height - y)),
        anchor=_HA[artist.get_horizontalalignment()] + _VA[artist.get_verticalalignment()],
        font=findfont(artist.get_fontproperties()),
        size=float(artist.get_fontsize()) * DPI / 72,
        colour=cast(tuple[int, int, int], colour))


@lru_cache(maxsize=16)
def _font(path: str, size: float) -> Any:
    from PIL import ImageFont

    # the basic layout (no raqm/HarfBuzz) gives the same bytes wherever Pillow runs
    return ImageFont.truetype(path, size, layout_engine=ImageFont.Layout.BASIC)


def png_bytes(canvas: Any, texts: Sequence[RegionText] = ()) -> bytes:
    """The Agg ``canvas``, with ``texts`` drawn on it, as an 8-bit PNG in the fixed
    palette, with no metadata."""
    from PIL import Image, ImageDraw

    width, height = canvas.get_width_height()
    image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    rgb = image.convert("RGB")
    if texts:
        draw = ImageDraw.Draw(rgb)
        for t in texts:
            if t.text:
                draw.text(t.xy, t.text, fill=t.colour, font=_font(t.font, t.size),
                          anchor=t.anchor)
    indexed = rgb.quantize(palette=_palette(), dither=Image.Dither.NONE)
    out = io.BytesIO()
    indexed.save(out, format="png", compress_level=3)  # no text chunks, no time
    return out.getvalue()


class BlitFigure:
    """A figure whose static part is rendered once per key (a y-range) and restored
    before each region draws its animated artists; a region's texts are drawn by Pillow
    (:func:`png_bytes`), about a twentieth of the time matplotlib takes to lay out and
    rasterise them glyph by glyph."""

    def __init__(self, size: tuple[int, int]) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.figure = Figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI)
        # Any: matplotlib's Agg canvas methods (draw, copy_from_bbox, ...) are unannotated
        self.canvas: Any = FigureCanvasAgg(self.figure)
        self._backgrounds: dict[Any, Any] = {}
        self._key: Any = None
        self._texts: list[RegionText] = []

    def background(self, key: Any, set_up: Callable[[Any], object]) -> None:
        """Restore the static part for ``key``, drawing it first (``set_up(key)`` puts
        the figure in that state) if it is new; the next region starts here."""
        if key not in self._backgrounds:
            set_up(key)
            self.canvas.draw()
            self._backgrounds[key] = self.canvas.copy_from_bbox(self.figure.bbox)
            self._key = key
        elif key != self._key:
            set_up(key)  # the animated artists are drawn in the axes' current limits
            self._key = key
        self.canvas.restore_region(self._backgrounds[key])
        self._texts = []

    def draw(self, artist: Any) -> None:
        """Draw an animated artist of this region (a text is kept for :meth:`png`)."""
        from matplotlib.text import Text

        if isinstance(artist, Text):
            self._texts.append(region_text(artist, self.canvas.get_width_height()[1]))
        else:
            self.figure.draw_artist(artist)

    def png(self) -> bytes:
        """This region's chart (:func:`png_bytes`)."""
        return png_bytes(self.canvas, self._texts)


# -- writing a release's charts --------------------------------------------------------------
def charted_regions(regions: pd.DataFrame,
                    report_levels: Sequence[int]) -> tuple[pd.DataFrame, list[int]]:
    """The regions of ``report_levels`` to chart, and the levels left out, per the
    execution setting ``chart_levels`` (default: every level)."""
    from dp_ops.settings import execution_settings

    wanted = execution_settings().chart_levels
    levels = [lv for lv in report_levels if wanted is None or lv in wanted]
    skipped = [lv for lv in report_levels if lv not in levels]
    return regions[regions["level"].isin(levels)], skipped


def chart_entries(regions: pd.DataFrame, drawn: dict[str, tuple[str, str]],
                  size: tuple[int, int]) -> list[ChartEntry]:
    """An entry per region of ``regions``, in index order: ``drawn`` maps a region id to
    its chart's (file, alt text); a region not in it gets ``file=None``."""
    out = []
    for region in ordered_regions(regions):
        rid = str(region["region_id"])
        file, alt = drawn.get(rid, (None, ""))
        out.append(ChartEntry(rid, int(region["level"]), str(region["title"]),
                              region_names(region), file, alt, *size))
    return out


def release_days(first: date, last: date) -> list[str]:
    """Every day from ``first`` to ``last`` (both included), as ISO dates."""
    return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]
