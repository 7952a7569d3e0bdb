"""Synthetic private input for the reports, driven by a known ground-truth trajectory.

Real location logs are private, so the project generates them (SPEC section 3): the public
region table and symptom list under ``reference/``, one Parquet partition of stays per day
under ``raw/location_history/``, and the non-private truth under ``truth/`` for evaluation
only (nothing in the pipeline reads it).

Population model
----------------
``users`` users, fixed for a seed. Each has a home municipality (level-2 region, drawn by
``demo_population_weights``: the capital city holds ~38% of the population, five sparse
municipalities ~0.03% each), is employed with probability 0.6, and has a work region: the
capital city with probability 5% (35% for residents of the capital county), else with
probability 30% a municipality of the home county drawn by population (possibly home),
else home. On each day a user is active with probability 0.85; an inactive user leaves no
rows. An active user has

- one or two residential stays at home totalling ~12.8 h (times the residential factor,
  clipped so the day's stays sum to at most 23.5 h): typically 10-16 h;
- on most weekdays (if employed) a workplace stay in the work region, 1.25-12 h, but 7% of
  them are short drop-ins under one hour, which the ">1 h at workplaces" rule must ignore;
- visits to public places: for each of the 7 source categories a place is picked in the
  home region (85%), the work region (8%) or a municipality of the home county (7%), and
  visited with a category-specific probability times that region's factor (transit is
  used twice as much in the capital city, half as much in rural municipalities); at most
  3 (category, region) pairs are kept. On 2% of active user-days (1% at the trough) the
  user instead has an "errand day" touching 5-8 pairs across up to three regions, so the
  pipeline's 4-pair bound has something to drop.

Ground-truth trajectory
-----------------------
Every visit probability (and the workplace attendance probability, and residential hours)
is the base rate times a multiplicative factor per (category, region, date)::

    factor = weekday[category][weekday]
             * (1 - depth[category] * region_scale[region] * lockdown(date))
             * (1 + park_season(date)  if category == parks)

- ``weekday``: workplaces and transit high Monday-Friday, retail, recreation, eateries and
  parks higher at weekends, residential hours 5-7% higher at weekends (see ``_WEEKDAY``).
- ``lockdown(date)`` in [0, 1]: 0 until 2020-03-11, a ramp to the trough (1) on
  2020-04-05, held to 2020-04-20, then a slow partial recovery: 0.7 on 2020-06-01, 0.5
  (half the drop recovered) on 2020-09-01, 0.45 mid-October, a second wave back to 0.55 at
  the end of 2020, held after that.
- ``depth`` at the trough: transit 0.60, retail 0.45, recreation 0.60, eateries 0.55
  (retail_and_recreation about -50%), workplaces 0.45, groceries and pharmacies 0.20,
  parks 0.20, residential -0.15 (+15% hours).
- ``park_season``: a summer bump for parks, 0 before mid-April, +60% in mid-July, back to
  0 by mid-October, so parks end up above baseline in summer.
- ``region_scale``: the capital city 1.25, the rest of the capital county 1.1, county
  seats 1.0, rural municipalities 0.7, each times a per-region jitter in [0.95, 1.05].

The baseline window 2020-01-03..2020-02-06 has no trend: only the weekday pattern varies.
``trajectory`` returns these factors for evaluation.

Truth
-----
``truth/mobility_truth.parquet`` has one row per (date, region) for every region of the
table at all three levels: the SPEC section 4 metrics computed exactly, *without*
contribution bounding or noise, and their percent change against a true baseline (median
of the five same-weekday values in the baseline window; NaN when the generated range does
not cover the window).

Search activity
---------------
Not generated yet. It will be a ``_search_activity_day`` beside ``_location_history_day``,
writing ``root.raw_partition("search_activity", day)`` for the same population. Each day
and each source draws from its own random stream (``_stream``), so adding it will not
change a byte of the location history.

Determinism: the same seed, users, regions and day give byte-identical files, whatever
the rest of the generated range. The randomness is numpy's (this is synthetic data, not
privacy noise).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from importlib import resources
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.config import (
    ALL_STAY_CATEGORIES,
    PLACE_CATEGORIES,
    PUBLISHED_CATEGORIES,
    MobilityConfig,
)
from dp_ops.geography import (
    ancestors,
    demo_population_weights,
    demo_regions,
    read_regions,
    write_regions,
)
from dp_ops.paths import DataRoot

DEFAULT_USERS = 100_000
DEFAULT_SEED = 2020
LOCATION_SOURCE = "location_history"
TRUTH_FILE = "mobility_truth.parquet"
_TRUTH_BATCH_DAYS = 10

LOCATION_SCHEMA = pa.schema(
    [
        pa.field("user_id", pa.string()),
        pa.field("region_id", pa.string()),
        pa.field("place_id", pa.string()),
        pa.field("place_category", pa.string()),
        pa.field("dwell_hours", pa.float64()),
    ]
)

# Category positions in ALL_STAY_CATEGORIES; public place categories come first.
_CAT = {name: i for i, name in enumerate(ALL_STAY_CATEGORIES)}
_N_PLACE = len(PLACE_CATEGORIES)
_RESIDENTIAL = _CAT["residential"]
_WORKPLACE = _CAT["workplace"]

# -- ground truth ------------------------------------------------------------------------

_WEEKDAY: dict[str, tuple[float, ...]] = {  # Monday .. Sunday
    "retail": (1.0, 1.0, 1.0, 1.05, 1.15, 1.35, 1.1),
    "recreation": (0.9, 0.9, 0.95, 1.0, 1.15, 1.45, 1.3),
    "eateries": (0.95, 0.95, 1.0, 1.05, 1.25, 1.35, 1.1),
    "groceries": (1.0, 0.95, 0.95, 1.0, 1.1, 1.3, 0.75),
    "pharmacies": (1.05, 1.05, 1.05, 1.05, 1.05, 0.8, 0.5),
    "transit": (1.0, 1.0, 1.0, 1.0, 1.0, 0.7, 0.6),
    "parks": (1.0, 1.0, 1.0, 1.0, 1.05, 1.6, 1.8),
    "residential": (1.0, 1.0, 1.0, 1.0, 1.0, 1.05, 1.07),
    "workplace": (1.0, 1.0, 1.0, 1.0, 0.97, 0.12, 0.07),
}
_DEPTH: dict[str, float] = {
    "retail": 0.45, "recreation": 0.60, "eateries": 0.55, "groceries": 0.20,
    "pharmacies": 0.20, "transit": 0.60, "parks": 0.20, "residential": -0.15,
    "workplace": 0.45,
}
_LOCKDOWN_KNOTS: tuple[tuple[date, float], ...] = (
    (date(2020, 3, 11), 0.0), (date(2020, 4, 5), 1.0), (date(2020, 4, 20), 1.0),
    (date(2020, 6, 1), 0.7), (date(2020, 9, 1), 0.5), (date(2020, 10, 15), 0.45),
    (date(2020, 12, 31), 0.55),
)
# Day of year -> extra park visits (summer), the same every year.
_PARK_SEASON_KNOTS: tuple[tuple[int, float], ...] = (
    (105, 0.0), (152, 0.35), (196, 0.6), (244, 0.35), (288, 0.0),
)
_REGION_SCALE = {"capital": 1.25, "capital_county": 1.1, "seat": 1.0, "rural": 0.7}

# -- behaviour ---------------------------------------------------------------------------

_ACTIVE_P = 0.85
_EMPLOYED_P = 0.6
_ATTEND_P = 0.92  # weekday attendance of employed users, before the trajectory factor
_ERRAND_DAY_P = 0.02
_MAX_REGULAR_PAIRS = 3
_VISIT_P = np.array([0.20, 0.07, 0.17, 0.30, 0.06, 0.15, 0.10])  # PLACE_CATEGORIES order
_TRANSIT_USE = {"capital": 2.0, "capital_county": 1.3, "seat": 1.0, "rural": 0.5}
_VISIT_WHERE_P = (0.85, 0.08)  # home, work region; the rest a neighbouring municipality
_DWELL_MEDIAN_H = np.array([0.75, 1.75, 1.0, 0.4, 0.2, 0.35, 1.2])  # PLACE_CATEGORIES order
_PLACES_PER_CATEGORY = 25
_WORKPLACES_PER_REGION = 60


_GEOGRAPHY_STREAM = 0
_POPULATION_STREAM = 1
_LOCATION_STREAM = 2
_SEARCH_STREAM = 3  # reserved for search activity


def _stream(seed: int, *key: int) -> np.random.Generator:
    """An independent random stream per purpose (geography, population, source x day)."""
    return np.random.default_rng([seed, *key])


def _lockdown(days: list[date]) -> np.ndarray:
    x = np.array([d.toordinal() for d in days], dtype=float)
    kx = np.array([d.toordinal() for d, _ in _LOCKDOWN_KNOTS], dtype=float)
    ky = np.array([v for _, v in _LOCKDOWN_KNOTS])
    return np.interp(x, kx, ky, left=0.0, right=ky[-1])


def _park_season(days: list[date]) -> np.ndarray:
    x = np.array([d.timetuple().tm_yday for d in days], dtype=float)
    kx, ky = zip(*_PARK_SEASON_KNOTS, strict=True)
    return np.interp(x, np.array(kx, dtype=float), np.array(ky), left=0.0, right=0.0)


def _factors(days: list[date], region_scale: np.ndarray) -> np.ndarray:
    """Multiplicative factors, shape (days, regions, ALL_STAY_CATEGORIES)."""
    lockdown = _lockdown(days)[:, None]
    season = _park_season(days)
    weekday = [d.weekday() for d in days]
    out = np.empty((len(days), len(region_scale), len(ALL_STAY_CATEGORIES)))
    for name, c in _CAT.items():
        drop = np.minimum(_DEPTH[name] * region_scale[None, :], 0.95) * lockdown
        out[:, :, c] = np.array(_WEEKDAY[name])[weekday][:, None] * (1.0 - drop)
        if name == "parks":
            out[:, :, c] *= (1.0 + season)[:, None]
    return out


# -- geography and population --------------------------------------------------------------

@dataclass(frozen=True)
class _Geography:
    """Level-2 regions grouped by county, with what the behaviour model needs."""

    region_ids: np.ndarray  # str, sorted by (county, region)
    county: np.ndarray  # county index per region
    kind: np.ndarray  # capital | capital_county | seat | rural
    scale: np.ndarray  # trajectory depth scale per region
    national_cum: np.ndarray  # cumulative population weights
    county_cum: np.ndarray  # county index + cumulative weight within the county
    capital: int

    @property
    def n(self) -> int:
        return len(self.region_ids)

    def draw_national(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.searchsorted(self.national_cum, rng.random(size), side="right")

    def draw_in_county(self, rng: np.random.Generator, region: np.ndarray) -> np.ndarray:
        """A municipality of the same county as ``region``, by population (may be itself)."""
        x = self.county[region] + rng.random(len(region))
        return np.searchsorted(self.county_cum, x, side="right")


def _geography(regions: pd.DataFrame, rng: np.random.Generator) -> _Geography:
    finest = regions.loc[regions["level"] == 2, ["region_id", "parent_id"]]
    finest = finest.sort_values(["parent_id", "region_id"], ignore_index=True)
    weights = demo_population_weights(regions).reindex(finest["region_id"]).to_numpy()
    county = pd.factorize(finest["parent_id"])[0]
    capital = int(np.argmax(weights))
    kind = np.full(len(finest), "rural", dtype=object)
    seats = pd.Series(weights).groupby(county).idxmax().to_numpy()
    kind[seats] = "seat"
    kind[county == county[capital]] = "capital_county"
    kind[capital] = "capital"
    scale = np.array([_REGION_SCALE[k] for k in kind]) * rng.uniform(0.95, 1.05, len(kind))
    by_county = pd.Series(weights).groupby(county)
    within = by_county.transform(lambda w: w.cumsum() / w.sum()).to_numpy(copy=True)
    last = np.r_[county[1:] != county[:-1], True]
    within[last] = 1.0  # exact ends so that a draw never leaves its county
    national = np.cumsum(weights) / weights.sum()
    national[-1] = 1.0
    return _Geography(
        region_ids=finest["region_id"].to_numpy(dtype=object),
        county=county, kind=kind, scale=scale, national_cum=national,
        county_cum=county + within, capital=capital,
    )


@dataclass(frozen=True)
class _Population:
    user_ids: pa.Array
    home: np.ndarray
    work: np.ndarray
    employed: np.ndarray
    # Row positions in the day's place table of each user's home and workplace.
    home_place: np.ndarray
    work_place: np.ndarray
    places: pa.Array  # every place id a stay can use


def _user_ids(rng: np.random.Generator, users: int) -> list[str]:
    """Opaque ids "u" + 12 hex characters, unique."""
    ids = np.unique(rng.integers(0, 2**48, size=users * 2))
    ids = rng.permutation(ids)[:users]
    if len(ids) < users:  # 2**48 makes this practically unreachable
        raise RuntimeError("user id space exhausted")
    return [f"u{v:012x}" for v in ids]


def _population(geo: _Geography, users: int, rng: np.random.Generator) -> _Population:
    home = geo.draw_national(rng, users)
    employed = rng.random(users) < _EMPLOYED_P
    u = rng.random(users)
    to_capital = np.where(geo.county[home] == geo.county[geo.capital], 0.35, 0.05)
    work = np.where(u < to_capital, geo.capital,
                    np.where(u < to_capital + 0.3, geo.draw_in_county(rng, home), home))
    user_ids = _user_ids(rng, users)
    public = [
        f"p-{r}-{cat}-{j:03d}"
        for r in geo.region_ids for cat in PLACE_CATEGORIES for j in range(_PLACES_PER_CATEGORY)
    ]
    household = rng.integers(0, 100_000, size=users)
    office = rng.integers(0, _WORKPLACES_PER_REGION, size=users)
    homes = [f"p-{geo.region_ids[r]}-home-{h:05d}" for r, h in zip(home, household, strict=True)]
    offices = [f"p-{geo.region_ids[r]}-work-{o:03d}" for r, o in zip(work, office, strict=True)]
    offset = len(public)
    return _Population(
        user_ids=pa.array(user_ids, type=pa.string()),
        home=home, work=work, employed=employed,
        home_place=offset + np.arange(users),
        work_place=offset + users + np.arange(users),
        places=pa.array(public + homes + offices, type=pa.string()),
    )


# -- one day of location history -------------------------------------------------------------

@dataclass
class _Stays:
    """Columns of a day's stays as integer codes (user, region, place, category) + hours."""

    user: np.ndarray
    region: np.ndarray
    place: np.ndarray
    category: np.ndarray
    hours: np.ndarray

    @staticmethod
    def concat(parts: list[_Stays]) -> _Stays:
        return _Stays(*(np.concatenate([getattr(p, f) for p in parts])
                        for f in ("user", "region", "place", "category", "hours")))


