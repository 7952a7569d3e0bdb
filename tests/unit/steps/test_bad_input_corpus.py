"""The bad-input corpus (``tests/data/bad/``, issue 6): every case has its documented
outcome under the real ingestion and bounding, and nothing bad reaches an aggregate.

For each case a data root is built from the corpus's valid base plus the case's files,
and the case's step runs:

- ``quarantine``: exactly the listed rows are quarantined, with exactly their reason;
  the clean rows are every other input row (nothing lost, nothing bad kept); the bounded
  aggregates equal those of the valid rows alone;
- ``fail``: the step raises, naming the file (full path) and the problem, with no user
  id or row in the message, and writes no clean rows;
- ``accept`` / ``bounded``: every row is clean; for ``bounded`` the user's change to the
  bounded aggregates is at most the per-user bound at every level.

Every outcome test runs on both engines: DuckDB (the default) and Spark (``DP_ENGINE=spark``,
one local[2] SparkSession for the module; slow, so in the integration tier), which must
quarantine the same rows for the same reasons, keep the same clean rows, bound them to
the same cell sums and refuse the same files with the same message.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support.report_steps import MOBILITY_STEPS as mobility_steps
from support.report_steps import SYMPTOMS_STEPS as symptoms_steps

from dp_ops.engine.duckdb import register_ancestors
from dp_ops.errors import IngestError, RegionTableError
from dp_ops.layout import DataRoot
from dp_ops.regions import ancestors, read_regions
from dp_ops.reports.mobility import bounding as mobility_bounding
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.symptoms import bounding as symptoms_bounding
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.settings import ExecutionSettings, execution_settings_bound
from dp_ops.sources.location_history import SOURCE as LOCATION_HISTORY
from dp_ops.sources.search_activity import SOURCE as SEARCH_ACTIVITY
from dp_ops.steps.ingest import ingest_source
from dp_ops.steps.result import StepResult

CORPUS = Path(__file__).resolve().parents[2] / "data" / "bad"
MANIFEST: dict[str, Any] = json.loads((CORPUS / "cases.json").read_text())
DAY = date.fromisoformat(MANIFEST["day"])
CASES: list[dict[str, Any]] = MANIFEST["cases"]
SOURCES = ("location_history", "search_activity", "regions", "symptoms")
ERRORS: dict[str, type[Exception]] = {"IngestError": IngestError,
                                      "RegionTableError": RegionTableError}
# Every user id in the corpus starts with "user" (the integer one is 918273645001); the
# extra columns hold an email address and a query text. None may reach an error message.
PRIVATE_MARKERS = ("user-", "user\x00", "918273645", "@example.com", "cough at night")

MOBILITY_CFG = MobilityConfig()
SYMPTOMS_CFG = SymptomsConfig()


class Report:
    """What the tests need of each report: its source, steps and bounding SQL."""

    def __init__(self, name: str, source: str, columns: pa.Schema,
                 ingest: Callable[[DataRoot, date], StepResult],
                 bound: Callable[[DataRoot], StepResult],
                 aggregates_sql: Callable[[str], str], params: dict[str, object],
                 bounds: dict[str, int]) -> None:
        self.name, self.source, self.columns = name, source, columns
        self.ingest, self.bound = ingest, bound
        self.aggregates_sql, self.params, self.bounds = aggregates_sql, params, bounds


MOBILITY = Report(
    "mobility", LOCATION_HISTORY.name,
    pa.schema([("user_id", pa.string()), ("region_id", pa.string()),
               ("place_id", pa.string()), ("place_category", pa.string()),
               ("dwell_hours", pa.float64())]),
    lambda root, day: ingest_source(root, LOCATION_HISTORY, day),
    lambda root: mobility_steps.bound_contributions(root, MOBILITY_CFG, DAY),
    mobility_bounding.cell_aggregates_sql, mobility_bounding.bounding_params(MOBILITY_CFG, DAY),
    # the most one user-day changes each metric group at one level (L1)
    {"places": MOBILITY_CFG.max_place_pairs, "workplaces": 1, "residential_users": 1,
     "contributors": 1, "residential_sum_units": 12 * MOBILITY_CFG.residential_grid_per_hour})
SYMPTOMS = Report(
    "symptoms", SEARCH_ACTIVITY.name,
    pa.schema([("user_id", pa.string()), ("region_id", pa.string()),
               ("symptom", pa.string())]),
    lambda root, day: ingest_source(root, SEARCH_ACTIVITY, day),
    lambda root: symptoms_steps.bound_contributions(root, SYMPTOMS_CFG, DAY),
    symptoms_bounding.cell_aggregates_sql, symptoms_bounding.bounding_params(SYMPTOMS_CFG, DAY),
    {"users_with_any_search": 1, "symptom": SYMPTOMS_CFG.max_symptoms_per_day})
REPORTS = {"ingest_location_history": MOBILITY, "ingest_search_activity": SYMPTOMS}
COUNTED = {"contributors", "users_with_any_search"}  # once per user-day and level


ENGINES = ["duckdb", pytest.param("spark", marks=[pytest.mark.slow, pytest.mark.integration])]


@pytest.fixture(scope="module")
def spark_session() -> Iterator[object]:
    """One local SparkSession for the module's Spark runs (the engine uses an active
    session as it is)."""
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("Java not found: the Spark engine needs Java 17+")
    from dp_ops.engine.spark import spark_session as start

    session = start(ExecutionSettings(engine="spark", spark_master="local[2]"))
    yield session
    session.stop()


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test's steps on each engine."""
    if request.param == "spark":
        request.getfixturevalue("spark_session")
    with execution_settings_bound(ExecutionSettings(engine=request.param)):
        yield request.param


