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

import base64
import hashlib
import math
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

DEMO_COUNTRY_CODE = "DM"
DEMO_COUNTRY_NAME = "Demoland"

# (county, [(municipality, residents in thousands, area in km^2), ...]); the first
# municipality of each county is its seat. Populations are private to the generator.
_DEMO_COUNTIES: tuple[tuple[str, tuple[tuple[str, float, float], ...]], ...] = (
    ("Harrow County", (
        ("Demopolis", 440.0, 159.0), ("Northgate", 62.0, 48.0), ("Eastmarsh", 46.0, 120.0),
        ("Saltwick", 38.0, 210.0), ("Linden", 31.0, 95.0), ("Brackley", 26.0, 260.0),
        ("Harrow Rural", 22.0, 480.0), ("Moss Bay", 18.0, 140.0), ("Kettlewood", 15.0, 330.0),
        ("Fennick", 12.0, 410.0),
    )),
    ("Tarn County", (
        ("Tarnby", 95.0, 39.0), ("Tarn Valley", 14.0, 600.0), ("Orsholm", 9.0, 420.0),
        ("Wickmere", 6.0, 390.0), ("Ashby Fen", 4.0, 510.0),
    )),
    ("Vell County", (
        ("Vellbridge", 40.0, 60.0), ("Kessel Spa", 7.0, 1.8), ("Upper Vell", 8.0, 700.0),
        ("Lowmoor", 5.0, 640.0), ("Greystone", 3.0, 520.0), ("Pike Hollow", 0.35, 600.0),
    )),
    ("Orrin County", (
        ("Orrinhaven", 22.0, 40.0), ("Orrin Coast", 6.0, 800.0), ("Blackfen", 4.0, 700.0),
        ("Rushmere", 3.0, 650.0),
    )),
    ("Lake Ilse County", (
        ("Ilsemouth", 18.0, 35.0), ("Ilse Shore", 5.0, 900.0), ("Reedholm", 3.0, 800.0),
    )),
    ("Hollin County", (("Hollinford", 15.0, 45.0), ("Hollin Heath", 4.0, 1100.0))),
    ("Skerry County", (("Skerry", 9.0, 1000.0),)),
    ("Marrow County", (
        ("Marrowby", 20.0, 50.0), ("Westling", 5.0, 700.0), ("Cold Ashton", 3.0, 650.0),
        ("Thornmire", 0.35, 800.0),
    )),
    ("Brenna County", (
        ("Brenna", 30.0, 55.0), ("Brenna Hills", 6.0, 750.0), ("Oakhurst", 4.0, 690.0),
        ("Little Dunmore", 2.5, 560.0), ("Stillwater", 0.35, 900.0),
    )),
    ("Corrie County", (
        ("Corriestown", 14.0, 30.0), ("Far Corrie", 4.0, 980.0), ("Glenrowan", 3.0, 870.0),
    )),
    ("Isla County", (("Port Isla", 3.0, 200.0), ("Isla North", 0.35, 1500.0))),
    ("Danby County", (
        ("Danbury", 16.0, 40.0), ("Danby Moor", 4.0, 820.0), ("Ferncliff", 3.0, 700.0),
        ("Hobb's End", 2.0, 600.0),
    )),
    ("Wren County", (
        ("Wrenford", 12.0, 35.0), ("Wren Forest", 3.0, 1400.0), ("Ollerby", 2.0, 900.0),
    )),
    ("Carrow County", (
        ("Carrowmore", 13.0, 42.0), ("Carrow Plain", 4.0, 750.0), ("Stenning", 3.0, 690.0),
        ("Gull Point", 0.35, 300.0),
    )),
    ("Fal County", (("Falbridge", 10.0, 38.0), ("Fal Uplands", 3.0, 1300.0))),
)

CAPITAL_REGION_ID = "DM-01-001"
SMALL_TOWN_ID = "DM-03-002"
SPARSE_REGION_IDS: frozenset[str] = frozenset(
    {"DM-03-006", "DM-08-004", "DM-09-005", "DM-11-002", "DM-14-004"}
)


