"""Our contenders, each run by ``benchmarks/run.py`` in a fresh process of the project venv:

    python benchmarks/contenders.py CONTENDER --data DIR --work DIR --result FILE

``ours-step``     the public-places step exactly as the pipeline runs it:
                  the mobility report's bounding step then
                  its noise step on a data root holding the day as its clean partition
                  (this computes every mobility metric, not only places: see README.md)
``ours-places``   the pipeline's bounding SQL (``cell_aggregates_sql``) filtered to the
                  place metrics, then discrete Laplace noise on every place cell of the
                  public domain with the pipeline's noise function (no ledger, no files
                  beyond one output Parquet)
``duckdb-floor``  non-private floor: DuckDB ``count(DISTINCT user_id)`` per (level,
                  category, region) of place stays joined to the three levels; no bounding,
                  no noise
``noise-rate``    samples per second of ``dp_ops.privacy.noise.sample_discrete_laplace`` on one
                  core with ``noise_generator()`` (AES-128-CTR)
``whole-day``     every step of one day (``run_days`` for one date: ingest, bound,
                  noise, baseline, report, then gate and publish) on a data root whose
                  baseline window was prepared by ``whole-day-prepare``
``profile-bounding`` the bound step with DuckDB's JSON profiler on each of
                  its queries
``exact-bounded`` (validation, not timed) sum over users of min(distinct place pairs, 4)
                  per level: what every correct contender's place counts add up to before
                  noise

Each writes a JSON result with the seconds it timed (after its imports) and a summary of
its output (cells, sum of noisy place counts per level) that ``run.py`` checks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from dp_ops.layout import DataRoot
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.sources.location_history import PLACE_CATEGORIES
from dp_ops.steps.noise_request import NoiseRequest, RunRequest

BENCH_DAY = date(2020, 2, 15)  # the first public date: the whole day publishes it
STAYS_FILE = "stays.parquet"
REGIONS_FILE = "regions.csv"
SOURCE = "location_history"
PLACE_EPSILON = 0.44  # per cell, sensitivity 1: noise scale 1 / 0.44
MAX_PAIRS = 4


def _link(src: Path, dst: Path) -> None:
    """Hard-link (or copy) ``src`` to ``dst``: the data root sees the generated file
    without a second copy of it on disk."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        import shutil

        shutil.copyfile(src, dst)


def prepare_root(data: Path, work: Path, *, clean_days: Sequence[date] = (),
                 raw_days: Sequence[date] = ()) -> DataRoot:
    """A data root under ``work`` with the generated region table and the generated day as
    the clean partition of ``clean_days`` and the raw partition of ``raw_days``."""
    root = DataRoot(work.resolve())
    _link(data / REGIONS_FILE, root.regions_csv)
    for day in clean_days:
        _link(data / STAYS_FILE, root.clean_partition(SOURCE, day) / "part.parquet")
    for day in raw_days:
        _link(data / STAYS_FILE, root.raw_partition(SOURCE, day) / "part-0.parquet")
    return root


def _noisy_place_summary(frame: Any) -> dict[str, Any]:
    """Cells and sum of noisy place counts per level of a frame (level, metric,
    noisy_value)."""
    places = frame[frame["metric"].str.startswith("places_")]
    return {
        "place_cells": int(len(places)),
        "noisy_place_sum_by_level": {str(int(k)): int(v) for k, v in
                                     places.groupby("level")["noisy_value"].sum().items()},
    }


# -- contenders -----------------------------------------------------------------------

