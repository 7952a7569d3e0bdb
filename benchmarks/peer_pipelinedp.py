"""PipelineDP 0.3.1 (LocalBackend) doing the public-places computation.

Run with the peers venv (``benchmarks/.venv-peers/bin/python``), never the project's:

    python benchmarks/peer_pipelinedp.py --data DIR --result FILE

What it computes, per level (country, sub_region_1, sub_region_2): for every
(category, region) partition of the public domain (7 place categories x every region of
the level, zeros included), the number of distinct users with a place stay there, each
user contributing to at most 4 partitions per level (PipelineDP samples them uniformly at
random) and once per partition, with Laplace noise. Metric PRIVACY_ID_COUNT,
``max_partitions_contributed=4``, ``max_contributions_per_partition=1``, public
partitions, epsilon 1.76 per level (so 5.28 over three aggregations from one
NaiveBudgetAccountant, split evenly): the L1 sensitivity is 4, so the noise scale is
4 / 1.76 = 1 / 0.44, the same per cell as the pipeline's 0.44-per-cell discrete Laplace.
PipelineDP draws its Laplace noise through PyDP (Google's C++ library, secure
floating-point Laplace with granularity snapping) and returns floats.

Input handling, all inside the timed section: read the clean stays Parquet with pyarrow,
keep place stays, and turn them into Python tuples (LocalBackend works on Python
iterables); the finest-to-ancestor mapping is a dict built from the public region table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pipeline_dp
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

PLACE_CATEGORIES = ("retail", "recreation", "eateries", "groceries", "pharmacies", "transit",
                    "parks")
LEVELS = (0, 1, 2)
EPSILON_PER_LEVEL = 4 * 0.44
MAX_PAIRS = 4


def region_levels(regions_csv: Path) -> tuple[dict[int, dict[str, str]], dict[int, list[str]]]:
    """For each level, finest region -> its ancestor at that level; and the level's ids."""
    table = pacsv.read_csv(regions_csv, convert_options=pacsv.ConvertOptions(
        column_types={"region_id": "string", "parent_id": "string", "level": "int64"},
        strings_can_be_null=False, include_columns=["region_id", "parent_id", "level"]))
    ids = table["region_id"].to_pylist()
    parent = dict(zip(ids, table["parent_id"].to_pylist(), strict=True))
    level = dict(zip(ids, table["level"].to_pylist(), strict=True))
    finest = [r for r in ids if level[r] == 2]
    ancestor: dict[int, dict[str, str]] = {lv: {} for lv in LEVELS}
    for f in finest:
        node = f
        while node:
            ancestor[level[node]][f] = node
            node = parent[node]
    by_level = {lv: [r for r in ids if level[r] == lv] for lv in LEVELS}
    return ancestor, by_level


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    ancestor, by_level = region_levels(args.data / "regions.csv")
    table = pq.read_table(args.data / "stays.parquet",
                          columns=["user_id", "region_id", "place_category"])
    table = table.filter(pc.is_in(table["place_category"],
                                  value_set=pa.array(PLACE_CATEGORIES, pa.string())))
    rows = list(zip(table["user_id"].to_pylist(), table["place_category"].to_pylist(),
                    table["region_id"].to_pylist(), strict=True))
    del table
    t_load = time.perf_counter()

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON_PER_LEVEL * len(LEVELS),
                                                   total_delta=0)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    params = pipeline_dp.AggregateParams(
        metrics=[pipeline_dp.Metrics.PRIVACY_ID_COUNT],
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=MAX_PAIRS,
        max_contributions_per_partition=1)
    outputs = {}
    for lv in LEVELS:
        up = ancestor[lv]
        extractors = pipeline_dp.DataExtractors(
            privacy_id_extractor=lambda r: r[0],
            partition_extractor=lambda r, up=up: (r[1], up[r[2]]),
            value_extractor=lambda r: 0)
        public = [(c, r) for r in by_level[lv] for c in PLACE_CATEGORIES]
        outputs[lv] = engine.aggregate(rows, params, extractors, public_partitions=public)
    accountant.compute_budgets()
    results = {lv: list(out) for lv, out in outputs.items()}  # LocalBackend is lazy
    t_done = time.perf_counter()

    summary = {
        "seconds": t_done - t0, "load_s": t_load - t0, "dp_s": t_done - t_load,
        "place_stays": len(rows),
        "place_cells": sum(len(v) for v in results.values()),
        "noisy_place_sum_by_level": {str(lv): round(sum(m.privacy_id_count for _, m in v))
                                     for lv, v in results.items()},
        "versions": {"pipeline_dp": getattr(pipeline_dp, "__version__", "0.3.1")},
    }
    args.result.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