def _separate_identical_stays(stays: _Stays) -> np.ndarray:
    """Hours with the k-th identical copy of a stay made k minutes shorter.

    Two stays of one user at one place with the same dwell would be identical rows, which
    ingestion rejects as duplicates; real logs would record them as one longer stay or
    with distinct durations, so the demo data does the latter.
    """
    minutes = np.rint(stays.hours * 60).astype(np.int64)
    order = np.lexsort((minutes, stays.category, stays.place, stays.region, stays.user))
    keys = np.stack([stays.user, stays.region, stays.place, stays.category, minutes])[:, order]
    same = np.r_[False, (keys[:, 1:] == keys[:, :-1]).all(axis=0)]
    # copy index within each run of identical rows: 0 for the first, 1, 2, ... after
    run_start = np.maximum.accumulate(np.where(~same, np.arange(len(same)), 0))
    copy = np.arange(len(same)) - run_start
    adjusted = minutes.copy()
    adjusted[order] = np.maximum(minutes[order] - copy, 1) if len(order) else minutes
    return adjusted / 60.0


def _minutes(hours: np.ndarray) -> np.ndarray:
    """Dwell on whole minutes, at least one (logs record minutes)."""
    return np.maximum(np.rint(hours * 60.0), 1.0) / 60.0


def _public_place(rng: np.random.Generator, region: np.ndarray, category: np.ndarray) -> np.ndarray:
    j = rng.integers(0, _PLACES_PER_CATEGORY, size=len(region))
    return (region * _N_PLACE + category) * _PLACES_PER_CATEGORY + j