def ours_step(data: Path, work: Path) -> dict[str, Any]:
    import pandas as pd
    import pyarrow.parquet as pq

    import dp_ops.privacy.ledger_migrations  # noqa: F401  imports outside the timed section
    import dp_ops.reports.mobility.bounding  # noqa: F401
    from dp_ops.reports.mobility.declaration import REPORT
    from dp_ops.reports.registry import bind, prepare_noise_samplers
    from dp_ops.settings import load_execution_settings

    # What an Airflow task process starts with (airflow_local_settings.py warms the process
    # it is forked from): the modules imported and the noise sampler's tables built.
    prepare_noise_samplers()
    root = prepare_root(data, work, clean_days=[BENCH_DAY])
    cfg = MobilityConfig()
    ledger = f"sqlite:///{root.root / 'ledger.sqlite'}"
    mobility = bind(REPORT, cfg, root, ledger)
    t0 = time.perf_counter()
    mobility.bound(BENCH_DAY)
    t1 = time.perf_counter()
    result = mobility.noise(NoiseRequest(day=BENCH_DAY, run_id="benchmark"))
    t2 = time.perf_counter()
    noisy = pd.concat([pq.read_table(p).to_pandas() for p in result.paths], ignore_index=True)
    return {
        "seconds": t2 - t0, "bound_s": t1 - t0, "noise_s": t2 - t1,
        "cells_noised": int(len(noisy)),
        "metrics": sorted(noisy["metric"].unique().tolist()),
        "execution": vars(load_execution_settings()),
        **_noisy_place_summary(noisy),
    }


def _place_domain(regions: Any) -> Any:
    import pandas as pd

    metrics = [f"places_{c}" for c in PLACE_CATEGORIES]
    return pd.DataFrame({
        "level": np.repeat(regions["level"].to_numpy(dtype=np.int8), len(metrics)),
        "region_id": np.repeat(regions["region_id"].to_numpy(dtype=object), len(metrics)),
        "metric": np.tile(np.array(metrics, dtype=object), len(regions)),
    })


def places_only_sql(relation: str) -> str:
    from dp_ops.reports.mobility.bounding import cell_aggregates_sql

    return (f"SELECT * FROM ({cell_aggregates_sql(relation)}) AS cells "
            "WHERE starts_with(metric, 'places_')")


def ours_places(data: Path, work: Path) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dp_ops.engine.duckdb import duckdb_connection, register_ancestors
    from dp_ops.privacy.noise import add_discrete_laplace, noise_generator
    from dp_ops.regions import ancestors, read_regions
    from dp_ops.reports.mobility.bounding import bounding_params
    from dp_ops.settings import load_execution_settings

    root = prepare_root(data, work, clean_days=[BENCH_DAY])
    clean = root.clean_partition(SOURCE, BENCH_DAY) / "part.parquet"
    t0 = time.perf_counter()
    regions = read_regions(root.regions_csv)
    con = duckdb_connection(root, load_execution_settings())
    register_ancestors(con, ancestors(regions))
    params = bounding_params(MobilityConfig(), BENCH_DAY) | {"clean_file": str(clean)}
    cells = con.execute(places_only_sql("read_parquet($clean_file, hive_partitioning=false)"),
                        params).df()
    con.close()
    t1 = time.perf_counter()
    domain = _place_domain(regions)
    cells["level"] = cells["level"].astype(np.int8)
    merged = domain.merge(cells, on=["level", "region_id", "metric"], how="left")
    true = merged["value"].fillna(0).to_numpy(dtype=np.int64)
    merged["noisy_value"] = add_discrete_laplace(true, epsilon=PLACE_EPSILON, sensitivity=1,
                                                 rng=noise_generator())
    out = work / "places_noisy.parquet"
    pq.write_table(pa.Table.from_pandas(merged.drop(columns="value"), preserve_index=False),
                   out)
    t2 = time.perf_counter()
    return {"seconds": t2 - t0, "bound_s": t1 - t0, "noise_s": t2 - t1,
            "cells_noised": int(len(merged)), **_noisy_place_summary(merged)}


FLOOR_SQL = """
SELECT a.level, s.place_category AS category, a.region_id,
       count(DISTINCT s.user_id) AS users
FROM read_parquet($clean_file, hive_partitioning=false) AS s
JOIN ancestors AS a ON a.finest_region_id = s.region_id
WHERE list_contains($place_categories, s.place_category)
GROUP BY ALL
"""


