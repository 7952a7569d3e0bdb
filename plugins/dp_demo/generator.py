"""Synthetic private input for the reports, driven by a known ground-truth trajectory.

Real location and search logs are private, so the project generates them (docs/design.md,
Input contract):
the public region table and symptom list under ``reference/``, one Parquet partition of
stays per day under ``raw/location_history/`` and one of searches under
``raw/search_activity/``, and the non-private truth under ``truth/`` for evaluation only
(nothing in the pipeline reads it).

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

Search activity
---------------
The same users, each day drawn from its own stream (``_SEARCH_STREAM``), so the location
history does not depend on it. One row per search (``SEARCH_SCHEMA``), in the user's home
municipality; on 2% of searching user-days one row and about half of the others are in
another municipality of the home county instead (when the county has another).

- A user searches anything with probability 0.55 (x1.03 Monday-Friday, x0.93 at
  weekends) and then writes 1-3 rows with a null symptom (searches matching no symptom).
- A searching user also searches symptoms with probability 0.2 x the day's mean symptom
  factor (popularity-weighted), so the number of symptom searchers follows the
  trajectory. Distinct symptoms: 1 + min(Poisson(0.25), 2) for 92% of them and
  4 + Poisson(1.65) (at most 12) for 8%, 1.6 on average, so the pipeline's k = 3 bound
  has something to drop. The symptoms are drawn by weight without replacement, weight =
  popularity x factor; 20% of them are searched a second time (an identical row, which
  ingestion keeps).
- Popularity is Zipf-like, rank ** -0.92 over a fixed permutation of the 422 names, with
  the common respiratory and allergy names pinned near the top (Cough, Fever, Headache,
  Sore throat, Common cold, Nasal congestion, Allergy, Fatigue, ...) and Shortness of
  breath (rank 150), Anosmia (260) and Ageusia (300) rare: ~35 names hold 60% of the
  symptom searches of January-March 2020.

Measured at the default 100,000 users (seed 2020, 2020-01-01..03-31): 51,000-57,000
searching users a day (51,000 at weekends); 9,900-13,700 of them search symptoms until
mid-March, ~16,700 at the end of March; 120,000-146,000 rows a day, of which
18,700-32,700 name a symptom. 8% of symptom-searching user-days have more than 3
distinct symptoms.

The symptom trajectory is one factor per (symptom, date), the same in every region::

    factor = weekday(date) * season[group](day of year) * (1 + (peak - 1) * wave(date))

- ``weekday``: searches for symptoms 6% above average on Mondays, 7% below on Saturdays.
- ``season``: winter respiratory names (``_WINTER_SYMPTOMS``: cough, fever, sore throat,
  common cold, chills, nasal congestion, myalgia, fatigue, ...) x1.4 on 1 January, 1.15
  at the start of March, 0.85 in summer, rising again from October; allergy names
  (``_ALLERGY_SYMPTOMS``: Allergy, Hay fever, Allergic conjunctivitis, Rhinitis, ...) 0.8-0.9
  until March, then rising to x2 in mid-May and back by October.
- ``wave(date)``: a COVID-like rise, 0 until 2020-03-05, 1 from 2020-03-25 to 04-05, then
  decaying (0.35 on 05-10, 0.15 in summer, a second wave to 0.4 in November). ``peak``
  (``_COVID_PEAK``): Fever 3, Cough 2.5, Shortness of breath 4, Anosmia and Ageusia 20,
  smaller rises for chills, myalgia, fatigue, sore throat, pneumonia and a few more.

``symptom_trajectory`` returns these factors for evaluation. The expected number of users
searching a symptom is proportional to popularity x factor (up to the saturation of drawing
distinct symptoms, which matters only for the most common names).

Truth
-----
``truth/mobility_truth.parquet`` has one row per (date, region) for every region of the
table at all three levels: the metrics of docs/design.md, Mobility report, computed
exactly, *without*
contribution bounding or noise, and their percent change against a true baseline (median
of the five same-weekday values in the baseline window; NaN when the generated range does
not cover the window).

``truth/symptoms_truth.parquet`` is long, with columns ``date, level, region_id, symptom,
users``, exact and unbounded (no k limit, no noise), computed from the written rows. A
user is in a region when one of their rows has a finest region inside it. For every
(date, region) of the table at all three levels a row with a null ``symptom`` and
``users`` = the distinct users with any search in the region (the true B, zero
included); for each symptom searched there that day a row with ``users`` = the distinct
users who searched it (the true A; zero cells are left out).

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
from typing import cast

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_demo.geography import demo_population_weights, demo_regions
from dp_ops.layout import DataRoot
from dp_ops.regions import ancestors, read_regions, write_regions
from dp_ops.reports.mobility.config import PUBLISHED_CATEGORIES, MobilityConfig
from dp_ops.sources.location_history import ALL_STAY_CATEGORIES, PLACE_CATEGORIES
from dp_ops.sources.location_history import NAME as LOCATION_SOURCE
from dp_ops.sources.search_activity import NAME as SEARCH_SOURCE
from dp_ops.sources.search_activity import symptom_list

DEFAULT_USERS = 100_000
DEFAULT_SEED = 2020
TRUTH_FILE = "mobility_truth.parquet"
SYMPTOMS_TRUTH_FILE = "symptoms_truth.parquet"
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
SEARCH_SCHEMA = pa.schema(
    [
        pa.field("user_id", pa.string()),
        pa.field("region_id", pa.string()),
        pa.field("symptom", pa.string()),  # null: a search that matches no symptom
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
_SEARCH_STREAM = 3


def _stream(seed: int, *key: int) -> np.random.Generator:
    """An independent random stream per purpose (geography, population, source x day)."""
    return np.random.default_rng([seed, *key])


def _lockdown(days: list[date]) -> np.ndarray:
    x = np.array([d.toordinal() for d in days], dtype=float)
    kx = np.array([d.toordinal() for d, _ in _LOCKDOWN_KNOTS], dtype=float)
    ky = np.array([v for _, v in _LOCKDOWN_KNOTS])
    return cast(np.ndarray, np.interp(x, kx, ky, left=0.0, right=ky[-1]))


def _park_season(days: list[date]) -> np.ndarray:
    x = np.array([d.timetuple().tm_yday for d in days], dtype=float)
    kx, ky = zip(*_PARK_SEASON_KNOTS, strict=True)
    return cast(np.ndarray,
                np.interp(x, np.array(kx, dtype=float), np.array(ky), left=0.0, right=0.0))


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
        return cast(np.ndarray, np.searchsorted(self.county_cum, x, side="right"))


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
    columns = [stays.user, stays.region, stays.place, stays.category, minutes]
    packed = _packed(columns)
    if packed is not None:  # one stable sort of one key: the order lexsort gives
        order = np.argsort(packed, kind="stable")
        ordered = packed[order]
        same = np.r_[False, ordered[1:] == ordered[:-1]]
    else:
        order = np.lexsort(columns[::-1])
        keys = np.stack(columns)[:, order]
        same = np.r_[False, (keys[:, 1:] == keys[:, :-1]).all(axis=0)]
    # copy index within each run of identical rows: 0 for the first, 1, 2, ... after
    run_start = np.maximum.accumulate(np.where(~same, np.arange(len(same)), 0))
    copy = np.arange(len(same)) - run_start
    adjusted = minutes.copy()
    adjusted[order] = np.maximum(minutes[order] - copy, 1) if len(order) else minutes
    return cast(np.ndarray, adjusted / 60.0)


def _packed(columns: list[np.ndarray]) -> np.ndarray | None:
    """The non-negative integer ``columns`` packed into one int64 per row, the first in the
    highest bits (so it sorts as the tuples do), or None when they do not fit in 63 bits."""
    if not len(columns[0]) or any(c.min() < 0 for c in columns):
        return None
    widths = [int(c.max()).bit_length() for c in columns]
    if sum(widths) > 63:
        return None
    packed = np.zeros(len(columns[0]), dtype=np.int64)
    for column, width in zip(columns, widths, strict=True):
        packed = (packed << width) | column.astype(np.int64)
    return packed


def _minutes(hours: np.ndarray) -> np.ndarray:
    """Dwell on whole minutes, at least one (logs record minutes)."""
    return np.maximum(np.rint(hours * 60.0), 1.0) / 60.0


def _public_place(rng: np.random.Generator, region: np.ndarray, category: np.ndarray) -> np.ndarray:
    j = rng.integers(0, _PLACES_PER_CATEGORY, size=len(region))
    return cast(np.ndarray, (region * _N_PLACE + category) * _PLACES_PER_CATEGORY + j)


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


# -- search activity -------------------------------------------------------------------------

_SEARCH_P = 0.55  # a user searches anything on a day, before the weekday factor
_SEARCH_WEEKDAY = (1.03, 1.03, 1.03, 1.03, 1.03, 0.93, 0.93)  # Monday .. Sunday
_NULL_SEARCHES = (1, 3)  # null-symptom rows of a searching user-day, inclusive
_SYMPTOM_SEARCHER_P = 0.2  # of searching users, at factor 1 for every symptom
_MANY_SYMPTOMS_P = 0.08  # symptom-searching user-days with 4 or more distinct symptoms
_FEW_EXTRA_MEAN = 0.25  # the others: 1 + min(Poisson, 2) distinct symptoms
_MANY_EXTRA_MEAN = 1.65  # the many: 4 + Poisson distinct symptoms (so ~1.6 in all on average)
_MAX_SYMPTOMS = 12
_REPEAT_P = 0.2  # a searched symptom is searched a second time
_AWAY_P = 0.02  # searching user-days with some searches in another municipality of the county
_AWAY_ROW_P = 0.5  # of an away user-day's rows, those in the other municipality

# Popularity: Zipf-like weight rank ** -0.92 over the symptom list, ranks fixed here for
# the names the trajectory moves and drawn by a fixed-seed permutation for the rest, so
# that ~35 of the 422 names hold 60% of the symptom searches of January-March 2020.
_ZIPF_EXPONENT = 0.92
_POPULARITY_SEED = 422
_PINNED_RANKS: dict[str, int] = {
    "Cough": 1, "Fever": 2, "Headache": 3, "Sore throat": 4, "Common cold": 5,
    "Nasal congestion": 7, "Allergy": 8, "Fatigue": 9, "Chills": 12, "Rhinorrhea": 14,
    "Itch": 15, "Sinusitis": 16, "Hay fever": 18, "Myalgia": 20, "Low-grade fever": 24,
    "Phlegm": 28, "Bronchitis": 30, "Rhinitis": 35, "Allergic conjunctivitis": 40,
    "Hives": 45, "Pneumonia": 50, "Conjunctivitis": 60, "Shortness of breath": 150,
    "Viral pneumonia": 220, "Anosmia": 260, "Ageusia": 300,
}
# Day of year -> factor of the winter respiratory group and of the allergy group.
_WINTER_SYMPTOMS = (
    "Cough", "Fever", "Sore throat", "Common cold", "Nasal congestion", "Rhinorrhea",
    "Chills", "Shivering", "Low-grade fever", "Sinusitis", "Acute bronchitis", "Bronchitis",
    "Laryngitis", "Tonsillitis", "Croup", "Phlegm", "Sputum", "Myalgia", "Fatigue",
    "Headache", "Pneumonia", "Otitis media", "Wheeze", "Post-nasal drip", "Throat irritation",
)
_WINTER_KNOTS: tuple[tuple[int, float], ...] = (
    (1, 1.4), (32, 1.35), (60, 1.15), (91, 0.95), (121, 0.85), (244, 0.85), (305, 1.1),
    (335, 1.3), (366, 1.4),
)
_ALLERGY_SYMPTOMS = (
    "Allergy", "Allergic conjunctivitis", "Hay fever", "Rhinitis", "Conjunctivitis", "Itch",
    "Hives", "Red eye", "Asthma",
)
_ALLERGY_KNOTS: tuple[tuple[int, float], ...] = (
    (1, 0.8), (60, 0.9), (80, 1.3), (110, 1.8), (140, 2.0), (170, 1.6), (200, 1.2),
    (250, 1.1), (290, 0.85), (366, 0.8),
)
# The COVID-like wave: factor 1 + (peak - 1) * wave(date) for the names listed.
_COVID_PEAK: dict[str, float] = {
    "Fever": 3.0, "Cough": 2.5, "Shortness of breath": 4.0, "Anosmia": 20.0, "Ageusia": 20.0,
    "Low-grade fever": 2.5, "Chills": 2.0, "Myalgia": 1.8, "Fatigue": 1.8, "Sore throat": 1.5,
    "Headache": 1.3, "Hypoxemia": 3.0, "Hypoxia": 3.0, "Pneumonia": 3.0,
    "Viral pneumonia": 5.0, "Shallow breathing": 3.0, "Chest pain": 1.5, "Diarrhea": 1.2,
}
_COVID_KNOTS: tuple[tuple[date, float], ...] = (
    (date(2020, 3, 5), 0.0), (date(2020, 3, 25), 1.0), (date(2020, 4, 5), 1.0),
    (date(2020, 5, 10), 0.35), (date(2020, 7, 1), 0.15), (date(2020, 10, 1), 0.15),
    (date(2020, 11, 10), 0.4), (date(2020, 12, 31), 0.3),
)
_SYMPTOM_WEEKDAY = (1.06, 1.04, 1.02, 1.0, 0.97, 0.93, 0.98)  # Monday .. Sunday


def _symptom_popularity(symptoms: list[str]) -> np.ndarray:
    """Base weight of each symptom (rank ** -0.92, summing to 1), in list order."""
    rank = np.zeros(len(symptoms), dtype=np.int64)
    for i, name in enumerate(symptoms):
        rank[i] = _PINNED_RANKS.get(name, 0)
    free_ranks = np.setdiff1d(np.arange(1, len(symptoms) + 1), rank[rank > 0])
    free = np.flatnonzero(rank == 0)
    rank[free] = np.random.default_rng(_POPULARITY_SEED).permutation(free_ranks)[:len(free)]
    weight = rank.astype(float) ** -_ZIPF_EXPONENT
    return cast(np.ndarray, weight / weight.sum())


def _seasonal(days: list[date], knots: tuple[tuple[int, float], ...]) -> np.ndarray:
    x = np.array([d.timetuple().tm_yday for d in days], dtype=float)
    kx, ky = zip(*knots, strict=True)
    return cast(np.ndarray, np.interp(x, np.array(kx, dtype=float), np.array(ky)))


def _covid_wave(days: list[date]) -> np.ndarray:
    x = np.array([d.toordinal() for d in days], dtype=float)
    kx = np.array([d.toordinal() for d, _ in _COVID_KNOTS], dtype=float)
    ky = np.array([v for _, v in _COVID_KNOTS])
    return cast(np.ndarray, np.interp(x, kx, ky, left=0.0, right=ky[-1]))


def _symptom_factors(days: list[date], symptoms: list[str]) -> np.ndarray:
    """Multiplicative factors, shape (days, symptoms); the same for every region."""
    out = np.outer(np.array(_SYMPTOM_WEEKDAY)[[d.weekday() for d in days]],
                   np.ones(len(symptoms)))
    column = {name: i for i, name in enumerate(symptoms)}
    for names, knots in ((_WINTER_SYMPTOMS, _WINTER_KNOTS), (_ALLERGY_SYMPTOMS, _ALLERGY_KNOTS)):
        cols = [column[n] for n in names if n in column]
        out[:, cols] *= _seasonal(days, knots)[:, None]
    wave = _covid_wave(days)
    for name, peak in _COVID_PEAK.items():
        if name in column:
            out[:, column[name]] *= 1.0 + (peak - 1.0) * wave
    return out


def _distinct_symptoms(rng: np.random.Generator, n: int) -> np.ndarray:
    """How many distinct symptoms each of ``n`` symptom-searching user-days searches."""
    many = rng.random(n) < _MANY_SYMPTOMS_P
    few = 1 + np.minimum(rng.poisson(_FEW_EXTRA_MEAN, n), 2)
    lots = np.minimum(4 + rng.poisson(_MANY_EXTRA_MEAN, n), _MAX_SYMPTOMS)
    return np.where(many, lots, few)


def _draw_distinct(rng: np.random.Generator, weights: np.ndarray,
                   m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``m[i]`` distinct items for each drawer ``i``, drawn by weight without replacement;
    returns (drawer, item) pairs. Successive sampling: draws with replacement in which a
    repeat is rejected and drawn again, done in rounds of each drawer's shortfall (a
    (drawers x items) key matrix would cost far more)."""
    n_items = len(weights)
    cum = np.cumsum(weights) / weights.sum()
    cum[-1] = 1.0
    short = np.minimum(m, n_items).astype(np.int64)
    taken = np.zeros(0, dtype=np.int64)  # drawer * n_items + item, sorted
    while short.any():
        drawers = np.repeat(np.arange(len(short)), short)
        items = np.searchsorted(cum, rng.random(len(drawers)), side="right")
        fresh = np.unique(drawers * n_items + items)
        fresh = fresh[~np.isin(fresh, taken, assume_unique=True)]
        short -= np.bincount(fresh // n_items, minlength=len(short))
        taken = np.union1d(taken, fresh)
    return taken // n_items, taken % n_items


def _search_activity_day(geo: _Geography, pop: _Population, day: date, seed: int,
                         symptoms: pa.Array, weights: np.ndarray) -> pa.Table:
    """All searches of one day; ``weights`` is popularity times the day's factors, per
    symptom. The expected number of users searching a symptom is proportional to its
    weight (up to the distinct-symptom sampling): the share of searching users who search
    symptoms scales with the total weight, and each one's symptoms are drawn by weight."""
    rng = _stream(seed, _SEARCH_STREAM, day.toordinal())
    n_users = len(pop.home)
    p_search = _SEARCH_P * _SEARCH_WEEKDAY[day.weekday()]
    searching = np.flatnonzero(rng.random(n_users) < p_search)
    n = len(searching)
    lo, hi = _NULL_SEARCHES
    null_rows = np.repeat(np.arange(n), rng.integers(lo, hi + 1, size=n))
    p_symptoms = min(0.9, _SYMPTOM_SEARCHER_P * float(weights.sum()))
    searcher = np.flatnonzero(rng.random(n) < p_symptoms)  # positions in ``searching``
    m = _distinct_symptoms(rng, len(searcher))
    drawer, what = _draw_distinct(rng, weights, m)
    who = searcher[drawer]
    again = rng.random(len(who)) < _REPEAT_P
    who = np.concatenate([who, who[again]])
    what = np.concatenate([what, what[again]])
    row_user = np.concatenate([null_rows, who])  # positions in ``searching``
    row_symptom = np.concatenate([np.full(len(null_rows), -1), what])
    # A few user-days search partly from another municipality of the home county.
    home = pop.home[searching]
    away = rng.random(n) < _AWAY_P
    elsewhere = geo.draw_in_county(rng, home)
    for _ in range(8):  # another municipality, unless the county has only one
        same = np.flatnonzero(away & (elsewhere == home))
        if not len(same):
            break
        elsewhere[same] = geo.draw_in_county(rng, home[same])
    # An away user-day's first null-symptom row always moves, so it does search elsewhere.
    first = np.zeros(len(row_user), dtype=bool)
    first[np.searchsorted(null_rows, np.arange(n))] = True
    moved = away[row_user] & (first | (rng.random(len(row_user)) < _AWAY_ROW_P))
    row_region = np.where(moved, elsewhere[row_user], home[row_user])
    users = searching[row_user]
    order = np.lexsort((row_symptom, row_region, users))
    symptom_index = row_symptom[order]
    region_ids = pa.array(geo.region_ids, type=pa.string())
    return pa.Table.from_arrays(
        [
            pop.user_ids.take(pa.array(users[order])),
            region_ids.take(pa.array(row_region[order])),
            symptoms.take(pa.array(symptom_index, mask=symptom_index < 0)),
        ],
        schema=SEARCH_SCHEMA,
    )


# -- files -----------------------------------------------------------------------------------

def _write_atomically(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")  # a third smaller than snappy, as fast
    os.replace(tmp, path)


def default_symptoms_path() -> Path:
    """The 422 symptom names shipped with the package (docs/design.md, Input contract)."""
    return Path(str(resources.files("dp_demo").joinpath("data", "symptoms.txt")))


def default_symptoms() -> list[str]:
    return default_symptoms_path().read_text(encoding="utf-8").splitlines()


def _write_reference(root: DataRoot, regions: pd.DataFrame) -> pd.DataFrame:
    """Write the public reference files; return the region table as read back (validated)."""
    write_regions(regions, root.regions_csv)
    symptom_list(root).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(default_symptoms_path(), symptom_list(root))
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


_SYMPTOMS_TRUTH_SQL = """
WITH searches AS (
    SELECT s.date, a.level, a.region_id, s.user_id, s.symptom
    FROM read_parquet($paths, hive_partitioning = true, hive_types = {'date': DATE}) AS s
    JOIN ancestors AS a ON a.finest_region_id = s.region_id
),
volume AS (
    SELECT date, level, region_id, count(DISTINCT user_id) AS users
    FROM searches
    GROUP BY ALL
),
per_symptom AS (
    SELECT date, level, region_id, symptom, count(DISTINCT user_id) AS users
    FROM searches
    WHERE symptom IS NOT NULL
    GROUP BY ALL
)
SELECT d.date, r.level::TINYINT AS level, r.region_id, NULL::VARCHAR AS symptom,
       coalesce(v.users, 0)::BIGINT AS users
FROM (SELECT unnest($days::DATE[]) AS date) AS d
CROSS JOIN regions AS r
LEFT JOIN volume AS v USING (date, level, region_id)
UNION ALL
SELECT date, level::TINYINT, region_id, symptom, users::BIGINT
FROM per_symptom
ORDER BY date, level, region_id, symptom NULLS FIRST
"""
SYMPTOMS_TRUTH_SCHEMA = pa.schema(
    [pa.field("date", pa.date32()), pa.field("level", pa.int8()),
     pa.field("region_id", pa.string()), pa.field("symptom", pa.string()),
     pa.field("users", pa.int64())]
)


def _true_symptom_counts(con: duckdb.DuckDBPyConnection, written: dict[date, Path]) -> pa.Table:
    """Symptoms truth (module docstring) for the search partitions in ``written``."""
    params = {"paths": [str(p) for p in written.values()], "days": list(written)}
    table = con.sql(_SYMPTOMS_TRUTH_SQL, params=params).to_arrow_table()
    return table.cast(SYMPTOMS_TRUTH_SCHEMA)


_TRUTH_README = """\
# Ground truth (NOT private, NOT for release)

Exact, un-noised and unbounded metrics of the synthetic population, written by
`dp_demo.generator` for evaluating the pipeline. Nothing in the pipeline reads this
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
    search_rows: int
    regions: int
    paths: tuple[str, ...]

    def describe(self) -> str:
        return (f"generated {self.days} days ({self.start}..{self.end}) of location history "
                f"and search activity for {self.users} users in {self.regions} regions: "
                f"{self.rows} stays, {self.search_rows} searches; "
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
    """Write the reference files, one location-history and one search-activity partition
    per day in [start, end] and the truth for those days (see the module docstring), in
    that order: the input is complete before the truth is computed.

    With the default 100,000 users (seed 2020) a day has ~40,000 users in the capital city,
    1,200-5,900 in each other municipality of the capital county, 180-1,000 in typical
    municipalities (median ~430; the second city ~7,400) and 27-43 in the sparse ones.
    Searching users (B) on 2020-03-25: ~56,600 in the country, ~300 in the median
    municipality, ~1,200 in the median county; at the country level Fever ~3,200 and
    Cough ~4,700 users, the median symptom ~18.
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
    symptom_names = default_symptoms()
    symptoms = pa.array(symptom_names, type=pa.string())
    popularity = _symptom_popularity(symptom_names)
    rows = search_rows = 0
    truth: list[pd.DataFrame] = []
    symptoms_truth: list[pa.Table] = []
    batch: dict[date, Path] = {}
    search_batch: dict[date, Path] = {}
    batches: list[tuple[dict[date, Path], dict[date, Path]]] = []
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
            weights = popularity * _symptom_factors([day], symptom_names)[0]
            searches = _search_activity_day(geo, pop, day, seed, symptoms, weights)
            path = root.raw_partition(SEARCH_SOURCE, day) / "part-0.parquet"
            _write_atomically(searches, path)
            search_rows += searches.num_rows
            search_batch[day] = path
            if len(batch) == _TRUTH_BATCH_DAYS or i == len(days) - 1:
                batches.append((batch, search_batch))
                batch, search_batch = {}, {}
                report(f"location history and search activity: {i + 1}/{len(days)} days "
                       f"written (up to {day})")
        # The truth last, once every input file is written: a pipeline may start on the
        # input meanwhile (`make demo` does). In batches of ~10 days: one query each keeps
        # DuckDB's per-query cost low and the memory bounded.
        for k, (stays_batch, searches_batch) in enumerate(batches):
            truth.append(_true_metrics(con, stays_batch))
            symptoms_truth.append(_true_symptom_counts(con, searches_batch))
            report(f"truth: {k + 1}/{len(batches)} batches of days computed")
    truth_path = _write_truth(root, pd.concat(truth, ignore_index=True))
    symptoms_truth_path = root.truth_dir / SYMPTOMS_TRUTH_FILE
    _write_atomically(pa.concat_tables(symptoms_truth), symptoms_truth_path)
    return GenerateSummary(
        start=start, end=end, days=len(days), users=users, rows=rows, search_rows=search_rows,
        regions=len(table),
        paths=(str(root.regions_csv), str(symptom_list(root)),
               str(root.root / "raw" / LOCATION_SOURCE), str(root.root / "raw" / SEARCH_SOURCE),
               str(truth_path), str(symptoms_truth_path)),
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


def symptom_trajectory(symptoms: list[str], start: date, end: date) -> pd.DataFrame:
    """The ground-truth factors (date, symptom, factor), the same for every region: what
    the generator multiplies each symptom's base popularity by. For evaluation and tests."""
    days = _days(start, end)
    cube = _symptom_factors(days, symptoms)
    d, c = np.meshgrid(np.arange(len(days)), np.arange(len(symptoms)), indexing="ij")
    return pd.DataFrame({
        "date": np.array(days, dtype=object)[d.ravel()],
        "symptom": np.array(symptoms, dtype=object)[c.ravel()].astype(str),
        "factor": cube.ravel(),
    })
