"""OpenDP 0.16 (Polars API, ``opendp.extras.polars``) doing the public-places computation.

Run with the peers venv (``benchmarks/.venv-peers/bin/python``; OpenDP 0.16 needs
``polars==1.36.1``, it fails to deserialize the plan with polars 2.x):

    python benchmarks/peer_opendp.py --data DIR --result FILE

What it does, all inside the timed section:

1. Reads the place stays with Polars and joins them to the public region table, so each
   stay carries its region at the three levels (row by row: data independent).
2. Bounds contributions with plain Polars, outside OpenDP's analysis, per level: distinct
   (user, category, region) rows (a user counts once per cell), then at most 4 of a user's
   cells kept uniformly at random (``int_range(len).shuffle().over(user_id) < 4``, the same
   expression OpenDP's own ``truncate_per_group(keep="sample")`` uses).
3. Per level, an OpenDP context over the bounded rows with ``unit_of(contributions=4)``
   (a user-day is at most 4 rows of the level) and epsilon 1.76, one query
   ``group_by(category, region_id).agg(dp.len(signed=True)).with_keys(public keys)``: the
   public keys are every (category, region) of the level, zeros included. OpenDP derives
   integer Laplace noise of scale 4 / 1.76 = 1 / 0.44 per cell, the pipeline's scale.
   Three levels are three contexts: 3 x 1.76 by basic composition, which we (not OpenDP)
   account for, as the pipeline's ledger does.

What OpenDP does not do here: it trusts the declared bound of 4 rows per user. It does
not check that the rows it gets were bounded (step 2 is ours, in Polars). OpenDP 0.16 can
enforce user-level bounds itself (``unit_of(identifier="user_id")`` with
``truncate_per_group`` / ``truncate_num_groups``), but with polars 1.36.1
``truncate_num_groups(keep="sample")`` fails ("multiple fields with name ... found": it
builds ``pl.struct(key.hash(), key)``, two fields with one name), and the deterministic
``keep="first"`` keeps a rank-``< k`` prefix of the groups, the same ones for every user,
which is not the pipeline's uniformly random choice. See README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import opendp.prelude as dp
import polars as pl

PLACE_CATEGORIES = ["retail", "recreation", "eateries", "groceries", "pharmacies", "transit",
                    "parks"]
LEVELS = (0, 1, 2)
EPSILON_PER_LEVEL = 4 * 0.44
MAX_PAIRS = 4


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    dp.enable_features("contrib")

    t0 = time.perf_counter()
    regions = pl.read_csv(args.data / "regions.csv",
                          schema_overrides={"region_id": pl.String, "parent_id": pl.String},
                          columns=["region_id", "parent_id", "level"])
    country = regions.filter(pl.col("level") == 0)["region_id"].item()
    finest = regions.filter(pl.col("level") == 2).select(
        pl.col("region_id").alias("r2"), pl.col("parent_id").alias("r1"),
        pl.lit(country).alias("r0"))
    stays = (pl.scan_parquet(args.data / "stays.parquet")
             .select("user_id", "region_id", "place_category")
             .filter(pl.col("place_category").is_in(PLACE_CATEGORIES))
             .join(finest.lazy(), left_on="region_id", right_on="r2", how="inner")
             .select("user_id", pl.col("place_category").alias("category"), "r0", "r1",
                     pl.col("region_id").alias("r2"))
             .collect())
    t_load = time.perf_counter()

    bound_s = 0.0
    dp_s = 0.0
    noisy_sum: dict[str, int] = {}
    cells = 0
    for lv in LEVELS:
        t = time.perf_counter()
        bounded = (stays.lazy()
                   .select("user_id", "category", pl.col(f"r{lv}").alias("region_id"))
                   .unique()
                   .filter(pl.int_range(pl.len()).shuffle().over("user_id") < MAX_PAIRS)
                   .collect())
        t_bounded = time.perf_counter()
        keys = pl.DataFrame({"category": PLACE_CATEGORIES}).join(
            regions.filter(pl.col("level") == lv).select("region_id"), how="cross")
        context = dp.Context.compositor(
            data=bounded.lazy(),
            privacy_unit=dp.unit_of(contributions=MAX_PAIRS),
            privacy_loss=dp.loss_of(epsilon=EPSILON_PER_LEVEL),
            split_evenly_over=1)
        query = (context.query()
                 .group_by("category", "region_id")
                 .agg(dp.len(signed=True))
                 .with_keys(keys))
        released = query.release().collect()
        bound_s += t_bounded - t
        dp_s += time.perf_counter() - t_bounded
        cells += released.height
        noisy_sum[str(lv)] = int(released["len"].sum())
        if lv == 0:
            scale = float(query.summarize()["scale"][0])
    t_done = time.perf_counter()

    summary = {
        "seconds": t_done - t0, "load_s": t_load - t0, "polars_bound_s": bound_s,
        "opendp_s": dp_s, "place_stays": stays.height, "place_cells": cells,
        "noise_scale": scale, "noisy_place_sum_by_level": noisy_sum,
        "versions": {"opendp": dp.__version__ if hasattr(dp, "__version__") else "0.16",
                     "polars": pl.__version__},
    }
    args.result.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