def case_id(case: dict[str, Any]) -> str:
    return f"{case['source']}/{case['id']}"


def of_outcome(*outcomes: str) -> list[Any]:
    return [pytest.param(c, id=case_id(c)) for c in CASES if c["outcome"] in outcomes]


def build_root(tmp_path: Path, case: dict[str, Any]) -> DataRoot:
    """The corpus's valid base with the case's files laid over it."""
    root = tmp_path / "data"
    shutil.copytree(CORPUS / "base", root)
    target = root / case["target"]
    if case["replace"]:
        shutil.rmtree(target)
    shutil.copytree(CORPUS / case["source"] / case["id"], target, dirs_exist_ok=True)
    return DataRoot(root)


def raw_rows(root: DataRoot, report: Report, files: list[str] | None = None) -> pa.Table:
    """Every input row of the day, with its file name and 0-based row number."""
    tables = []
    for path in sorted(root.raw_partition(report.source, DAY).glob("*.parquet")):
        if files is not None and path.name not in files:
            continue
        table = pq.read_table(path).select(report.columns.names).cast(report.columns)
        tables.append(table.append_column("file", pa.array([path.name] * len(table), pa.string()))
                      .append_column("row", pa.array(range(len(table)), pa.int64())))
    return pa.concat_tables(tables)


def _canonical(value: object) -> object:
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


def as_multiset(table: pa.Table, columns: list[str]) -> list[tuple[object, ...]]:
    """The rows of ``table`` (those ``columns``) as a sorted list; NaN equals NaN."""
    rows = table.select(columns).to_pylist()
    return sorted((tuple(_canonical(r[c]) for c in columns) for r in rows), key=repr)


@functools.cache
def base_regions() -> pd.DataFrame:
    """The base's region table: every case that reaches bounding uses it."""
    return read_regions(CORPUS / "base" / "reference" / "regions.csv")


def aggregates_of(rows: pa.Table, report: Report) -> pd.DataFrame:
    """True bounded cell sums of ``rows``, computed apart from the pipeline's files."""
    con = duckdb.connect()
    try:
        register_ancestors(con, ancestors(base_regions()))
        con.register("valid_rows", rows.select(report.columns.names))
        out = con.execute(report.aggregates_sql("valid_rows"), report.params).df()
    finally:
        con.close()
    return normalised(out)


def normalised(cells: pd.DataFrame) -> pd.DataFrame:
    cells = cells.astype({"level": "int64", "region_id": str, "metric": str, "value": "int64"})
    return cells.sort_values(["level", "region_id", "metric"], ignore_index=True)


def bounded(root: DataRoot, report: Report) -> pd.DataFrame:
    report.bound(root)
    return normalised(pq.read_table(root.bounded_file(report.name, DAY)).to_pandas())