def _visit_dwell(rng: np.random.Generator, category: np.ndarray) -> np.ndarray:
    return _minutes(np.clip(_DWELL_MEDIAN_H[category] * rng.lognormal(0.0, 0.55, len(category)),
                            0.05, 8.0))


def _regular_visits(rng: np.random.Generator, geo: _Geography, pop: _Population,
                    users: np.ndarray, factors: np.ndarray) -> _Stays:
    """Public-place visits of ordinary user-days: at most 3 (category, region) pairs."""
    n = len(users)
    home, work = pop.home[users], pop.work[users]
    where = rng.random((n, _N_PLACE))
    neighbour = geo.draw_in_county(rng, home)[:, None]
    region = np.where(where < _VISIT_WHERE_P[0], home[:, None],
                      np.where(where < sum(_VISIT_WHERE_P), work[:, None], neighbour))
    transit_use = np.array([_TRANSIT_USE[k] for k in geo.kind])[home]
    base = np.broadcast_to(_VISIT_P, (n, _N_PLACE)).copy()
    base[:, _CAT["transit"]] *= transit_use
    p = np.clip(base * factors[region, np.arange(_N_PLACE)[None, :]], 0.0, 1.0)
    visit = rng.random((n, _N_PLACE)) < p
    # Keep a random 3 of the visited categories when a user drew more.
    priority = np.where(visit, rng.random((n, _N_PLACE)), np.inf)
    rank = np.argsort(np.argsort(priority, axis=1), axis=1)
    visit &= rank < _MAX_REGULAR_PAIRS
    rows, cats = np.nonzero(visit)
    regs = region[rows, cats]
    return _Stays(users[rows], regs, _public_place(rng, regs, cats), cats,
                  _visit_dwell(rng, cats))


