"""The Spark engine bounds as DuckDB does, cell by cell, on a tiny input: the small twin
of ``tests/integration/test_spark_engine.py`` (which runs a generated day, per user shard
too). Slow tier as well: starting the JVM alone takes longer than the inner loop
(``make test-fast``) can give one module.

The input is a few hundred clean rows made by hand, where the bounding's choices decide
the output: every user over some bound (more place pairs or symptoms than allowed, hours
clamped at 24 h), ties in home, work and total hours and in search counts across regions
(broken by the md5 key), and searches without a symptom. Hours are on a half-hour grid,
exact in binary, so the sums are exact whatever order an engine adds in; equality then
tests the bounding logic and the md5 keys. Both engines read the same clean partition and
write the day's true cell sums; the test compares the two files' schemas and rows.

One local[1] SparkSession serves the test session (``spark`` in ``conftest.py``).
Deterministic (fixed seeds); no test here is statistical.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dp_demo.geography import demo_regions
from support.report_steps import MOBILITY_STEPS, SYMPTOMS_STEPS

from dp_ops.engine.files import write_parquet_atomic
from dp_ops.layout import DataRoot
from dp_ops.regions import write_regions
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.sources.location_history import ALL_STAY_CATEGORIES, PLACE_CATEGORIES
from dp_ops.sources.location_history import NAME as LOCATION_SOURCE
from dp_ops.sources.search_activity import NAME as SEARCH_SOURCE
from dp_ops.sources.search_activity import symptom_list
from dp_ops.steps.result import StepResult

pytestmark = pytest.mark.slow

DAY = date(2020, 3, 10)
MOBILITY = MobilityConfig()
SYMPTOMS = SymptomsConfig()
SYMPTOM_LIST = [f"Symptom {i:02d}" for i in range(15)]


def _finest(regions: pd.DataFrame) -> list[str]:
    """Six finest regions, three under each of two parents (ties across parents and
    within one)."""
    finest = regions[~regions["region_id"].isin(regions["parent_id"])]
    chosen: list[str] = []
    for _, group in finest.groupby("parent_id", sort=True):
        if len(group) >= 3:
            chosen += sorted(group["region_id"])[:3]
        if len(chosen) == 6:
            return chosen
    raise AssertionError("the demo region table should have two parents with 3 children")


def _stays(regions: list[str]) -> pd.DataFrame:
    rng = np.random.default_rng(2020)
    rows: list[tuple[str, str, str, float]] = []
    rows += [("many-pairs", r, c, 1.0) for r in regions for c in PLACE_CATEGORIES]
    for u in range(25):  # equal home and work hours in two or three regions
        home, work = float(rng.integers(1, 17)) / 2, float(rng.integers(3, 9)) / 2
        for r in rng.choice(regions, size=int(rng.integers(2, 4)), replace=False):
            rows += [(f"tie{u:02d}", str(r), "residential", home),
                     (f"tie{u:02d}", str(r), "workplace", work)]
    rows += [("clamped", regions[0], "residential", 10.0)] * 3  # 30 h at home
    for u in range(30):
        for _ in range(int(rng.integers(1, 12))):
            rows.append((f"hard{u:03d}", str(rng.choice(regions)),
                         str(rng.choice(ALL_STAY_CATEGORIES)), float(rng.integers(1, 9)) / 2))
    frame = pd.DataFrame(rows, columns=["user_id", "region_id", "place_category",
                                        "dwell_hours"])
    return frame.assign(place_id=[f"place-{i}" for i in range(len(frame))])


def _searches(regions: list[str]) -> pd.DataFrame:
    rng = np.random.default_rng(2021)
    rows: list[tuple[str, str, str | None]] = []
    rows += [("many-symptoms", regions[0], s) for s in SYMPTOM_LIST[:10]]
    for u in range(25):  # as many searches in two or three regions
        n = int(rng.integers(1, 4))
        for r in rng.choice(regions, size=int(rng.integers(2, 4)), replace=False):
            rows += [(f"tie{u:02d}", str(r), str(s)) for s in rng.choice(SYMPTOM_LIST[:8], n)]
    for u in range(30):
        for _ in range(int(rng.integers(1, 10))):
            symptom = None if rng.random() < 0.2 else str(rng.choice(SYMPTOM_LIST))
            rows.append((f"hard{u:03d}", str(rng.choice(regions)), symptom))
    return pd.DataFrame(rows, columns=["user_id", "region_id", "symptom"])


def _clean_schema(source: str) -> pa.Schema:
    """The clean partition's columns as ingest writes them."""
    if source == LOCATION_SOURCE:
        return pa.schema([("user_id", pa.string()), ("region_id", pa.string()),
                          ("place_id", pa.string()), ("place_category", pa.string()),
                          ("dwell_hours", pa.float64())])
    return pa.schema([("user_id", pa.string()), ("region_id", pa.string()),
                      ("symptom", pa.string())])


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> DataRoot:
    root = DataRoot(tmp_path_factory.mktemp("spark_fast"))
    regions = demo_regions()
    write_regions(regions, root.regions_csv)
    symptom_list(root).parent.mkdir(parents=True, exist_ok=True)
    symptom_list(root).write_text("\n".join(SYMPTOM_LIST) + "\n")
    finest = _finest(regions)
    for source, frame in ((LOCATION_SOURCE, _stays(finest)), (SEARCH_SOURCE, _searches(finest))):
        path = root.clean_partition(source, DAY) / "part.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        schema = _clean_schema(source)
        write_parquet_atomic(pa.Table.from_pandas(frame[schema.names], schema=schema,
                                                  preserve_index=False), path)
    return root


def _bound(report: str) -> Callable[[DataRoot], StepResult]:
    if report == "mobility":
        return lambda root: MOBILITY_STEPS.bound_contributions(root, MOBILITY, DAY)
    return lambda root: SYMPTOMS_STEPS.bound_contributions(root, SYMPTOMS, DAY)


def _engine(monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    monkeypatch.setenv("DP_ENGINE", engine)
    monkeypatch.setenv("DP_BOUNDING_SHARDS", "1")
    monkeypatch.setenv("DP_SPARK_MASTER", "local[1]")
    for name in ("DP_EXECUTION_CONFIG", "DP_SPARK_REMOTE"):
        monkeypatch.delenv(name, raising=False)


def _cells(path: Path) -> pa.Table:
    return pq.read_table(path).sort_by([("level", "ascending"), ("region_id", "ascending"),
                                        ("metric", "ascending")])


@pytest.mark.parametrize("report", ["mobility", "symptoms"])
def test_spark_bounds_the_tiny_input_as_duckdb_does(spark: object, root: DataRoot,
                                                    report: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    bound, target = _bound(report), root.bounded_file(report, DAY)
    _engine(monkeypatch, "duckdb")
    assert "(duckdb)" in bound(root).summary
    duckdb_cells = _cells(target)
    assert duckdb_cells.num_rows > 50
    _engine(monkeypatch, "spark")
    assert "(spark)" in bound(root).summary
    spark_cells = _cells(target)
    assert spark_cells.schema == duckdb_cells.schema
    mismatched = spark_cells.to_pandas().merge(
        duckdb_cells.to_pandas(), on=["level", "region_id", "metric"], how="outer",
        suffixes=("_spark", "_duckdb"), indicator=True)
    differ = mismatched[(mismatched["_merge"] != "both")
                        | (mismatched["value_spark"] != mismatched["value_duckdb"])]
    assert differ.empty, f"cells where the engines disagree:\n{differ.head(10)}"
    assert spark_cells.equals(duckdb_cells)