def duckdb_floor(data: Path, work: Path) -> dict[str, Any]:
    from dp_ops.engine.duckdb import duckdb_connection, register_ancestors
    from dp_ops.engine.files import atomic_copy_to_parquet
    from dp_ops.regions import ancestors, read_regions
    from dp_ops.settings import load_execution_settings

    root = prepare_root(data, work, clean_days=[BENCH_DAY])
    clean = root.clean_partition(SOURCE, BENCH_DAY) / "part.parquet"
    out = work / "floor.parquet"
    t0 = time.perf_counter()
    con = duckdb_connection(root, load_execution_settings())
    register_ancestors(con, ancestors(read_regions(root.regions_csv)))
    atomic_copy_to_parquet(con, FLOOR_SQL, out, {"clean_file": str(clean),
                                                 "place_categories": list(PLACE_CATEGORIES)})
    t1 = time.perf_counter()
    by_level = dict(con.execute("SELECT level, sum(users) FROM read_parquet($f) GROUP BY 1",
                                {"f": str(out)}).fetchall())
    con.close()
    return {"seconds": t1 - t0, "true_unbounded_sum_by_level":
            {str(int(k)): int(v) for k, v in by_level.items()}}


EXACT_BOUNDED_SQL = """
WITH pairs AS (
    SELECT DISTINCT s.user_id, a.level, s.place_category, a.region_id
    FROM read_parquet($clean_file, hive_partitioning=false) AS s
    JOIN ancestors AS a ON a.finest_region_id = s.region_id
    WHERE list_contains($place_categories, s.place_category)
),
per_user AS (SELECT user_id, level, count(*) AS n FROM pairs GROUP BY ALL)
SELECT level, sum(least(n, $max_pairs)) AS kept, sum(n) AS all_pairs,
       count(*) FILTER (WHERE n > $max_pairs) AS users_over_bound, count(*) AS users
FROM per_user GROUP BY level ORDER BY level
"""


def exact_bounded(data: Path, work: Path) -> dict[str, Any]:
    from dp_ops.engine.duckdb import duckdb_connection, register_ancestors
    from dp_ops.regions import ancestors, read_regions
    from dp_ops.settings import load_execution_settings

    root = prepare_root(data, work, clean_days=[BENCH_DAY])
    clean = root.clean_partition(SOURCE, BENCH_DAY) / "part.parquet"
    t0 = time.perf_counter()
    con = duckdb_connection(root, load_execution_settings())
    register_ancestors(con, ancestors(read_regions(root.regions_csv)))
    rows = con.execute(EXACT_BOUNDED_SQL, {"clean_file": str(clean), "max_pairs": MAX_PAIRS,
                                           "place_categories": list(PLACE_CATEGORIES)}
                       ).fetchall()
    con.close()
    return {"seconds": time.perf_counter() - t0,
            "kept_by_level": {str(r[0]): int(r[1]) for r in rows},
            "pairs_by_level": {str(r[0]): int(r[2]) for r in rows},
            "users_over_bound_by_level": {str(r[0]): int(r[3]) for r in rows},
            "users_by_level": {str(r[0]): int(r[4]) for r in rows}}


def noise_rate(data: Path, work: Path, *, size: int = 1_000_000,
               repeats: int = 50) -> dict[str, Any]:
    from dp_ops.privacy.noise import noise_generator, sample_discrete_laplace

    rng = noise_generator()
    sample_discrete_laplace(size, epsilon=PLACE_EPSILON, sensitivity=1, rng=rng)  # warm-up
    rates = []
    t_all = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        sample_discrete_laplace(size, epsilon=PLACE_EPSILON, sensitivity=1, rng=rng)
        rates.append(size / (time.perf_counter() - t0))
    seconds = time.perf_counter() - t_all
    # where the time goes: the bit generator alone and one geometric draw
    t0 = time.perf_counter()
    rng.bit_generator.random_raw(size)
    raw = size / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    rng.geometric(-math.expm1(-PLACE_EPSILON), size)
    geometric = size / (time.perf_counter() - t0)
    return {"seconds": seconds, "samples_per_s": statistics.median(rates),
            "samples_per_s_all": rates, "size": size, "threads": 1,
            "aes_ctr_raw_u64_per_s": raw, "geometric_per_s": geometric}


