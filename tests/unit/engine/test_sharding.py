"""Sharded bounding (users split by md5(user_id), one shard per mapped task, partial sums
added per cell) gives exactly the unsharded true aggregates, for both reports."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest
from dp_demo.generator import generate
from support.report_steps import MOBILITY_STEPS, SYMPTOMS_STEPS

from dp_ops.engine.sql import render_sql
from dp_ops.errors import BoundingError
from dp_ops.layout import DataRoot
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.settings import ExecutionSettings, load_execution_settings
from dp_ops.steps.bound import combine_shards, shard_file
from dp_ops.steps.ingest import ingest_sources

bound_mobility = MOBILITY_STEPS.bound_contributions
bound_symptoms = SYMPTOMS_STEPS.bound_contributions

DAY = date(2020, 3, 10)
SHARDS = 3


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> DataRoot:
    root = DataRoot(tmp_path_factory.mktemp("sharding"))
    generate(root, DAY, DAY, users=3000, seed=5)
    ingest_sources(root, ("location_history", "search_activity"), DAY)
    return root


def _cells(path: Path) -> pd.DataFrame:
    return pq.read_table(path).to_pandas().sort_values(
        ["level", "region_id", "metric"]).reset_index(drop=True)


def _settings(monkeypatch: pytest.MonkeyPatch, shards: int) -> ExecutionSettings:
    # the noise step reads the shard count from the environment, as Airflow tasks do
    monkeypatch.setenv("DP_BOUNDING_SHARDS", str(shards))
    return load_execution_settings()


@pytest.mark.parametrize("report", ["mobility", "symptoms"])
def test_sharded_bounding_equals_unsharded(root: DataRoot, report: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    bound = {"mobility": (bound_mobility, MobilityConfig()),
             "symptoms": (bound_symptoms, SymptomsConfig())}[report]
    fn, cfg = bound
    _settings(monkeypatch, 1)
    fn(root, cfg, DAY)  # type: ignore[operator]
    whole = _cells(root.bounded_file(report, DAY))
    assert len(whole) > 100 and whole["value"].sum() > 0

    _settings(monkeypatch, SHARDS)
    root.bounded_file(report, DAY).unlink()
    # as Airflow runs it: one call per shard (mapped tasks, in any order), then combine
    for k in reversed(range(SHARDS)):
        fn(root, cfg, DAY, shard=k)  # type: ignore[operator]
    parts = [_cells(shard_file(root, report, DAY, k, SHARDS)) for k in range(SHARDS)]
    assert all(len(p) > 0 for p in parts), "every shard should hold some users"
    combine_shards(root, report, DAY, SHARDS)
    pd.testing.assert_frame_equal(_cells(root.bounded_file(report, DAY)), whole)

    # and in-process (shard=None): all shards, then combined, the same again
    root.bounded_file(report, DAY).unlink()
    fn(root, cfg, DAY)  # type: ignore[operator]
    pd.testing.assert_frame_equal(_cells(root.bounded_file(report, DAY)), whole)


def test_shards_partition_the_users(root: DataRoot) -> None:
    clean = root.clean_partition("location_history", DAY) / "part.parquet"
    con = duckdb.connect()
    relation = f"read_parquet('{clean}')"
    users = set(con.execute(f"SELECT DISTINCT user_id FROM {relation}").fetchnumpy()["user_id"])
    seen: list[set[str]] = []
    for k in range(SHARDS):
        sql = f"SELECT DISTINCT user_id FROM ({render_sql('shard_stays', rows=relation)})"
        seen.append(set(con.execute(sql, {"shards": SHARDS, "shard": k})
                        .fetchnumpy()["user_id"]))
    assert set().union(*seen) == users
    assert sum(len(s) for s in seen) == len(users)  # disjoint
    # roughly balanced: each shard within 20% of a third (3000 users: ~10 sigma margin)
    assert all(abs(len(s) - len(users) / SHARDS) < 0.2 * len(users) / SHARDS for s in seen)


def test_a_missing_shard_is_refused_not_undercounted(root: DataRoot,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _settings(monkeypatch, SHARDS)
    for k in range(SHARDS):
        bound_mobility(root, MobilityConfig(), DAY, shard=k)
    shard_file(root, "mobility", DAY, 1, SHARDS).unlink()
    with pytest.raises(BoundingError, match=r"1 of 3 shard file\(s\) missing.*shard-00001"):
        combine_shards(root, "mobility", DAY, SHARDS)


def test_shard_out_of_range_and_bad_settings_are_named(root: DataRoot,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _settings(monkeypatch, SHARDS)
    with pytest.raises(ValueError, match=r"shard=3: expected 0\.\.2"):
        bound_mobility(root, MobilityConfig(), DAY, shard=3)
    from dp_ops.errors import ConfigError

    with pytest.raises(ConfigError, match="DP_BOUNDING_SHARDS='two'"):
        load_execution_settings({"DP_BOUNDING_SHARDS": "two"})
    with pytest.raises(ConfigError, match="engine='polars'"):
        load_execution_settings({"DP_ENGINE": "polars"})
    with pytest.raises(ConfigError, match="bounding_shards=0"):
        load_execution_settings({"DP_BOUNDING_SHARDS": "0"})


def test_execution_settings_from_a_json_file_and_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "execution.json"
    config.write_text('{"bounding_shards": 4, "duckdb_memory_limit": "2GB"}')
    settings = load_execution_settings({"DP_EXECUTION_CONFIG": str(config),
                                        "DP_BOUNDING_SHARDS": "8"})
    assert (settings.bounding_shards, settings.duckdb_memory_limit) == (8, "2GB")
    config.write_text('{"shards": 4}')
    from dp_ops.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown field 'shards'"):
        load_execution_settings({"DP_EXECUTION_CONFIG": str(config)})
    config.write_text("[1]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_execution_settings({"DP_EXECUTION_CONFIG": str(config)})


@pytest.mark.parametrize("report", ["mobility", "symptoms"])
def test_a_big_day_bounded_in_user_parts_equals_one_pass(root: DataRoot, report: str,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """DuckDB bounds a day with more than duckdb_rows_per_part rows in user parts, one after
    the other (flat memory); the cell sums are exactly those of one pass."""
    from dp_ops.engine.duckdb import duckdb_parts

    fn, cfg = {"mobility": (bound_mobility, MobilityConfig()),
               "symptoms": (bound_symptoms, SymptomsConfig())}[report]
    _settings(monkeypatch, 1)
    monkeypatch.delenv("DP_DUCKDB_ROWS_PER_PART", raising=False)
    fn(root, cfg, DAY)  # type: ignore[operator]
    one_pass = _cells(root.bounded_file(report, DAY))
    monkeypatch.setenv("DP_DUCKDB_ROWS_PER_PART", "1500")
    source = "location_history" if report == "mobility" else "search_activity"
    parts = duckdb_parts(root.clean_partition(source, DAY) / "part.parquet",
                         load_execution_settings())
    assert parts >= 3
    root.bounded_file(report, DAY).unlink()
    fn(root, cfg, DAY)  # type: ignore[operator]
    pd.testing.assert_frame_equal(_cells(root.bounded_file(report, DAY)), one_pass)
    leftovers = [p.name for p in root.bounded_file(report, DAY).parent.iterdir()
                 if p.name.startswith(".")]
    assert leftovers == []


def test_bounding_reads_one_version_of_a_clean_file_replaced_meanwhile(
        root: DataRoot, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two runs of one day started together: one's ingest renames a new clean file over
    the one the other's bounding reads (DuckDB opens it to bind and again to scan; it
    failed with "don't know what type"). The bounding step reads a hard link to the file
    as it was when the step began, and leaves no link behind."""
    import os
    import shutil

    from dp_ops.engine.duckdb import DuckDBEngine

    _settings(monkeypatch, 1)
    clean = root.clean_partition("location_history", DAY) / "part.parquet"
    bound_mobility(root, MobilityConfig(), DAY)
    before = _cells(root.bounded_file("mobility", DAY))
    saved = tmp_path / "saved.parquet"
    shutil.copyfile(clean, saved)
    other = pq.read_table(clean).slice(0, 50)  # another run's (much smaller) clean file
    real = DuckDBEngine.bound_to_parquet

    def replaced_meanwhile(self: DuckDBEngine, r: DataRoot, path: Path, *args: object) -> None:
        replacement = clean.with_name("replacement.parquet")
        pq.write_table(other, replacement)
        os.replace(replacement, clean)  # as ingest replaces it: one rename
        real(self, r, path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(DuckDBEngine, "bound_to_parquet", replaced_meanwhile)
    try:
        bound_mobility(root, MobilityConfig(), DAY)
        pd.testing.assert_frame_equal(_cells(root.bounded_file("mobility", DAY)), before)
        assert not list(clean.parent.glob("*.pinned-*"))
    finally:
        os.replace(saved, clean)
