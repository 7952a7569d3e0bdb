"""The Spark engine (``DP_ENGINE=spark``) runs the same bounding SQL as DuckDB and writes
the same true cell sums: the same rows, values and column types, unsharded and per user
shard, for both reports (docs/design.md, Scale).

The input is a generated day plus hand-made users for whom the pseudo-random choices
decide the output: more place pairs or symptoms than the bound (so some are dropped by the
md5 key), and equal hours or search counts in several regions (so the md5 key breaks the
tie). Hours are on a half-hour grid, exact in binary, so every engine's sums are exact
whatever order it adds in; equality then tests the bounding logic and the md5 keys.

One local[2] SparkSession serves the module: starting one is slow.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cached_roots import GeneratedRoots
from support.report_steps import MOBILITY_STEPS, SYMPTOMS_STEPS

from dp_ops.engine.base import BoundingSql
from dp_ops.engine.files import write_parquet_atomic
from dp_ops.engine.spark import SparkEngine, spark_parameters
from dp_ops.layout import DataRoot
from dp_ops.regions import ancestors, read_regions
from dp_ops.reports.mobility import bounding as mobility_bounding
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.settings import ExecutionSettings
from dp_ops.sources.location_history import ALL_STAY_CATEGORIES, PLACE_CATEGORIES
from dp_ops.sources.location_history import NAME as LOCATION_SOURCE
from dp_ops.sources.search_activity import NAME as SEARCH_SOURCE
from dp_ops.sources.search_activity import read_symptoms, symptom_list
from dp_ops.steps.bound import combine_shards, shard_file
from dp_ops.steps.ingest import ingest_sources
from dp_ops.steps.result import StepResult

DAY = date(2020, 3, 10)
EMPTY_DAY = date(2020, 3, 11)
SHARDS = 3
MOBILITY = MobilityConfig()
SYMPTOMS = SymptomsConfig()
SOURCE = {"mobility": LOCATION_SOURCE, "symptoms": SEARCH_SOURCE}
# a session setting the Spark engine changes while a bounding query runs, and puts back
CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"


def _java_available() -> bool:
    return bool(os.environ.get("JAVA_HOME") or shutil.which("java"))


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    if not _java_available():
        pytest.skip("Java not found (no java on PATH, no JAVA_HOME): the Spark engine "
                    "needs Java 17+")
    from dp_ops.engine.spark import spark_session

    session = spark_session(ExecutionSettings(engine="spark", spark_master="local[2]"))
    yield session
    session.stop()


# -- input ---------------------------------------------------------------------------

def _finest_by_parent(root: DataRoot) -> list[str]:
    """Six finest regions, three under each of two parents."""
    regions = read_regions(root.regions_csv)
    finest = regions[~regions["region_id"].isin(regions["parent_id"])]
    chosen: list[str] = []
    for _, group in finest.groupby("parent_id", sort=True):
        if len(group) >= 3:
            chosen += sorted(group["region_id"])[:3]
        if len(chosen) == 6:
            return chosen
    raise AssertionError("the demo region table should have two parents with 3 children")


def _hard_stays(regions: list[str]) -> pd.DataFrame:
    rng = np.random.default_rng(2020)
    rows: list[tuple[str, str, str, float]] = []
    # every place category in every region: 42 pairs at level 2, far over the bound
    rows += [("many-pairs", r, c, 1.0) for r in regions for c in PLACE_CATEGORIES]
    # equal home, work and total hours in two or three regions: the md5 key picks one
    for u in range(40):
        home, work = float(rng.integers(1, 17)) / 2, float(rng.integers(3, 9)) / 2
        for r in rng.choice(regions, size=int(rng.integers(2, 4)), replace=False):
            rows += [(f"tie{u:02d}", str(r), "residential", home),
                     (f"tie{u:02d}", str(r), "workplace", work)]
    # 10 + 10 + 10 h at home: clamped to 24 h
    rows += [("clamped", regions[0], "residential", 10.0)] * 3
    # random users on a half-hour grid over few regions: many ties and big pair sets
    for u in range(150):
        for _ in range(int(rng.integers(1, 30))):
            rows.append((f"hard{u:03d}", str(rng.choice(regions)),
                         str(rng.choice(ALL_STAY_CATEGORIES)),
                         float(rng.integers(1, 9)) / 2))
    return pd.DataFrame(rows, columns=["user_id", "region_id", "place_category",
                                       "dwell_hours"])


def _hard_searches(regions: list[str], symptoms: list[str]) -> pd.DataFrame:
    rng = np.random.default_rng(2021)
    rows: list[tuple[str, str, str | None]] = []
    # ten symptoms in one region: over max_symptoms_per_day, some dropped at random
    rows += [("many-symptoms", regions[0], s) for s in symptoms[:10]]
    # as many searches in two or three regions: a tie the md5 key breaks
    for u in range(40):
        n = int(rng.integers(1, 4))
        for r in rng.choice(regions, size=int(rng.integers(2, 4)), replace=False):
            rows += [(f"tie{u:02d}", str(r), str(s)) for s in rng.choice(symptoms[:8], size=n)]
    for u in range(150):
        for _ in range(int(rng.integers(1, 12))):
            symptom = None if rng.random() < 0.2 else str(rng.choice(symptoms[:15]))
            rows.append((f"hard{u:03d}", str(rng.choice(regions)), symptom))
    return pd.DataFrame(rows, columns=["user_id", "region_id", "symptom"])


def _append_clean(root: DataRoot, source: str, day: date, extra: pd.DataFrame) -> None:
    path = root.clean_partition(source, day) / "part.parquet"
    clean = pq.read_table(path)
    if "place_category" in extra:
        extra = extra.assign(place_id=[f"hard-place-{i}" for i in range(len(extra))])
    added = pa.Table.from_pandas(extra[clean.schema.names], schema=clean.schema,
                                 preserve_index=False)
    write_parquet_atomic(pa.concat_tables([clean, added]), path)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, generated_roots: GeneratedRoots) -> DataRoot:
    root = DataRoot(generated_roots.copy(tmp_path_factory.mktemp("spark_engine") / "data",
                                         users=1500, seed=3, start=DAY, end=EMPTY_DAY))
    for day in (DAY, EMPTY_DAY):
        ingest_sources(root, (LOCATION_SOURCE, SEARCH_SOURCE), day)
    regions = _finest_by_parent(root)
    _append_clean(root, LOCATION_SOURCE, DAY, _hard_stays(regions))
    _append_clean(root, SEARCH_SOURCE, DAY, _hard_searches(regions,
                                                           read_symptoms(symptom_list(root))))
    for source in (LOCATION_SOURCE, SEARCH_SOURCE):  # a day without a single clean row
        path = root.clean_partition(source, EMPTY_DAY) / "part.parquet"
        write_parquet_atomic(pq.read_table(path).slice(0, 0), path)
    return root


# -- running both engines --------------------------------------------------------------

def _bound(report: str) -> Callable[..., StepResult]:
    steps = MOBILITY_STEPS if report == "mobility" else SYMPTOMS_STEPS
    cfg = MOBILITY if report == "mobility" else SYMPTOMS

    def run(root: DataRoot, day: date, **kw: object) -> StepResult:
        return steps.bound_contributions(root, cfg, day, **kw)  # type: ignore[arg-type]

    return run


def _engine(monkeypatch: pytest.MonkeyPatch, engine: str, shards: int = 1) -> None:
    # as in Airflow, the workers' environment selects the engine and the shard count
    monkeypatch.setenv("DP_ENGINE", engine)
    monkeypatch.setenv("DP_BOUNDING_SHARDS", str(shards))
    monkeypatch.setenv("DP_SPARK_MASTER", "local[2]")
    for name in ("DP_EXECUTION_CONFIG", "DP_SPARK_REMOTE"):
        monkeypatch.delenv(name, raising=False)


def _cells(path: Path) -> pa.Table:
    return pq.read_table(path).sort_by([("level", "ascending"), ("region_id", "ascending"),
                                        ("metric", "ascending")])


def _assert_same(spark_file: pa.Table, duckdb_file: pa.Table) -> None:
    def fields(t: pa.Table) -> list[tuple[str, pa.DataType, bool]]:
        return [(f.name, f.type, f.nullable) for f in t.schema]

    assert fields(spark_file) == fields(duckdb_file)
    assert fields(duckdb_file) == [("level", pa.int8(), True), ("region_id", pa.string(), True),
                                   ("metric", pa.string(), True), ("value", pa.int64(), True)]
    assert spark_file.num_rows == duckdb_file.num_rows
    assert spark_file.equals(duckdb_file)


def _no_leftovers(path: Path) -> None:
    assert not list(path.parent.glob(".tmp-*")), "a temporary file or directory was left"


# -- tests -------------------------------------------------------------------------------

def test_parameters_become_spark_markers_outside_literals_and_comments() -> None:
    sql, args = spark_parameters(
        "-- $day in a comment\nSELECT '$x' || $prefix, /* $y */ a FROM t WHERE d = $day",
        {"day": "2020-03-10", "prefix": "p", "unused": 1})
    assert sql == ("-- $day in a comment\nSELECT '$x' || :prefix, /* $y */ a FROM t "
                   "WHERE d = :day")
    assert args == {"day": "2020-03-10", "prefix": "p"}
    with pytest.raises(KeyError, match="salt"):
        spark_parameters("SELECT $salt", {})


@pytest.mark.slow
def test_hard_cases_are_in_the_input(root: DataRoot) -> None:
    """The equality tests below mean something only if the md5 keys decide the output."""
    anc = ancestors(read_regions(root.regions_csv))
    stays = pq.read_table(root.clean_partition(LOCATION_SOURCE, DAY) / "part.parquet")
    by_level = stays.to_pandas().merge(anc, left_on="region_id", right_on="finest_region_id",
                                       suffixes=("_finest", ""))
    pairs = by_level[by_level["place_category"].isin(PLACE_CATEGORIES)].drop_duplicates(
        ["user_id", "level", "place_category", "region_id"])
    over = pairs.groupby(["user_id", "level"]).size() > MOBILITY.max_place_pairs
    assert over.sum() > 50, "users with more place pairs than the bound"
    hours = by_level.assign(
        home=by_level["dwell_hours"].where(by_level["place_category"] == "residential"),
        work=by_level["dwell_hours"].where(by_level["place_category"] == "workplace"),
    ).groupby(["user_id", "level", "region_id"])[["home", "work", "dwell_hours"]].sum()
    for column in ("home", "work", "dwell_hours"):
        top = hours[column].groupby(["user_id", "level"]).transform("max")
        tied = ((hours[column] == top) & (top > 0)).groupby(["user_id", "level"]).sum() > 1
        assert tied.sum() > 10, f"users whose {column} region is a tie"

    searches = pq.read_table(root.clean_partition(SEARCH_SOURCE, DAY) / "part.parquet")
    counts = searches.to_pandas().groupby(["user_id", "region_id"]).size()
    top_count = counts.groupby("user_id").transform("max")
    assert ((counts == top_count).groupby("user_id").sum() > 1).sum() > 10, "region ties"
    symptoms = searches.to_pandas().dropna().drop_duplicates(["user_id", "symptom"])
    assert (symptoms.groupby("user_id").size() > SYMPTOMS.max_symptoms_per_day).sum() > 10


@pytest.mark.slow
@pytest.mark.parametrize("report", ["mobility", "symptoms"])
def test_spark_writes_what_duckdb_writes(spark: object, root: DataRoot, report: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    bound = _bound(report)
    target = root.bounded_file(report, DAY)
    _engine(monkeypatch, "duckdb")
    assert "(duckdb)" in bound(root, DAY).summary
    duckdb_cells = _cells(target)
    assert duckdb_cells.num_rows > 200

    _engine(monkeypatch, "spark")
    conf = spark.conf  # type: ignore[attr-defined]
    conf.set(CACHE_COMPRESSED, "true")  # the query's own setting must not outlive it
    assert "(spark)" in bound(root, DAY).summary
    assert conf.get(CACHE_COMPRESSED, None) == "true"
    _assert_same(_cells(target), duckdb_cells)
    _no_leftovers(target)
    conf.unset(CACHE_COMPRESSED)
    assert "(spark)" in bound(root, DAY).summary
    assert conf.get(CACHE_COMPRESSED, None) is None


def test_spark_runs_the_spark_cell_sums_query() -> None:
    """The mobility tests here compare DuckDB's mobility/cell_sums.sql with what the Spark
    engine runs: its own mobility/cell_sums_spark.sql, not the per-user query."""
    bounding = mobility_bounding.BOUNDING
    assert bounding.cell_sums_rows("s", "spark") == mobility_bounding.spark_cell_sums_sql("s")
    assert bounding.cell_sums_rows("s", "duckdb") == mobility_bounding.cell_sums_sql("s")
    assert BoundingSql(bounding.contributions).cell_sums_rows("s", "spark") == (
        mobility_bounding.bounded_contributions_sql("s"))


@pytest.mark.slow
def test_spark_per_user_query_writes_what_duckdb_writes(spark: object, root: DataRoot,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """The per-user mobility query (the statement of the bounds) on Spark gives the cells
    that DuckDB's cell-sums query gives: the Spark cell-sums query's reference, on the same
    hard users."""
    target = root.bounded_file("mobility", DAY)
    _engine(monkeypatch, "duckdb")
    _bound("mobility")(root, DAY)
    duckdb_cells = _cells(target)
    per_user_only = BoundingSql(mobility_bounding.BOUNDING.contributions)
    settings = ExecutionSettings(engine="spark", spark_master="local[2]")
    SparkEngine(settings).bound_to_parquet(
        root, root.clean_partition(LOCATION_SOURCE, DAY) / "part.parquet", target,
        ancestors(read_regions(root.regions_csv)), per_user_only,
        mobility_bounding.bounding_params(MOBILITY, DAY), None)
    _assert_same(_cells(target), duckdb_cells)
    _no_leftovers(target)


@pytest.mark.slow
@pytest.mark.parametrize("report", ["mobility", "symptoms"])
def test_spark_shards_equal_duckdb_shards_and_add_up(spark: object, root: DataRoot,
                                                     report: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    bound = _bound(report)
    _engine(monkeypatch, "duckdb")
    bound(root, DAY)
    whole = _cells(root.bounded_file(report, DAY))

    for k in range(SHARDS):
        part = shard_file(root, report, DAY, k, SHARDS)
        _engine(monkeypatch, "duckdb", SHARDS)
        bound(root, DAY, shard=k)
        duckdb_part = _cells(part)
        assert duckdb_part.num_rows > 0, "every shard should hold some users"
        _engine(monkeypatch, "spark", SHARDS)
        bound(root, DAY, shard=k)
        _assert_same(_cells(part), duckdb_part)
    # the Spark shards (the last written) add up to the unsharded sums
    root.bounded_file(report, DAY).unlink()
    combine_shards(root, report, DAY, SHARDS)
    _assert_same(_cells(root.bounded_file(report, DAY)), whole)
    _no_leftovers(root.bounded_file(report, DAY))


@pytest.mark.slow
def test_a_day_without_rows_gives_the_same_empty_file(spark: object, root: DataRoot,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    target = root.bounded_file("mobility", EMPTY_DAY)
    _engine(monkeypatch, "duckdb")
    _bound("mobility")(root, EMPTY_DAY)
    duckdb_cells = _cells(target)
    assert duckdb_cells.num_rows == 0
    _engine(monkeypatch, "spark")
    _bound("mobility")(root, EMPTY_DAY)
    _assert_same(_cells(target), duckdb_cells)


def test_a_query_splits_into_its_ctes_and_statement() -> None:
    """The Spark engine computes each CTE of a bounding query once (a view, persisted when
    read twice): the split respects comments, quotes and nested parentheses."""
    from dp_ops.engine.spark import split_ctes

    query = """-- a comment with WITH x AS (
    WITH a AS (SELECT '(' AS p, ")" AS q /* ) */ FROM t), b AS (
        SELECT * FROM (SELECT 1 AS one) AS s -- )
        JOIN a ON 'it''s (' <> a.p
    )
    SELECT * FROM a JOIN b ON TRUE"""
    parts, statement = split_ctes(query)
    assert [name for name, _ in parts] == ["a", "b"]
    assert parts[0][1] == """SELECT '(' AS p, ")" AS q /* ) */ FROM t"""
    assert "JOIN a ON 'it''s (' <> a.p" in parts[1][1]
    assert statement == "SELECT * FROM a JOIN b ON TRUE"
    assert split_ctes("SELECT 1") == ([], "SELECT 1")
