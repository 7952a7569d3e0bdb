"""Every report's bounding query keeps each user-day within what its declaration states:
for the built-in reports and the test reports alike, on any clean rows of its source, a
user touches only declared cells, of the regions of each level, and changes each metric
group at one level by at most ``sensitivity x contributions`` in total (L1): the bound the
noise of that group is calibrated to and the ledger books (``MetricBudget``).

Properties over random rows (hypothesis, a fixed seed per run through its database, 50
examples per report): a query that broke its bound fails in practically every run."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dp_ops.engine.duckdb import register_ancestors
from dp_ops.layout import DataRoot
from dp_ops.reports.declared import Report
from dp_ops.sources.location_history import ALL_STAY_CATEGORIES
from dp_ops.sources.search_activity import symptom_list

PLUGINS = Path(__file__).resolve().parents[2] / "plugin_report"
DAY = date(2020, 3, 2)
SYMPTOMS = ("Cough", "Fever", "Anosmia", "Headache")
APPS = ("Maps", "News", "Radio")
# country C; sub-regions A, B; finest A1, A2, B1, B2, B3
FINEST = ("A1", "A2", "B1", "B2", "B3")
ANCESTORS = pd.DataFrame(
    [(f, 2, f) for f in FINEST] + [(f, 1, f[0]) for f in FINEST] + [(f, 0, "C") for f in FINEST]
    + [("A", 1, "A"), ("A", 0, "C"), ("B", 1, "B"), ("B", 0, "C"), ("C", 0, "C")],
    columns=["finest_region_id", "level", "region_id"])
REGIONS_AT = {lv: set(ANCESTORS.loc[ANCESTORS["level"] == lv, "region_id"]) for lv in (0, 1, 2)}

users = st.sampled_from([f"u{i}" for i in range(5)])
finest = st.sampled_from(FINEST)
# a clean row of each source, as its ingest keeps it (columns in clean order)
ROWS: dict[str, tuple[dict[str, pa.DataType], Any]] = {
    "location_history": (
        {"user_id": pa.string(), "region_id": pa.string(), "place_id": pa.string(),
         "place_category": pa.string(), "dwell_hours": pa.float64()},
        st.tuples(users, finest, st.sampled_from(["p1", "p2", "p3"]),
                  st.sampled_from(ALL_STAY_CATEGORIES),
                  st.floats(min_value=0.0, max_value=24.0, allow_nan=False))),
    "search_activity": (
        {"user_id": pa.string(), "region_id": pa.string(), "symptom": pa.string()},
        st.tuples(users, finest, st.one_of(st.none(), st.sampled_from(SYMPTOMS)))),
    "app_sessions": (
        {"user_id": pa.string(), "region_id": pa.string(), "app": pa.string(),
         "minutes": pa.float64()},
        st.tuples(users, finest, st.sampled_from(APPS),
                  st.floats(min_value=0.0, max_value=1440.0, allow_nan=False))),
}


def _declarations() -> list[Report[Any]]:
    """The built-in reports and the test reports (their packages put on sys.path for the
    import only: nothing here registers them)."""
    import importlib

    sys.path.insert(0, str(PLUGINS))
    try:
        modules = ["dp_ops.reports.mobility.declaration", "dp_ops.reports.symptoms.declaration",
                   "presence_report.declaration", "sessions_report.declaration"]
        return [importlib.import_module(m).REPORT for m in modules]
    finally:
        sys.path.remove(str(PLUGINS))


DECLARED = {r.name: r for r in _declarations()}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> DataRoot:
    root = DataRoot(tmp_path_factory.mktemp("bounding_contract"))
    symptom_list(root).parent.mkdir(parents=True)
    symptom_list(root).write_text("\n".join(SYMPTOMS) + "\n")
    return root


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    register_ancestors(con, ANCESTORS)
    yield con
    con.close()


def test_every_report_is_checked() -> None:
    assert set(DECLARED) == {"mobility", "symptoms", "presence", "sessions"}
    assert {r.spec.sources[0] for r in DECLARED.values()} == set(ROWS)


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_a_user_day_stays_within_its_declared_cells_and_budget(
        name: str, root: DataRoot, con: duckdb.DuckDBPyConnection) -> None:
    report = DECLARED[name]
    cfg = report.load_config()
    group_of = {cell: group for group, cells in report.cells(root, cfg).items()
                for cell in cells}
    bound = {b.name: b.sensitivity * b.contributions for b in cfg.metric_budgets}
    columns, row = ROWS[report.spec.sources[0]]
    query = report.bounding.contributions("clean_rows")

    @settings(max_examples=50, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(st.lists(row, max_size=30))
    def check(rows: list[tuple[Any, ...]]) -> None:
        con.register("clean_rows", pa.table(
            {c: pa.array([r[i] for r in rows], t) for i, (c, t) in enumerate(columns.items())}))
        out = con.execute(query, report.bounding_params(cfg, DAY)).df()
        if out.empty:
            return
        assert set(out["metric"]) <= set(group_of), set(out["metric"]) - set(group_of)
        assert set(out["level"].astype(int)) <= set(cfg.levels)
        for level, regions in out.groupby(out["level"].astype(int))["region_id"]:
            assert set(regions) <= REGIONS_AT[level], (level, set(regions))
        assert (out["value"] == out["value"].round()).all()
        out["group"] = out["metric"].map(group_of)
        l1 = out.assign(size=out["value"].abs()).groupby(
            ["user_id", "level", "group"])["size"].sum()
        for (user, level, group), size in l1.items():
            assert size <= bound[group], (user, level, group, size, bound[group])

    check()
