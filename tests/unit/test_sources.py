"""Sources as plug-ins: a SourceSpec states a raw source's contract, the registry finds it
by name through the ``dp_ops.sources`` entry points, and the one ingest step runs it."""

from __future__ import annotations

from datetime import date
from functools import partial
from importlib.metadata import EntryPoint
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dp_demo.geography import demo_regions

from dp_ops import registered as registry_module
from dp_ops.engine.sql import render_sql
from dp_ops.errors import IngestError
from dp_ops.layout import DataRoot
from dp_ops.regions import write_regions
from dp_ops.reports.spec import report_specs
from dp_ops.sources import spec as source_registry
from dp_ops.sources.search_activity import SOURCE as SEARCH_ACTIVITY
from dp_ops.sources.spec import (
    FINEST_REGIONS,
    SourceSchema,
    SourceSpec,
    UnknownSource,
    source_spec,
    source_specs,
)
from dp_ops.steps.ingest import ingest_source, ingest_sources

DAY = date(2020, 1, 7)


def _spec(**changes: object) -> SourceSpec:
    fields: dict[str, object] = {
        "name": "app_sessions", "label": "app sessions",
        "schema": SourceSchema(("user_id", "region_id", "app"), ("minutes",)),
        "judging_sql": partial(render_sql, "search_activity/ingest")}
    return SourceSpec(**(fields | changes))  # type: ignore[arg-type]


def test_the_built_in_sources_are_registered_and_every_report_finds_its_own() -> None:
    assert {"location_history", "search_activity"} <= set(source_specs())
    for report in report_specs().values():
        for name in report.sources:
            assert source_spec(name).name == name


def test_an_unknown_source_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UnknownSource, match=r"'app_sessions'.*location_history"):
        ingest_sources(DataRoot(tmp_path), ("app_sessions",), DAY)


@pytest.mark.parametrize("changes,message", [
    ({"name": "App Sessions"}, "lower-case"),
    ({"schema": SourceSchema(("user", "region_id"))}, r"lack \['user_id'\]"),
    ({"schema": SourceSchema(("user_id", "region_id", "date"))}, "optional column"),
    ({"reference_files": ("../regions.csv",)}, "no plain file name"),
    ({"reference_files": ("lists/apps.txt",)}, "no plain file name"),
])
def test_a_source_spec_that_breaks_the_contract_cannot_be_built(changes: dict[str, object],
                                                                 message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _spec(**changes)


def test_a_spec_reads_the_finest_regions_by_default_and_keeps_its_required_columns() -> None:
    spec = _spec()
    assert spec.lookups == (FINEST_REGIONS,)
    assert spec.clean_columns == ("user_id", "region_id", "app", "minutes")


@pytest.mark.parametrize("entry,message", [
    ("dp_ops.sources.search_activity:SYMPTOM_LIST", "not a SourceSpec"),
    ("dp_ops.sources.search_activity:SOURCE", "the names must agree"),
])
def test_a_wrong_entry_point_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch,
                                                   entry: str, message: str) -> None:
    points = [EntryPoint("location_history", entry, source_registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry_module, "entry_points", lambda group: points)
    source_specs.cache_clear()
    try:
        with pytest.raises((TypeError, ValueError), match=message):
            source_specs()
    finally:
        source_specs.cache_clear()


def test_two_packages_registering_one_name_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    points = [EntryPoint("search_activity", "dp_ops.sources.search_activity:SOURCE",
                         source_registry.ENTRY_POINT_GROUP),
              EntryPoint("search_activity", "other_agency.sources:SEARCH",
                         source_registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry_module, "entry_points", lambda group: points)
    monkeypatch.setattr(EntryPoint, "load", lambda self: SEARCH_ACTIVITY)
    source_specs.cache_clear()
    try:
        with pytest.raises(ValueError, match="registered twice"):
            source_specs()
    finally:
        source_specs.cache_clear()


def test_ingest_refuses_a_day_while_a_reference_file_is_missing(tmp_path: Path) -> None:
    root = DataRoot(tmp_path)
    root.regions_csv.parent.mkdir(parents=True)
    write_regions(demo_regions(), root.regions_csv)
    source = _spec(reference_files=("apps.txt",))
    part = root.raw_partition(source.name, DAY)
    part.mkdir(parents=True)
    pq.write_table(pa.table({"user_id": ["u1"], "region_id": ["r"], "app": ["a"],
                             "minutes": [1.0]}), part / "part-0.parquet")
    with pytest.raises(IngestError, match=r"app_sessions: reference file .*apps\.txt"):
        ingest_source(root, source, DAY)
    assert not root.clean_partition(source.name, DAY).exists()


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", ""])
def test_a_reference_file_is_a_plain_name_under_reference(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="plain file name"):
        DataRoot(tmp_path).reference_file(name)