def fake_place_id(region_id: str) -> str:
    """A Google-like place id ("ChIJ" + 23 url-safe characters), stable per region_id."""
    digest = hashlib.sha256(f"demo-place:{region_id}".encode()).digest()
    return "ChIJ" + base64.urlsafe_b64encode(digest).decode("ascii")[:23]


def _row(region_id: str, parent_id: str, level: int, area: float, **text: str) -> dict[str, object]:
    row: dict[str, object] = {c: "" for c in TEXT_COLUMNS}
    row.update(
        region_id=region_id,
        parent_id=parent_id,
        level=level,
        country_region_code=DEMO_COUNTRY_CODE,
        country_region=DEMO_COUNTRY_NAME,
        place_id=fake_place_id(region_id),
        area_km2=area,
    )
    row.update(text)
    return row


def demo_regions(seed: int = 7) -> pd.DataFrame:
    """The public region table of Demoland, columns in ``REGION_COLUMNS`` order (docs/design.md,
    Input contract).

    Names and ids are fixed; ``seed`` only jitters municipal areas by up to +-10% (the small
    town stays under 3 km^2). Parent areas are the sums of their children's.
    """
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    country_area = 0.0
    for c, (county, municipalities) in enumerate(_DEMO_COUNTIES, start=1):
        county_id = f"{DEMO_COUNTRY_CODE}-{c:02d}"
        areas = [round(a * rng.uniform(0.9, 1.1), 1) for _, _, a in municipalities]
        county_area = round(math.fsum(areas), 1)
        country_area += county_area
        rows.append(_row(county_id, DEMO_COUNTRY_CODE, 1, county_area, sub_region_1=county,
                         iso_3166_2_code=county_id, sub_region_1_code=county_id,
                         open_covid_region_code=county_id))
        for m, ((name, _, _), area) in enumerate(zip(municipalities, areas, strict=True), start=1):
            muni_id = f"{county_id}-{m:03d}"
            rows.append(_row(muni_id, county_id, 2, area, sub_region_1=county, sub_region_2=name,
                             sub_region_1_code=county_id, sub_region_2_code=muni_id,
                             open_covid_region_code=muni_id))
    country = _row(DEMO_COUNTRY_CODE, "", 0, round(country_area, 1),
                   open_covid_region_code=DEMO_COUNTRY_CODE)
    df = pd.DataFrame([country, *rows], columns=list(REGION_COLUMNS))
    return df.astype({"level": "int64", "area_km2": "float64"})


def demo_population_weights(regions: pd.DataFrame) -> pd.Series:
    """Share of the population living in each level-2 region, indexed by region_id.

    Demo municipalities get their fixed demo population; a level-2 region that is not in
    the demo table gets the median demo population, so the generator also runs on other
    tables. The shares sum to 1.
    """
    residents = {
        f"{DEMO_COUNTRY_CODE}-{c:02d}-{m:03d}": pop
        for c, (_, municipalities) in enumerate(_DEMO_COUNTIES, start=1)
        for m, (_, pop, _) in enumerate(municipalities, start=1)
    }
    median = float(np.median(list(residents.values())))
    ids = regions.loc[regions["level"] == 2, "region_id"].astype(str)
    weights = pd.Series([residents.get(r, median) for r in ids],
                        index=pd.Index(ids, name="region_id"), name="population_weight",
                        dtype="float64")
    if weights.empty:
        raise RegionTableError("region table has no level-2 regions to populate")
    return weights / weights.sum()


# -- CSV I/O ---------------------------------------------------------------------------

def write_regions(df: pd.DataFrame, path: str | Path) -> None:
    """Write the region table as UTF-8 CSV with a header and no index."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.loc[:, list(REGION_COLUMNS)].to_csv(path, index=False, encoding="utf-8", lineterminator="\n")


def read_regions(path: str | Path) -> pd.DataFrame:
    """Read and validate a region table; raise ``RegionTableError`` naming file and problem.

    Text columns come back as ``str`` with empty strings (never NaN), ``level`` as int64,
    ``area_km2`` as float64, columns in ``REGION_COLUMNS`` order.
    """
    path = Path(path)
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