def _errand_visits(rng: np.random.Generator, geo: _Geography, pop: _Population,
                   users: np.ndarray) -> _Stays:
    """Errand days: 5-8 distinct (category, region) pairs over home, a trip destination
    elsewhere in the country and a neighbouring municipality."""
    n = len(users)
    home = pop.home[users]
    trip = geo.draw_national(rng, n)
    for _ in range(8):  # redraw destinations that fell on home
        same = trip == home
        if not same.any():
            break
        trip[same] = geo.draw_national(rng, int(same.sum()))
    candidates = np.stack([home, trip, geo.draw_in_county(rng, home)], axis=1)  # (n, 3)
    n_pairs = 3 * _N_PLACE
    priority = rng.random((n, n_pairs))
    k = rng.integers(5, 9, size=n)
    chosen = np.argsort(np.argsort(priority, axis=1), axis=1) < k[:, None]
    rows, pair = np.nonzero(chosen)
    cats = pair % _N_PLACE
    regs = candidates[rows, pair // _N_PLACE]
    hours = _minutes(np.clip(rng.uniform(0.2, 1.2, len(rows)) * _DWELL_MEDIAN_H[cats] * 1.5,
                             0.05, 3.0))
    return _Stays(users[rows], regs, _public_place(rng, regs, cats), cats, hours)


def _workplace_stays(rng: np.random.Generator, pop: _Population, users: np.ndarray,
                     factors: np.ndarray) -> _Stays:
    work = pop.work[users]
    attend = pop.employed[users] & (rng.random(len(users)) < _ATTEND_P * factors[work, _WORKPLACE])
    users, work = users[attend], work[attend]
    full_day = np.clip(rng.normal(8.0, 1.3, len(users)), 1.25, 12.0)
    drop_in = rng.uniform(0.25, 0.95, len(users))
    hours = _minutes(np.where(rng.random(len(users)) < 0.07, drop_in, full_day))
    return _Stays(users, work, pop.work_place[users], np.full(len(users), _WORKPLACE), hours)


def _residential_stays(rng: np.random.Generator, pop: _Population, users: np.ndarray,
                       factors: np.ndarray, hours_away: np.ndarray) -> _Stays:
    """Home hours of every active user, split in two stays for some."""
    home = pop.home[users]
    wanted = rng.normal(12.8, 1.6, len(users)) * factors[home, _RESIDENTIAL]
    total = np.rint(60.0 * np.clip(wanted, 0.5, np.maximum(0.5, 23.5 - hours_away)))
    first = np.clip(np.rint(total * rng.uniform(0.3, 0.7, len(users))), 1.0, total - 1.0)
    split = (rng.random(len(users)) < 0.4) & (total >= 3.0)
    # two equal halves would be two identical rows, which ingestion rejects as duplicates
    first = np.where(split & (2.0 * first == total), first - 1.0, first)
    first = np.where(split, first, total)
    users2 = np.concatenate([users, users[split]])
    minutes = np.concatenate([first, total[split] - first[split]])
    return _Stays(users2, pop.home[users2], pop.home_place[users2],
                  np.full(len(users2), _RESIDENTIAL), minutes / 60.0)


def _location_history_day(geo: _Geography, pop: _Population, day: date, seed: int,
                          factors: np.ndarray) -> pa.Table:
    """All stays of one day, ``factors`` of shape (regions, ALL_STAY_CATEGORIES)."""
    rng = _stream(seed, _LOCATION_STREAM, day.toordinal())
    n_users = len(pop.home)
    active = np.flatnonzero(rng.random(n_users) < _ACTIVE_P)
    lockdown = float(_lockdown([day])[0])
    errand = rng.random(len(active)) < _ERRAND_DAY_P * (1.0 - 0.5 * lockdown)
    visits = _Stays.concat([
        _regular_visits(rng, geo, pop, active[~errand], factors),
        _errand_visits(rng, geo, pop, active[errand]),
        _workplace_stays(rng, pop, active, factors),
    ])
    # Shrink the rare long days away (errands after a long shift) to leave time at home.
    away = np.bincount(visits.user, weights=visits.hours, minlength=n_users)
    shrink = np.minimum(1.0, 23.0 / np.maximum(away, 1.0))
    visits.hours = _minutes(visits.hours * shrink[visits.user])
    away = np.bincount(visits.user, weights=visits.hours, minlength=n_users)[active]
    stays = _Stays.concat([visits, _residential_stays(rng, pop, active, factors, away)])
    stays.hours = _separate_identical_stays(stays)
    order = np.lexsort((stays.region, stays.category, stays.user))
    region_ids = pa.array(geo.region_ids, type=pa.string())
    categories = pa.array(ALL_STAY_CATEGORIES, type=pa.string())
    return pa.Table.from_arrays(
        [
            pop.user_ids.take(pa.array(stays.user[order])),
            region_ids.take(pa.array(stays.region[order])),
            pop.places.take(pa.array(stays.place[order])),
            categories.take(pa.array(stays.category[order])),
            pa.array(stays.hours[order], type=pa.float64()),
        ],
        schema=LOCATION_SCHEMA,
    )


# -- files -----------------------------------------------------------------------------------

def _write_atomically(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")  # a third smaller than snappy, as fast
    os.replace(tmp, path)


def default_symptoms_path() -> Path:
    """The 422 symptom names shipped with the package (SPEC section 3)."""
    return Path(str(resources.files("dp_ops").joinpath("data", "symptoms.txt")))


def default_symptoms() -> list[str]:
    return default_symptoms_path().read_text(encoding="utf-8").splitlines()


def _write_reference(root: DataRoot, regions: pd.DataFrame) -> pd.DataFrame:
    """Write the public reference files; return the region table as read back (validated)."""
    write_regions(regions, root.regions_csv)
    root.symptoms_txt.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(default_symptoms_path(), root.symptoms_txt)
    return read_regions(root.regions_csv)


# -- truth -----------------------------------------------------------------------------------

def _truth_sql() -> str:
    """True daily metrics per date, region and level for a batch of partitions (no
    bounding, no noise); every (date, region) of the batch gets a row, zeros included.

    One pass: each user's stays are rolled up to every level through ``ancestors`` and
    grouped per (level, region, user), which counts each user once per region. Hours are
    summed on the pipeline's integer grid (minutes; the generator writes whole minutes),
    so the result does not depend on the order DuckDB's threads add floats in and the
    file is byte-identical run to run. Category names come from the fixed config
    constants, never from input values.
    """
    visited = ",\n".join(
        f"bool_or(s.place_category = '{c}') AS visited_{c}" for c in PLACE_CATEGORIES
    )
    place_metrics = ",\n".join(
        " + ".join(f"count(*) FILTER (WHERE visited_{c})" for c in sources) + f" AS {name}"
        for name, sources in PUBLISHED_CATEGORIES.items()
        if set(sources) <= set(PLACE_CATEGORIES)
    )
    return f"""
    WITH per_user AS (
        SELECT s.date, a.level, a.region_id, s.user_id,
               sum(round(s.dwell_hours * $grid)::BIGINT)
                   FILTER (WHERE s.place_category = 'workplace') AS work_ticks,
               sum(round(s.dwell_hours * $grid)::BIGINT)
                   FILTER (WHERE s.place_category = 'residential') AS home_ticks,
               {visited}
        FROM read_parquet($paths, hive_partitioning = true, hive_types = {{'date': DATE}}) AS s
        JOIN ancestors AS a ON a.finest_region_id = s.region_id
        GROUP BY ALL
    ),
    metrics AS (
        SELECT date, level, region_id,
               {place_metrics},
               count(*) FILTER (WHERE work_ticks > $min_work_hours * $grid) AS workplaces,
               -- DuckDB's least() skips NULLs (least(NULL, 24) is 24): keep visitors out.
               avg(least(home_ticks, 24 * $grid)) FILTER (WHERE home_ticks IS NOT NULL)
                   / $grid AS residential,
               count(*) AS contributors
        FROM per_user
        GROUP BY ALL
    )
    SELECT d.date, r.region_id, r.level,
           {", ".join(f"coalesce(m.{n}, 0) AS {n}" for n in _place_metric_names())},
           coalesce(m.workplaces, 0) AS workplaces,
           m.residential,
           coalesce(m.contributors, 0) AS contributors
    FROM (SELECT unnest($days::DATE[]) AS date) AS d
    CROSS JOIN regions AS r
    LEFT JOIN metrics AS m USING (date, level, region_id)
    ORDER BY d.date, r.level, r.region_id
    """


def _place_metric_names() -> list[str]:
    return [n for n, s in PUBLISHED_CATEGORIES.items() if set(s) <= set(PLACE_CATEGORIES)]


def _true_metrics(con: duckdb.DuckDBPyConnection, written: dict[date, Path]) -> pd.DataFrame:
    """Truth for the partitions in ``written``, read back from the Parquet files."""
    cfg = MobilityConfig()
    params = {"paths": [str(p) for p in written.values()], "days": list(written),
              "grid": cfg.residential_grid_per_hour, "min_work_hours": cfg.workplace_min_hours}
    df = con.execute(_truth_sql(), params).df()
    df["date"] = list(df["date"].dt.date)
    return df


def _with_percent_change(truth: pd.DataFrame, window: list[date]) -> pd.DataFrame:
    """Percent change of each metric against the true baseline: the median of the five
    same-weekday values in the window, per region (NaN if the window is not covered)."""
    covered = set(window) <= set(truth["date"])
    weekday = pd.to_datetime(truth["date"]).dt.day_of_week
    in_window = truth["date"].isin(window)
    out = truth.copy()
    for metric in PUBLISHED_CATEGORIES:
        if covered:
            base = (truth.loc[in_window, metric].groupby(
                [truth.loc[in_window, "region_id"], weekday[in_window]]).median())
            keys = pd.MultiIndex.from_arrays([truth["region_id"], weekday])
            baseline = base.reindex(keys).to_numpy(dtype=float)
            with np.errstate(divide="ignore", invalid="ignore"):
                change = 100.0 * (truth[metric].to_numpy(dtype=float) / baseline - 1.0)
            change[~np.isfinite(change)] = np.nan
        else:
            change = np.full(len(truth), np.nan)
        out[f"{metric}_percent_change"] = change
    return out


def _truth_schema() -> pa.Schema:
    counts = [pa.field(n, pa.int64()) for n in _place_metric_names()]
    return pa.schema(
        [pa.field("date", pa.date32()), pa.field("region_id", pa.string()),
         pa.field("level", pa.int64()), *counts, pa.field("workplaces", pa.int64()),
         pa.field("residential", pa.float64()), pa.field("contributors", pa.int64())]
        + [pa.field(f"{m}_percent_change", pa.float64()) for m in PUBLISHED_CATEGORIES]
    )


_TRUTH_README = """\
# Ground truth (NOT private, NOT for release)

Exact, un-noised and unbounded metrics of the synthetic population, written by
`dp_ops.generator` for evaluating the pipeline. Nothing in the pipeline reads this
directory; never publish or log its contents.
"""


# -- entry point -------------------------------------------------------------------------------

@dataclass(frozen=True)
class GenerateSummary:
    """What ``generate`` wrote; counts and paths only, safe to log."""

    start: date
    end: date
    days: int
    users: int
    rows: int
    regions: int
    paths: tuple[str, ...]

    def describe(self) -> str:
        return (f"generated {self.days} days ({self.start}..{self.end}) of location history "
                f"for {self.users} users in {self.regions} regions: {self.rows} stays; "
                f"wrote {', '.join(self.paths)}")


def _days(start: date, end: date) -> list[date]:
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def generate(
    root: DataRoot,
    start: date,
    end: date,
    users: int = DEFAULT_USERS,
    seed: int = DEFAULT_SEED,
    regions: pd.DataFrame | None = None,
    progress: Callable[[str], None] | None = None,
) -> GenerateSummary:
    """Write the reference files, one location-history partition per day in
    [start, end] and the truth for those days (see the module docstring).

    With the default 100,000 users (seed 2020) a day has ~40,000 users in the capital city,
    1,200-5,900 in each other municipality of the capital county, 180-1,000 in typical
    municipalities (median ~430; the second city ~7,400) and 27-43 in the sparse ones.
    """
    if end < start:
        raise ValueError(f"generate: end={end} is before start={start}")
    if users < 1:
        raise ValueError(f"generate: users={users!r} must be >= 1")
    report = progress or (lambda _msg: None)
    table = _write_reference(root, demo_regions() if regions is None else regions)
    geo = _geography(table, _stream(seed, _GEOGRAPHY_STREAM))
    pop = _population(geo, users, _stream(seed, _POPULATION_STREAM))
    days = _days(start, end)
    rows = 0
    truth: list[pd.DataFrame] = []
    batch: dict[date, Path] = {}
    with duckdb.connect() as con:
        con.execute("SET enable_progress_bar = false")  # stdout belongs to the caller
        con.register("ancestors", pa.Table.from_pandas(ancestors(table), preserve_index=False))
        con.register("regions", pa.Table.from_pandas(table[["region_id", "level"]],
                                                     preserve_index=False))
        for i, day in enumerate(days):
            factors = _factors([day], geo.scale)[0]
            stays = _location_history_day(geo, pop, day, seed, factors)
            path = root.raw_partition(LOCATION_SOURCE, day) / "part-0.parquet"
            _write_atomically(stays, path)
            rows += stays.num_rows
            batch[day] = path
            # Truth in batches of ~10 days: one query each keeps DuckDB's per-query cost
            # low and the memory bounded.
            if len(batch) == _TRUTH_BATCH_DAYS or i == len(days) - 1:
                truth.append(_true_metrics(con, batch))
                batch = {}
                report(f"location history: {i + 1}/{len(days)} days written (up to {day})")
    truth_path = _write_truth(root, pd.concat(truth, ignore_index=True))
    return GenerateSummary(
        start=start, end=end, days=len(days), users=users, rows=rows, regions=len(table),
        paths=(str(root.regions_csv), str(root.symptoms_txt),
               str(root.root / "raw" / LOCATION_SOURCE), str(truth_path)),
    )


def _write_truth(root: DataRoot, truth: pd.DataFrame) -> Path:
    truth = _with_percent_change(truth, MobilityConfig().baseline_dates)
    schema = _truth_schema()
    path = root.truth_dir / TRUTH_FILE
    _write_atomically(pa.Table.from_pandas(truth[schema.names], schema=schema,
                                           preserve_index=False), path)
    (root.truth_dir / "README.md").write_text(_TRUTH_README, encoding="utf-8")
    return path


def trajectory(
    regions: pd.DataFrame, start: date, end: date, seed: int = DEFAULT_SEED
) -> pd.DataFrame:
    """The ground-truth factors (date, region_id, category, factor) of the level-2 regions:
    what the generator multiplies its base rates by. For evaluation and tests."""
    geo = _geography(regions, _stream(seed, _GEOGRAPHY_STREAM))
    days = _days(start, end)
    cube = _factors(days, geo.scale)
    d, r, c = np.meshgrid(np.arange(len(days)), np.arange(geo.n), np.arange(len(_CAT)),
                          indexing="ij")
    return pd.DataFrame({
        "date": np.array(days, dtype=object)[d.ravel()],
        "region_id": geo.region_ids[r.ravel()].astype(str),
        "category": np.array(ALL_STAY_CATEGORIES, dtype=object)[c.ravel()].astype(str),
        "factor": cube.ravel(),
    })