def metric_group(metric: str) -> str:
    for prefix in ("places_", "symptom:"):
        if metric.startswith(prefix):
            return prefix[:-1]
    return metric


def assert_private_free(text: str) -> None:
    leaked = [m for m in PRIVATE_MARKERS if m in text]
    assert not leaked, f"{leaked} in {text!r}"


def assert_nothing_bad_aggregated(root: DataRoot, report: Report,
                                  valid: pa.Table) -> pd.DataFrame:
    """The bounded aggregates are those of the valid rows alone, on known regions."""
    actual = bounded(root, report)
    pd.testing.assert_frame_equal(actual, aggregates_of(valid, report))
    assert set(actual["region_id"]) <= set(base_regions()["region_id"])
    return actual


# -- the corpus itself ---------------------------------------------------------------

def test_cases_and_files_agree() -> None:
    assert {p.name for p in CORPUS.iterdir() if p.name != "__pycache__"} == {
        "README.md", "cases.json", "make_corpus.py", "base", *SOURCES}
    on_disk = {(s, d.name) for s in SOURCES for d in (CORPUS / s).iterdir()}
    listed = [(c["source"], c["id"]) for c in CASES]
    assert len(set(listed)) == len(listed), "a case is listed twice"
    assert on_disk == set(listed), "every directory is a case and every case has one"
    for case in CASES:
        folder = CORPUS / case["source"] / case["id"]
        files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        assert files == case["files"], case_id(case)
        assert case["files"], f"{case_id(case)} has no files"


def test_every_case_documents_its_outcome() -> None:
    readme = (CORPUS / "README.md").read_text()
    for case in CASES:
        assert case["step"] in REPORTS and case["defect"] and case["kind"], case_id(case)
        assert f"`{case['id']}`" in readme, case_id(case)
        if case["outcome"] == "quarantine":
            assert case["quarantined"] and case["file"] in case["files"]
        elif case["outcome"] == "fail":
            assert case["error"] in ERRORS and case["names"]
            assert len(case["message_contains"]) >= 2  # the file and the problem
        elif case["outcome"] == "bounded":
            assert case["user"]
        else:
            assert case["outcome"] == "accept", case_id(case)


def test_corpus_covers_at_least_20_kinds_of_defect() -> None:
    kinds = {c["kind"] for c in CASES if c["outcome"] != "accept"}
    assert len(kinds) >= 20, sorted(kinds)
    assert {c["source"] for c in CASES} == set(SOURCES)
    assert {c["outcome"] for c in CASES} == {"quarantine", "fail", "accept", "bounded"}


def test_corpus_is_small() -> None:
    size = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
    assert size < 1_000_000


def _load_make_corpus() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # leave no __pycache__ in the corpus
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = dont_write
    return module


def _read_back(path: Path) -> pd.DataFrame | None:
    try:
        return pq.read_table(path).to_pandas()
    except Exception:  # unreadable on purpose (truncated, corrupt, zero bytes, not Parquet)
        return None


def test_make_corpus_reproduces_the_corpus(tmp_path: Path) -> None:
    _load_make_corpus().write_corpus(tmp_path)
    for name in ("cases.json", "README.md"):
        assert (tmp_path / name).read_text() == (CORPUS / name).read_text(), name
    ours = sorted(str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*")
                  if p.is_file() and p.name != "make_corpus.py" and "__pycache__" not in p.parts)
    theirs = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert ours == theirs
    for relative in ours:
        mine, regenerated = CORPUS / relative, tmp_path / relative
        if mine.suffix != ".parquet":
            assert mine.read_bytes() == regenerated.read_bytes(), relative
            continue
        # compared read back, not byte for byte: Parquet bytes vary with the writer version
        a, b = _read_back(mine), _read_back(regenerated)
        assert (a is None) == (b is None), relative
        if a is not None:
            pd.testing.assert_frame_equal(a, b, obj=relative)


# -- outcomes ------------------------------------------------------------------------