# -- the whole day --------------------------------------------------------------------

def whole_day_prepare(data: Path, work: Path) -> dict[str, Any]:
    """Every day of the baseline window noised and reported, baseline frozen (untimed
    setup for ``whole-day``): ``data`` is copied (hard-linked) into each window date."""
    from dp_ops.reports.mobility.declaration import REPORT
    from dp_ops.reports.registry import bind

    cfg = MobilityConfig()
    root = prepare_root(data, work, raw_days=cfg.baseline_dates)
    mobility = bind(REPORT, cfg, root, root.default_ledger_url)
    t0 = time.perf_counter()
    for day in cfg.baseline_dates:
        mobility.ingest(day)
        mobility.bound(day)
        mobility.noise(NoiseRequest(day=day, run_id="benchmark-window"))
        mobility.build_baseline()
        mobility.report_day(day)
    return {"seconds": time.perf_counter() - t0, "days": len(cfg.baseline_dates),
            "baseline": str(root.baseline_file("mobility"))}


def whole_day(data: Path, work: Path) -> dict[str, Any]:
    """``run_days`` for BENCH_DAY, with each step timed (run_days calls the bound
    report's step methods, looked up on the class at call time, so wrapping them times the
    real calls)."""
    from dp_ops.reports.mobility.declaration import REPORT
    from dp_ops.reports.registry import BoundReport, bind

    cfg = MobilityConfig()
    if not DataRoot(work.resolve()).baseline_file("mobility").is_file():
        raise SystemExit(f"{work}: no frozen baseline; run whole-day-prepare first")
    root = prepare_root(data, work, raw_days=[BENCH_DAY])
    timings: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timings[name] = timings.get(name, 0.0) + time.perf_counter() - t
        return wrapper

    # each step's method, by the name the results file gives the step
    names = {"ingest": "ingest", "bound": "bound_contributions", "noise": "noise",
             "build_baseline": "build_baseline", "report_day": "report", "gate": "gate",
             "publish": "publish"}
    for method, name in names.items():
        setattr(BoundReport, method, timed(name, getattr(BoundReport, method)))
    t0 = time.perf_counter()
    results = bind(REPORT, cfg, root, root.default_ledger_url).run_days(
        [BENCH_DAY], RunRequest(run_id="benchmark-day"))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds,
            "steps_s": {n: round(timings.get(n, 0.0), 3) for n in names.values()},
            "last_summary": results[-1].summary}


# -- profile ----------------------------------------------------------------------

def _read_profile(path: Path) -> dict[str, Any]:
    """Every operator (name, thread seconds, rows out, what it computes) and the spill
    statistics of one DuckDB JSON profile."""
    profile = json.loads(path.read_text())
    operators: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        info = node.get("extra_info") or {}
        what = info.get("Aggregates") or info.get("Projections") or info.get("Groups") or ""
        operators.append({"operator": node.get("name"), "seconds": node.get("timing", 0.0),
                          "rows": node.get("intermediate_rows") or 0,
                          "detail": str(what)[:110]})
        for child in node.get("children", []):
            walk(child)

    for node in profile.get("operator", []):
        walk(node)
    system = profile.get("system", {})
    return {"operators": operators,
            "cpu_s": profile.get("query", {}).get("cpu_time") or 0.0,
            "spilled_gib": system.get("total_bytes_spilled", 0) / 2**30,
            "peak_temp_dir_gib": system.get("peak_temp_dir_size", 0) / 2**30,
            "peak_buffer_gib": system.get("peak_buffer_memory", 0) / 2**30}


