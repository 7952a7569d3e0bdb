"""Synthetic input for the benchmark: a country-sized region table and one day of stays.

The stays are written in the pipeline's clean location-history format (the columns
``include/sql/location_history/ingest.sql`` keeps: ``user_id, region_id, place_id,
place_category, dwell_hours``), streamed one row group at a time, so memory does not grow
with the number of rows. The geography has three levels: one country, ``--sub-regions``
sub_region_1 and ``--finest`` sub_region_2 regions (defaults 50 and 3000), written with
``dp_ops.regions.write_regions`` so the pipeline reads it like any region table.

User-day model (all vectorised with numpy; one generator stream per row group, so a
given seed and size give the same file):

- a home region (sub_region_2, drawn by a skewed log-normal population weight), one
  residential stay (two for 30% of users) of ~13 h in total;
- with probability 0.5 a workplace stay of 0.5-10 h (the pipeline's > 1 h rule drops
  some) in the home region (65%), another region of the same sub_region_1 (25%) or a
  region drawn by population (10%);
- 1 + Poisson(0.6) stays at public places (category by fixed shares; region: home 80%,
  the work region 10%, a region of the home sub_region_1 10%); 3% of users have an
  "errand day" of 5-8 place stays spread over up to four regions, so the 4-pair bound
  has pairs to drop.

That is about 3.55 stays per user-day, so N stays come from about N / 3.55 users. Rows are
shuffled within each row group; a row group holds whole users, except that the day's
last user may lose some stays so the file has exactly N rows.

Run it with the project venv: ``python benchmarks/synth.py --stays 1000000 --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from dp_demo.geography import fake_place_id

from dp_ops.regions import REGION_COLUMNS, validate_regions, write_regions
from dp_ops.sources.location_history import PLACE_CATEGORIES

COUNTRY_CODE = "BX"
COUNTRY_NAME = "Benchmarkia"
STAYS_FILE = "stays.parquet"
REGIONS_FILE = "regions.csv"
META_FILE = "meta.json"
ROW_GROUP_ROWS = 1 << 20
STAYS_PER_USER = 3.55  # the model's mean, used to size each row group's draw
GENERATOR_VERSION = 3  # bump when the model changes, so cached data is regenerated

STAY_SCHEMA = pa.schema([
    ("user_id", pa.string()),
    ("region_id", pa.string()),
    ("place_id", pa.string()),
    ("place_category", pa.string()),
    ("dwell_hours", pa.float64()),
])

# Shares of public-place stays per source category (order of PLACE_CATEGORIES).
_PLACE_SHARES = np.array([0.20, 0.08, 0.20, 0.22, 0.07, 0.15, 0.08])
_CATEGORIES = np.array([*PLACE_CATEGORIES, "residential", "workplace"], dtype=object)
_RESIDENTIAL = len(PLACE_CATEGORIES)
_WORKPLACE = _RESIDENTIAL + 1
_PLACE_POOL = 1 << 18  # distinct place ids
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_URLSAFE = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
                         dtype=np.uint8)


# -- geography ------------------------------------------------------------------------

def _row(region_id: str, parent_id: str, level: int, area: float,
         **text: str) -> dict[str, object]:
    row: dict[str, object] = {c: "" for c in REGION_COLUMNS}
    row.update(region_id=region_id, parent_id=parent_id, level=level,
               country_region_code=COUNTRY_CODE, country_region=COUNTRY_NAME,
               place_id=fake_place_id(region_id), open_covid_region_code=region_id,
               area_km2=area)
    row.update(text)
    return row


def benchmark_regions(sub_regions: int = 50, finest: int = 3000,
                      seed: int = 11) -> tuple[pd.DataFrame, pd.Series]:
    """A three-level region table and the (private, generator-only) population share of
    each finest region. Sub_region_1 sizes are uneven (2 to ~200 children); about 1% of
    finest regions are under 3 km^2, like real small towns."""
    if not 1 <= sub_regions <= finest:
        raise ValueError(f"sub_regions={sub_regions}, finest={finest}: need "
                         "1 <= sub_regions <= finest")
    rng = np.random.default_rng(seed)
    minimum = max(1, min(2, finest // sub_regions))
    extra = rng.multinomial(finest - minimum * sub_regions,
                            rng.dirichlet(np.full(sub_regions, 1.5)))
    children = minimum + extra
    areas = np.round(rng.lognormal(math.log(250.0), 1.0, finest), 1)
    small = rng.random(finest) < 0.01
    areas[small] = np.round(rng.uniform(0.5, 2.9, int(small.sum())), 1)
    areas = np.maximum(areas, 0.1)
    weights = rng.lognormal(0.0, 1.3, finest)
    rows: list[dict[str, object]] = []
    finest_ids: list[str] = []
    k = 0
    for s in range(sub_regions):
        sub_id = f"{COUNTRY_CODE}-{s + 1:02d}"
        n = int(children[s])
        sub_area = round(float(areas[k:k + n].sum()), 1)
        rows.append(_row(sub_id, COUNTRY_CODE, 1, sub_area, sub_region_1=f"Province {s + 1}",
                         iso_3166_2_code=sub_id, sub_region_1_code=sub_id))
        for m in range(n):
            rid = f"{sub_id}-{m + 1:04d}"
            rows.append(_row(rid, sub_id, 2, float(areas[k]), sub_region_1=f"Province {s + 1}",
                             sub_region_2=f"District {s + 1}.{m + 1}",
                             sub_region_1_code=sub_id, sub_region_2_code=rid))
            finest_ids.append(rid)
            k += 1
    country = _row(COUNTRY_CODE, "", 0, round(float(areas.sum()), 1))
    table = pd.DataFrame([country, *rows], columns=list(REGION_COLUMNS))
    table = table.astype({"level": "int64", "area_km2": "float64"})
    validate_regions(table, source="benchmark regions")
    population = pd.Series(weights / weights.sum(), index=pd.Index(finest_ids, name="region_id"))
    return table, population


# -- string columns without Python objects -------------------------------------------

def _fixed_width_strings(chars: np.ndarray) -> pa.Array:
    """A pyarrow string array from an (n, width) uint8 array of ASCII characters."""
    n, width = chars.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets),
                                       pa.py_buffer(np.ascontiguousarray(chars)))


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A bijection on uint64 (so distinct user numbers get distinct ids)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def user_ids(numbers: np.ndarray, seed: int) -> pa.Array:
    """16-hex-character pseudonymous user ids, distinct for distinct ``numbers``."""
    h = _splitmix64(numbers.astype(np.uint64) ^ np.uint64(seed * 0x1000193))
    nibbles = (h[:, None] >> (np.arange(60, -4, -4, dtype=np.uint64))[None, :]) & np.uint64(15)
    return _fixed_width_strings(_HEX[nibbles.astype(np.intp)])


def place_pool(seed: int) -> pa.Array:
    """Google-like place ids ("ChIJ" + 23 url-safe characters)."""
    rng = np.random.default_rng([seed, 7])
    body = _URLSAFE[rng.integers(0, 64, size=(_PLACE_POOL, 23))]
    prefix = np.broadcast_to(np.frombuffer(b"ChIJ", dtype=np.uint8), (_PLACE_POOL, 4))
    return _fixed_width_strings(np.hstack([prefix, body]))


# -- stays ----------------------------------------------------------------------------

class _Geo:
    def __init__(self, regions: pd.DataFrame, population: pd.Series) -> None:
        finest = regions.loc[regions["level"] == 2, ["region_id", "parent_id"]]
        self.ids = pa.array(finest["region_id"].to_numpy(dtype=object), pa.string())
        order = pd.Index(finest["region_id"])
        self.cum_pop = np.cumsum(population.reindex(order).to_numpy())
        self.cum_pop[-1] = 1.0
        parent_codes, parents = pd.factorize(finest["parent_id"])
        self.parent = parent_codes.astype(np.int64)
        # finest regions sorted by parent: siblings of region r are
        # by_parent[start[parent[r]] : start[parent[r]] + size[parent[r]]]
        self.by_parent = np.argsort(self.parent, kind="stable")
        self.size = np.bincount(self.parent, minlength=len(parents))
        self.start = np.concatenate([[0], np.cumsum(self.size)[:-1]])

    def by_population(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.searchsorted(self.cum_pop, rng.random(n), side="right")

    def sibling(self, rng: np.random.Generator, region: np.ndarray) -> np.ndarray:
        p = self.parent[region]
        pick = (rng.random(region.size) * self.size[p]).astype(np.int64)
        return self.by_parent[self.start[p] + pick]


def _user_day_rows(rng: np.random.Generator, geo: _Geo, users: int
                   ) -> tuple[np.ndarray, ...]:
    """(user index, finest region, category code, dwell hours) of ``users`` user-days."""
    home = geo.by_population(rng, users)
    work_draw = rng.random(users)
    work = np.where(work_draw < 0.65, home,
                    np.where(work_draw < 0.90, geo.sibling(rng, home),
                             geo.by_population(rng, users)))
    n_res = 1 + (rng.random(users) < 0.30)
    n_work = (rng.random(users) < 0.50).astype(np.int64)
    errand = rng.random(users) < 0.03
    n_place = np.where(errand, rng.integers(5, 9, users),
                       1 + np.minimum(rng.poisson(0.6, users), 4))
    counts = n_res + n_work + n_place
    total = int(counts.sum())
    user = np.repeat(np.arange(users), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    pos = np.arange(total) - first
    res_end = np.repeat(n_res, counts)
    work_end = res_end + np.repeat(n_work, counts)
    is_res = pos < res_end
    is_work = ~is_res & (pos < work_end)
    is_place = ~(is_res | is_work)

    category = np.where(is_res, _RESIDENTIAL, _WORKPLACE).astype(np.int8)
    n_places = int(is_place.sum())
    category[is_place] = rng.choice(len(PLACE_CATEGORIES), n_places, p=_PLACE_SHARES)

    region = home[user]
    region[is_work] = work[user[is_work]]
    place_rows = np.flatnonzero(is_place)
    place_user = user[place_rows]
    draw = rng.random(n_places)
    # errand days spread over more regions
    away = np.where(errand[place_user], 0.6, 0.2)
    to_work = draw < away * 0.5
    to_sibling = ~to_work & (draw < away)
    region[place_rows[to_work]] = work[place_user[to_work]]
    sib = place_rows[to_sibling]
    region[sib] = geo.sibling(rng, home[user[sib]])

    hours = np.empty(total)
    home_hours = np.clip(rng.normal(13.0, 2.0, users), 4.0, 20.0)
    hours[is_res] = home_hours[user[is_res]] / n_res[user[is_res]]
    hours[is_work] = rng.uniform(0.5, 10.0, int(is_work.sum()))
    hours[is_place] = rng.gamma(1.5, 0.5, n_places).clip(0.05, 6.0)
    return user, region, category, np.round(hours, 4)


def write_stays(path: Path, stays: int, regions: pd.DataFrame, population: pd.Series,
                seed: int, row_group_rows: int = ROW_GROUP_ROWS) -> dict[str, int]:
    """Write ``stays`` rows to ``path`` (Parquet, one row group at a time)."""
    geo = _Geo(regions, population)
    places = place_pool(seed)
    categories = pa.array(_CATEGORIES, pa.string())
    users_per_group = max(1, int(row_group_rows / STAYS_PER_USER))
    written = 0
    users_total = 0
    users_written = 0
    group = 0
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, STAY_SCHEMA, compression="snappy") as writer:
        while written < stays:
            rng = np.random.default_rng([seed, group])
            # the last group draws only the users it needs (plus a margin)
            users = min(users_per_group,
                        int((stays - written) / STAYS_PER_USER * 1.1) + 10)
            user, region, category, hours = _user_day_rows(rng, geo, users)
            # rows come grouped by user: a prefix keeps whole users (the last one maybe cut)
            keep = min(len(user), stays - written)
            order = rng.permutation(keep)
            user, region, category, hours = user[order], region[order], category[order], \
                hours[order]
            users_written += int(np.unique(user).size)  # a user's rows are in one group
            table = pa.table({
                "user_id": user_ids(user + users_total, seed),
                "region_id": geo.ids.take(pa.array(region)),
                "place_id": places.take(pa.array(rng.integers(0, _PLACE_POOL, keep))),
                "place_category": categories.take(pa.array(category)),
                "dwell_hours": pa.array(hours, pa.float64()),
            }, schema=STAY_SCHEMA)
            writer.write_table(table, row_group_size=keep)
            written += keep
            users_total += users
            group += 1
    tmp.replace(path)
    return {"rows": written, "row_groups": group, "users": users_written}


def generate(out: Path, stays: int, seed: int, sub_regions: int, finest: int) -> dict[str, object]:
    """Region table + one day of stays under ``out``; reuses a matching earlier run."""
    meta_path = out / META_FILE
    wanted = {"stays": stays, "seed": seed, "sub_regions": sub_regions, "finest": finest,
              "generator_version": GENERATOR_VERSION}
    if meta_path.is_file() and (out / STAYS_FILE).is_file():
        meta = json.loads(meta_path.read_text())
        if all(meta.get(k) == v for k, v in wanted.items()):
            return meta | {"reused": True}
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    regions, population = benchmark_regions(sub_regions, finest, seed=seed)
    write_regions(regions, out / REGIONS_FILE)
    info = write_stays(out / STAYS_FILE, stays, regions, population, seed)
    meta = wanted | info | {
        "seconds": round(time.perf_counter() - t0, 3),
        "generator_peak_rss_mib": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "bytes": (out / STAYS_FILE).stat().st_size,
        "regions_by_level": {str(k): int(v) for k, v in
                             regions.groupby("level").size().items()},
    }
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return meta | {"reused": False}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stays", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=2020)
    parser.add_argument("--sub-regions", type=int, default=50)
    parser.add_argument("--finest", type=int, default=3000)
    parser.add_argument("--result", type=Path, default=None, help="also write the summary here")
    args = parser.parse_args(argv)
    meta = generate(args.out, args.stays, args.seed, args.sub_regions, args.finest)
    text = json.dumps(meta)
    print(text)
    if args.result:
        args.result.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
