"""The public region table (docs/design.md, Input contract): the demo country, CSV I/O and
validation.

The region table is public: every (region, date, metric) cell of a report is generated
from it, never from the data (delta = 0 needs a data-independent output domain). It is a
three-level tree: the country (level 0), its sub_region_1 (level 1) and their
sub_region_2 (level 2).

``demo_regions`` describes Demoland ("DM"), a fictional country shaped like Estonia:
15 counties, one holding the capital, and 58 municipalities spread unevenly over them
(the capital county has 10, an island county has 1). It contains on purpose:

- ``SMALL_TOWN_ID``, a municipality of 1.8 km^2, which the 3 km^2 rule must drop;
- ``SPARSE_REGION_IDS``, municipalities so thinly populated that fewer than ~60 users of
  the default demo population visit them on a day, which the 100-user rule must drop.

Population sizes are not part of the public table: ``demo_population_weights`` gives them
to the synthetic generator only.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dp_ops.errors import RegionTableError

REGION_COLUMNS: tuple[str, ...] = (
    "region_id",
    "parent_id",
    "level",
    "country_region_code",
    "country_region",
    "sub_region_1",
    "sub_region_2",
    "metro_area",
    "iso_3166_2_code",
    "census_fips_code",
    "place_id",
    "sub_region_1_code",
    "sub_region_2_code",
    "open_covid_region_code",
    "area_km2",
)
TEXT_COLUMNS: tuple[str, ...] = tuple(c for c in REGION_COLUMNS if c not in ("level", "area_km2"))

def write_regions(df: pd.DataFrame, path: str | Path) -> None:
    """Write the region table as UTF-8 CSV with a header and no index."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.loc[:, list(REGION_COLUMNS)].to_csv(path, index=False, encoding="utf-8", lineterminator="\n")


def read_regions(path: str | Path) -> pd.DataFrame:
    """Read and validate a region table; raise ``RegionTableError`` naming file and problem.

    Text columns come back as ``str`` with empty strings (never NaN), ``level`` as int64,
    ``area_km2`` as float64, columns in ``REGION_COLUMNS`` order. The table is public and
    read by several steps of a run: a process keeps the last one it validated and gives a
    copy of it while the file's size, modification time, inode and change time are
    unchanged (a file changed within 2 s of being read is read again: the racy-file rule
    of git). The processes that fork Airflow tasks read it once at start
    (``airflow_local_settings.py``), so each task gets it from there.
    """
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        st = None
    stamp = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino,
             st.st_ctime_ns) if st else None
    cached = _LAST_READ.get("table")
    if stamp is not None and cached is not None and cached[0] == stamp:
        return cached[1].copy()
    read_at = time.time_ns()
    df = _read_regions(path)
    if stamp is not None and read_at - stamp[2] > 2_000_000_000:
        _LAST_READ["table"] = (stamp, df.copy())
    return df


# The last region table this process read and validated, with its file's stamp.
_LAST_READ: dict[str, tuple[tuple[str, int, int, int, int], pd.DataFrame]] = {}


def _read_regions(path: Path) -> pd.DataFrame:
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise RegionTableError(f"{path}: cannot read region table: {exc}") from exc
    missing = [c for c in REGION_COLUMNS if c not in raw.columns]
    if missing:
        raise RegionTableError(f"{path}: missing required columns: {', '.join(missing)}")
    df = raw.loc[:, list(REGION_COLUMNS)].copy()
    df["level"] = _parse_column(path, df, "level", int)
    df["area_km2"] = _parse_column(path, df, "area_km2", float)
    df = df.astype({"level": "int64", "area_km2": "float64"})
    validate_regions(df, source=str(path))
    return df


def _parse_column(path: Path, df: pd.DataFrame, column: str, kind: type) -> list[object]:
    values: list[object] = []
    for i, text in enumerate(df[column]):
        try:
            values.append(kind(text))
        except ValueError:
            raise RegionTableError(
                f"{path}: {_where(i, df)}: {column}={text!r} is not a valid {kind.__name__}"
            ) from None
    return values


def _where(i: int, df: pd.DataFrame) -> str:
    """Row position as the data-row number and CSV line (header is line 1)."""
    return f"row {i + 1} (line {i + 2}), region {df['region_id'].iloc[i]!r}"


