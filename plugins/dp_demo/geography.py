"""Demoland's public region table: 1 country, 15 counties, 58 municipalities, with the
populations the generator draws its users from (private to the generator)."""

from __future__ import annotations

import base64
import hashlib
import math

import numpy as np
import pandas as pd

from dp_ops.errors import RegionTableError
from dp_ops.regions import REGION_COLUMNS, TEXT_COLUMNS

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