@pytest.mark.parametrize("case", of_outcome("quarantine"))
def test_bad_rows_are_quarantined_with_their_reason(tmp_path: Path, case: dict[str, Any],
                                                    engine: str) -> None:
    root = build_root(tmp_path, case)
    report = REPORTS[case["step"]]
    result = report.ingest(root, DAY)
    assert_private_free(result.summary)
    assert f"({engine})" in result.summary  # the engine the test means ran

    quarantine_file = root.quarantine_partition(report.source, DAY) / "rows.parquet"
    quarantine = pq.read_table(quarantine_file).to_pandas()
    assert quarantine["source_file"].str.endswith("/" + case["file"]).all()
    assert sorted(zip(quarantine["source_row"].astype(int), quarantine["reason"],
                      strict=True)) == sorted((q["row"], q["reason"])
                                              for q in case["quarantined"])

    rows = raw_rows(root, report)
    rejected = {(Path(case["file"]).name, q["row"]) for q in case["quarantined"]}
    is_rejected = pa.array([(f, r) in rejected for f, r in zip(
        rows["file"].to_pylist(), rows["row"].to_pylist(), strict=True)])
    valid = rows.filter(pc.invert(is_rejected))
    clean = pq.read_table(root.clean_partition(report.source, DAY) / "part.parquet")
    columns = report.columns.names
    # nothing lost, nothing bad kept: clean = input - quarantined, row for row
    assert clean.num_rows + len(quarantine) == rows.num_rows
    assert as_multiset(clean, columns) == as_multiset(valid, columns)
    # and the quarantine holds exactly the rejected input rows
    assert as_multiset(pq.read_table(quarantine_file), columns) == as_multiset(
        rows.filter(is_rejected), columns)
    assert_nothing_bad_aggregated(root, report, valid)


@pytest.mark.parametrize("case", of_outcome("accept", "bounded"))
def test_valid_rows_are_all_accepted(tmp_path: Path, case: dict[str, Any],
                                     engine: str) -> None:
    root = build_root(tmp_path, case)
    report = REPORTS[case["step"]]
    report.ingest(root, DAY)
    assert not (root.quarantine_partition(report.source, DAY) / "rows.parquet").exists()
    rows = raw_rows(root, report)
    clean = pq.read_table(root.clean_partition(report.source, DAY) / "part.parquet")
    assert as_multiset(clean, report.columns.names) == as_multiset(rows, report.columns.names)
    actual = assert_nothing_bad_aggregated(root, report, rows)
    if case["outcome"] != "bounded":
        return
    # the user's influence: bounded aggregates with them minus those of the base alone
    base = aggregates_of(raw_rows(root, report, files=["base.parquet"]), report)
    keys = ["level", "region_id", "metric"]
    change = actual.set_index(keys)["value"].sub(base.set_index(keys)["value"], fill_value=0)
    change = change.reset_index().assign(group=lambda d: d["metric"].map(metric_group))
    l1 = change.groupby(["level", "group"])["value"].apply(lambda v: int(v.abs().sum()))
    assert set(l1.index.get_level_values("group")) <= set(report.bounds)
    for (level, group), size in l1.items():
        assert size <= report.bounds[group], (level, group, size)
    for level in MOBILITY_CFG.levels:
        for group in COUNTED & set(report.bounds):
            assert l1[(level, group)] == 1, (level, group)  # accepted, counted once
        # more places or symptoms than the cap: bounding kept exactly the cap
        capped = "places" if report is MOBILITY else "symptom"
        assert l1[(level, capped)] == report.bounds[capped], level
    assert pc.sum(pc.equal(rows["user_id"], case["user"])).as_py() == 10_000


@pytest.mark.parametrize("case", of_outcome("fail"))
def test_bad_files_fail_naming_file_and_problem(tmp_path: Path, case: dict[str, Any],
                                                engine: str) -> None:
    root = build_root(tmp_path, case)
    report = REPORTS[case["step"]]
    with pytest.raises(ERRORS[case["error"]]) as err:
        report.ingest(root, DAY)
    message = str(err.value)
    assert str(root.root / case["names"]) in message
    for part in case["message_contains"]:
        assert part in message
    assert_private_free(message)
    # nothing was ingested, so nothing can reach an aggregate
    assert not root.clean_partition(report.source, DAY).exists()
    assert not (root.root / "work" / "bounded").exists()