def profile_bounding(data: Path, work: Path, top: int = 10) -> dict[str, Any]:
    """The bound step exactly as ``ours-step`` runs it, with DuckDB's JSON
    profiler on every query it sends (the pipeline may bound a big day in several user parts): the
    operators' thread time summed over the queries, spill and peak buffer memory.

    The profiler is switched on by wrapping ``dp_ops.engine.duckdb.duckdb_connection`` and
    ``atomic_copy_to_parquet`` (looked up in that module at call time); nothing else in
    the pipeline changes."""
    import shutil

    import dp_ops.engine.duckdb as pipeline_bounding
    from dp_ops.reports.mobility.declaration import REPORT
    from dp_ops.reports.registry import bind
    from dp_ops.settings import load_execution_settings

    for name in ("duckdb_connection", "atomic_copy_to_parquet"):
        if not hasattr(pipeline_bounding, name):
            raise SystemExit(f"dp_ops.engine.duckdb.{name} is gone: update profile_bounding")
    root = prepare_root(data, work, clean_days=[BENCH_DAY])
    current = work / "profile-current.json"
    queries: list[dict[str, Any]] = []
    open_connection = pipeline_bounding.duckdb_connection
    copy_to_parquet = pipeline_bounding.atomic_copy_to_parquet

    def profiled_connection(*args: Any, **kwargs: Any) -> Any:
        con = open_connection(*args, **kwargs)
        con.execute("PRAGMA enable_profiling = 'json'")
        con.execute(f"PRAGMA profiling_output = '{current}'")
        return con

    def profiled_copy(con: Any, query: str, target: Path, params: Any = None) -> None:
        current.unlink(missing_ok=True)
        t = time.perf_counter()
        copy_to_parquet(con, query, target, params)
        seconds = time.perf_counter() - t
        if current.is_file():
            kept = work / f"profile-{len(queries):03d}.json"
            shutil.copyfile(current, kept)
            queries.append({"wall_s": seconds} | _read_profile(kept))

    pipeline_bounding.duckdb_connection = profiled_connection  # type: ignore[assignment]
    pipeline_bounding.atomic_copy_to_parquet = profiled_copy  # type: ignore[assignment]
    t0 = time.perf_counter()
    error = None
    try:
        bind(REPORT, MobilityConfig(), root, root.default_ledger_url).bound(BENCH_DAY)
    except Exception as exc:  # e.g. DuckDB out of memory: report it with what ran
        error = str(exc)[:300]
    seconds = time.perf_counter() - t0
    by_operator: dict[tuple[str, str], dict[str, Any]] = {}
    for q in queries:
        for o in q["operators"]:
            agg = by_operator.setdefault((o["operator"], o["detail"]),
                                         {"operator": o["operator"], "detail": o["detail"],
                                          "seconds": 0.0, "rows": 0})
            agg["seconds"] += o["seconds"]
            agg["rows"] += o["rows"]
    total = sum(a["seconds"] for a in by_operator.values())
    ranked = sorted(by_operator.values(), key=lambda a: a["seconds"], reverse=True)
    return {
        "seconds": seconds, "query_s": seconds, "error": error, "queries": len(queries),
        "query_wall_s": [round(q["wall_s"], 3) for q in queries],
        "cpu_s": sum(q["cpu_s"] for q in queries),
        "operator_seconds_total": total,
        "spilled_gib": sum(q["spilled_gib"] for q in queries),
        "peak_temp_dir_gib": max((q["peak_temp_dir_gib"] for q in queries), default=0.0),
        "peak_buffer_gib": max((q["peak_buffer_gib"] for q in queries), default=0.0),
        "top_operators": [a | {"share": a["seconds"] / total if total else 0.0}
                          for a in ranked[:top]],
        "execution": vars(load_execution_settings()),
    }


CONTENDERS: dict[str, Callable[[Path, Path], dict[str, Any]]] = {
    "ours-step": ours_step,
    "profile-bounding": profile_bounding,
    "ours-places": ours_places,
    "duckdb-floor": duckdb_floor,
    "exact-bounded": exact_bounded,
    "noise-rate": noise_rate,
    "whole-day-prepare": whole_day_prepare,
    "whole-day": whole_day,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("contender", choices=sorted(CONTENDERS))
    parser.add_argument("--data", type=Path, required=True, help="generated data directory")
    parser.add_argument("--work", type=Path, required=True, help="scratch data root")
    parser.add_argument("--result", type=Path, required=True, help="JSON result file")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    result = CONTENDERS[args.contender](args.data, args.work)
    args.result.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
