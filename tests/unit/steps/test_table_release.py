"""The release parts of a region-values report: the table, its column schema and its words
derive from a few declared values (the end-to-end run is
tests/integration/test_plugin_report_e2e.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from dp_ops.steps.table_release import TableRelease


@dataclass(frozen=True)
class Cfg:
    min_area_km2: float = 3.0
    levels: tuple[int, ...] = (0, 1, 2)
    first_public_date: date = date(2020, 1, 1)
    run_epsilon: float = 1.5
    cap: float = 3.0
    min_users: int = 100


def _release(**changes: object) -> TableRelease[Cfg]:
    values: dict[str, object] = dict(
        report="visits", title="Visits", stem="Visits", value_column="visitors",
        threshold=lambda cfg: cfg.min_users, parameters=lambda cfg: {"epsilon": 0.5},
        what="Visitors per region.", bounds="One region per user-day.")
    return TableRelease(**(values | changes))  # type: ignore[arg-type]


def test_one_cell_per_region_publishes_no_cell_column() -> None:
    release = _release()
    assert release.columns == ("date", "region_id", "level", "country_region_code",
                               "visitors")
    files = release.column_contract["files"]
    assert [f["pattern"] for f in files] == ["Visits.csv", "Visits.parquet"]
    assert [c["name"] for c in files[0]["columns"]] == list(release.columns)
    assert {c["name"]: c["type"] for c in files[1]["columns"]}["visitors"] == "integer"


def test_several_cells_per_region_publish_their_cell_under_its_name() -> None:
    release = _release(cell_column="app")
    assert release.columns[-2:] == ("app", "visitors")


def test_the_manifest_and_the_statement_state_the_thresholds() -> None:
    release, cfg = _release(), Cfg()
    extras = release.manifest_extras(None, None, cfg, date(2020, 1, 3))  # type: ignore[arg-type]
    assert extras == {"parameters": {"min_area_km2": 3.0, "threshold": 100, "epsilon": 0.5}}
    statement = release.statement(cfg, {"rows": {"published": 1234}})
    assert statement.thresholds == ("A value under 100 is not published, nor one of a "
                                    "region under 3 km2.",)
    assert statement.published == "Published values: 1,234." and statement.what == (
        "Visitors per region.")