def validate_regions(df: pd.DataFrame, source: str = "<region table>") -> None:
    """Check the tree invariants the reports rely on; raise ``RegionTableError``."""
    if df.empty:
        # every stay would be quarantined as an unknown region: an empty report, no error
        raise RegionTableError(f"{source}: the region table has no regions")
    ids = df["region_id"].tolist()
    for i, region_id in enumerate(ids):
        if region_id == "":
            raise RegionTableError(f"{source}: {_where(i, df)}: region_id is empty")
    dup = df["region_id"].duplicated(keep=False)
    if dup.any():
        rows = ", ".join(_where(int(i), df) for i in np.flatnonzero(dup.to_numpy()))
        raise RegionTableError(f"{source}: duplicate region_id: {rows}")
    _check_areas(df, source)
    _check_levels(df, source)
    _check_parents_exist(df, source)
    _check_no_cycles(df, source)
    _check_parent_levels(df, source)
    _check_one_country_row(df, source)


def _check_areas(df: pd.DataFrame, source: str) -> None:
    # plain floats: a numpy scalar would print as np.float64(...) in the message
    for i, area in enumerate(df["area_km2"].astype("float64").tolist()):
        if not (math.isfinite(area) and area > 0):
            raise RegionTableError(
                f"{source}: {_where(i, df)}: area_km2={area!r} must be a finite number > 0"
            )


def _check_levels(df: pd.DataFrame, source: str) -> None:
    for i, level in enumerate(df["level"]):
        if level not in (0, 1, 2):
            raise RegionTableError(f"{source}: {_where(i, df)}: level={level!r} must be 0, 1 or 2")


def _check_parents_exist(df: pd.DataFrame, source: str) -> None:
    known = set(df["region_id"])
    for i, (level, parent) in enumerate(zip(df["level"], df["parent_id"], strict=True)):
        if level == 0 and parent != "":
            raise RegionTableError(
                f"{source}: {_where(i, df)}: a level-0 region must have an empty parent_id, "
                f"got {parent!r}"
            )
        if level > 0 and parent not in known:
            raise RegionTableError(
                f"{source}: {_where(i, df)}: parent_id {parent!r} is not a region in the table"
            )


def _check_no_cycles(df: pd.DataFrame, source: str) -> None:
    parent_of = dict(zip(df["region_id"], df["parent_id"], strict=True))
    for i, start in enumerate(df["region_id"]):
        seen = [start]
        node = parent_of[start]
        while node:
            if node in seen:
                chain = " -> ".join([*seen, node])
                raise RegionTableError(f"{source}: {_where(i, df)}: parent cycle {chain}")
            seen.append(node)
            node = parent_of.get(node, "")


def _check_parent_levels(df: pd.DataFrame, source: str) -> None:
    level_of = dict(zip(df["region_id"], df["level"], strict=True))
    country_of = dict(zip(df["region_id"], df["country_region_code"], strict=True))
    for i, row in enumerate(df.itertuples(index=False)):
        if row.level == 0:
            continue
        if level_of[row.parent_id] != row.level - 1:
            raise RegionTableError(
                f"{source}: {_where(i, df)}: level {row.level} but parent {row.parent_id!r} has "
                f"level {level_of[row.parent_id]} (must be {row.level - 1})"
            )
        if country_of[row.parent_id] != row.country_region_code:
            raise RegionTableError(
                f"{source}: {_where(i, df)}: country_region_code {row.country_region_code!r} "
                f"differs from its parent's {country_of[row.parent_id]!r}"
            )


def _check_one_country_row(df: pd.DataFrame, source: str) -> None:
    roots = df.loc[df["level"] == 0].groupby("country_region_code").size()
    for code in sorted(set(df["country_region_code"])):
        n = int(roots.get(code, 0))
        if n != 1:
            raise RegionTableError(
                f"{source}: country {code!r} has {n} level-0 rows (exactly one required)"
            )


# -- hierarchy -------------------------------------------------------------------------

def ancestors(regions: pd.DataFrame) -> pd.DataFrame:
    """Every region paired with itself and each of its ancestors.

    Columns ``finest_region_id, level, region_id``: a level-2 region yields 3 rows (its
    country, its sub_region_1 and itself). Joining stays on ``finest_region_id`` rolls them
    up to every level at once; the pipeline's bounding SQL relies on this.
    """
    parent_of = dict(zip(regions["region_id"], regions["parent_id"], strict=True))
    level_of = dict(zip(regions["region_id"], regions["level"], strict=True))
    finest: list[str] = []
    levels: list[int] = []
    region_ids: list[str] = []
    for region_id in regions["region_id"]:
        node = region_id
        for _ in range(len(level_of)):
            if not node:
                break
            finest.append(region_id)
            levels.append(int(level_of[node]))
            region_ids.append(node)
            node = parent_of[node]
        else:
            raise RegionTableError(f"region {region_id!r}: parent cycle (validate the table first)")
    out = pd.DataFrame({"finest_region_id": finest, "level": levels, "region_id": region_ids})
    out = out.astype({"finest_region_id": "str", "level": "int64", "region_id": "str"})
    return out.sort_values(["finest_region_id", "level"], ignore_index=True)
